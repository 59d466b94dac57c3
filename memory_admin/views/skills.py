"""Skills: a tree by path, an editor with versions and diffs; saves are version-checked (409-safe)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from memory_admin.errors import Conflict, DomainError
from memory_admin.inputs import whole_number
from memory_admin.models import MemoryUser, Skill, SkillRevision
from memory_admin.selectors.access import WRITE_MEMORY, get_visible, memory_user_for, visible
from memory_admin.services.skills import skill_save
from memory_admin.views.base import tenant_view
from memory_admin.views.diffs import line_diff


def skill_tree(skills: list[Skill]) -> list[dict]:
    """Flatten paths into rows with depth: a folder row the first time a directory appears."""
    rows: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for skill in skills:
        owner = skill.memory_user.external_id if skill.memory_user else ""
        parts = skill.path.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1])
            if (owner, folder) not in seen:
                seen.add((owner, folder))
                rows.append({"folder": parts[depth] + "/", "depth": depth, "owner": owner})
        rows.append({"skill": skill, "name": parts[-1], "depth": len(parts) - 1, "owner": owner})
    return rows


@tenant_view(staff_only=True)
def skills(request: HttpRequest) -> HttpResponse:
    prefix = request.GET.get("prefix", "").strip().lower()
    qs = visible(request.principal, Skill.objects.all()).select_related("memory_user")
    if prefix:
        qs = qs.filter(path__startswith=prefix)
    # Tenant skills first, then each user's, each sorted by path so folders group together.
    rows = list(qs.order_by("memory_user__external_id", "path")[:1000])
    rows.sort(key=lambda s: (s.memory_user is not None, s.memory_user.external_id if s.memory_user else "", s.path))
    return render(request, "dashboard/skills.html", {"tree": skill_tree(rows), "prefix": prefix, "count": len(rows)})


@tenant_view(staff_only=True)
def skill_edit(request: HttpRequest) -> HttpResponse:
    principal = request.principal
    skill = None
    if request.GET.get("id"):
        skill = get_visible(principal, Skill.objects.select_related("memory_user"), pk=request.GET["id"])
    ctx: dict = {"skill": skill, "can_edit": principal.can(WRITE_MEMORY), "conflict": None, "error": None}
    status = 200
    if request.method == "POST" and ctx["can_edit"]:
        path = request.POST.get("path", skill.path if skill else "")
        content = request.POST.get("content", "").replace("\r\n", "\n")
        base = whole_number(request.POST.get("base_version"), field="base_version", default=0)
        owner_id = request.POST.get("owner", "").strip()
        try:
            memory_user = skill.memory_user if skill else (memory_user_for(principal, owner_id) if owner_id else None)
            saved = skill_save(
                principal=principal, path=path, content=content, base_version=base, memory_user=memory_user
            )
            return redirect(reverse("skill_edit", args=[request.tenant.slug]) + f"?id={saved.pk}&saved=1")
        except Conflict as exc:
            current = Skill.objects.filter(
                tenant_id=principal.tenant_id,
                path=path.strip().strip("/").lower(),
                memory_user=skill.memory_user if skill else None,
            ).first()
            current_text = current.content if current else ""
            ctx["conflict"] = {
                "detail": exc.detail,
                "current": current_text,
                "version": exc.extra.get("current_version"),
                "rows": line_diff(current_text, content, old_label="saved", new_label="your draft"),
            }
            base = exc.extra.get("current_version", base)
            status = 409
            skill = skill or current
        except DomainError as exc:
            ctx["error"] = exc.detail
            status = exc.status
        ctx.update({"draft": content, "base_version": base, "path": path, "owner": owner_id})
    else:
        ctx.update(
            {
                "draft": skill.content if skill else "",
                "base_version": skill.version if skill else 0,
                "path": skill.path if skill else request.GET.get("path", ""),
                "owner": "",
            }
        )
    ctx["skill"] = skill
    if skill is not None:
        ctx["revisions"] = list(
            visible(principal, SkillRevision.objects.filter(skill=skill))
            .only("version", "author", "created_at", "skill_id")
            .order_by("-version")[:50]
        )
        diff_version = whole_number(request.GET.get("diff"), field="diff")
        if diff_version is not None:
            pair = {
                r.version: r
                for r in SkillRevision.objects.filter(
                    skill=skill, version__in=[int(diff_version) - 1, int(diff_version)]
                )
            }
            if int(diff_version) in pair:
                old = pair.get(int(diff_version) - 1)
                ctx["diff"] = {
                    "version": int(diff_version),
                    "rows": line_diff(
                        old.content if old else "",
                        pair[int(diff_version)].content,
                        old_label=f"v{int(diff_version) - 1}",
                        new_label=f"v{diff_version}",
                    ),
                }
    ctx["users"] = (
        []
        if skill
        else list(
            visible(principal, MemoryUser.objects.filter(erased_at__isnull=True))
            .order_by("external_id")
            .values_list("external_id", flat=True)[:200]
        )
    )
    return render(request, "dashboard/skill_edit.html", ctx, status=status)
