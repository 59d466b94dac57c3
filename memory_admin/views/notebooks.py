"""Notebook pages: a memory user's notebook and the tenant-wide one (memory_user NULL) share one
editor, preview, revision list with diffs and the conflict-safe save (`notebook_save`).

A page describes its notebook in a context dict: `memory_user` (None for the tenant notebook),
`template`, `save_url`, `restore_url` and `can_edit`.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from memory_admin.errors import Conflict, DomainError
from memory_admin.inputs import whole_number
from memory_admin.models import Notebook, NotebookRevision
from memory_admin.selectors.access import WRITE_MEMORY, visible
from memory_admin.services.notebook import notebook_restore, notebook_save
from memory_admin.views.base import forbidden, tenant_view
from memory_admin.views.diffs import add_their_lines, line_diff, side_by_side

READ_ONLY = "Your role may read this notebook but not change it."


def notebook_page(
    request: HttpRequest,
    ctx: dict,
    *,
    draft: str | None = None,
    base_version: int | None = None,
    conflict: dict | None = None,
    preview: bool = False,
    status: int = 200,
) -> HttpResponse:
    notebook = visible(request.principal, Notebook.objects.filter(memory_user=ctx["memory_user"])).first()
    revisions = []
    diff = None
    if notebook is not None:
        revisions = list(
            visible(request.principal, NotebookRevision.objects.filter(notebook=notebook))
            .only("version", "author", "note", "created_at", "notebook_id")
            .order_by("-version")[:50]
        )
        diff_version = whole_number(request.GET.get("diff"), field="diff")
        if diff_version is not None:
            pair = {
                r.version: r
                for r in visible(
                    request.principal,
                    NotebookRevision.objects.filter(
                        notebook=notebook, version__in=[int(diff_version) - 1, int(diff_version)]
                    ),
                )
            }
            new = pair.get(int(diff_version))
            if new is not None:
                old = pair.get(int(diff_version) - 1)
                diff = {
                    "version": new.version,
                    "rows": line_diff(
                        old.content if old else "",
                        new.content,
                        old_label=f"v{new.version - 1}",
                        new_label=f"v{new.version}",
                    ),
                }
    current = notebook.content if notebook else ""
    ctx.update(
        {
            "notebook": notebook,
            "draft": current if draft is None else draft,
            "base_version": (notebook.version if notebook else 0) if base_version is None else base_version,
            "revisions": revisions,
            "diff": diff,
            "conflict": conflict,
            "preview": preview,
        }
    )
    return render(request, ctx["template"], ctx, status=status)


def notebook_post(request: HttpRequest, ctx: dict) -> HttpResponse:
    """Preview or save the editor's draft. On a conflict nothing is overwritten: the draft stays in the
    editor next to a diff against the version saved meanwhile."""
    draft = request.POST.get("content", "").replace("\r\n", "\n")
    base_version = whole_number(request.POST.get("base_version"), field="base_version", default=0)
    if "preview" in request.POST:  # the no-JavaScript preview: render the draft, save nothing
        return notebook_page(request, ctx, draft=draft, base_version=base_version, preview=True)
    if not ctx["can_edit"]:
        return forbidden(request, READ_ONLY)
    try:
        notebook_save(
            principal=request.principal,
            memory_user=ctx["memory_user"],
            content=draft,
            base_version=base_version,
            note=request.POST.get("note", "")[:500],
        )
    except Conflict as exc:
        current = Notebook.objects.get(tenant_id=request.principal.tenant_id, memory_user=ctx["memory_user"])
        conflict = {
            "detail": exc.detail,
            "their_version": current.version,
            "your_base": base_version,
            "current": current.content,
            "updated_by": current.updated_by,
            "updated_at": current.updated_at,
            "rows": side_by_side(current.content, draft),
            "merged": add_their_lines(current.content, draft),
        }
        # The draft stays in the editor; saving again now (base = current) is a deliberate overwrite.
        return notebook_page(request, ctx, draft=draft, base_version=current.version, conflict=conflict, status=409)
    except DomainError as exc:
        ctx["error"] = exc.detail
        return notebook_page(request, ctx, draft=draft, base_version=base_version, status=exc.status)
    return redirect(ctx["save_url"] + "?saved=1")


def notebook_restore_post(request: HttpRequest, ctx: dict) -> HttpResponse:
    """Save an old revision's text as a new revision, conflict-safe like any save."""
    if request.method != "POST":
        return redirect(ctx["save_url"])
    if not ctx["can_edit"]:
        return forbidden(request, READ_ONLY)
    version = whole_number(request.POST.get("version"), field="version")
    base_version = whole_number(request.POST.get("base_version"), field="base_version")
    try:
        if version is None or base_version is None:
            raise KeyError("version")
        notebook_restore(
            principal=request.principal, memory_user=ctx["memory_user"], version=version, base_version=base_version
        )
    except (KeyError, Notebook.DoesNotExist, NotebookRevision.DoesNotExist) as exc:
        raise Http404("No such revision.") from exc
    except DomainError as exc:
        ctx["error"] = exc.detail
        return notebook_page(request, ctx, status=exc.status)
    return redirect(ctx["save_url"] + "?saved=1")


# --- The tenant notebook --------------------------------------------------------------------------


def _tenant_ctx(request: HttpRequest) -> dict:
    slug = request.tenant.slug
    return {
        "memory_user": None,
        "nav": "tenant_notebook",
        "template": "dashboard/tenant_notebook.html",
        "save_url": reverse("tenant_notebook", args=[slug]),
        "restore_url": reverse("tenant_notebook_restore", args=[slug]),
        # Everyone in the tenant reads it; members, though allowed to write their own memory, do not
        # write the one every user's agents read.
        "can_edit": request.principal.can(WRITE_MEMORY) and not request.is_member,
    }


@tenant_view()
def tenant_notebook(request: HttpRequest) -> HttpResponse:
    ctx = _tenant_ctx(request)
    if request.method != "POST":
        return notebook_page(request, ctx)
    return notebook_post(request, ctx)


@tenant_view(ability=WRITE_MEMORY)
def tenant_notebook_restore(request: HttpRequest) -> HttpResponse:
    return notebook_restore_post(request, _tenant_ctx(request))
