"""Memory users and a user's pages: notebook, facts, episodes, context preview, as-of, activity."""

from __future__ import annotations

from datetime import datetime, time

from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from memory_admin.errors import Conflict, DomainError
from memory_admin.models import Episode, Fact, MemoryUser, Notebook, NotebookRevision
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import WRITE_MEMORY, get_visible, visible
from memory_admin.services.notebook import notebook_restore, notebook_save
from memory_admin.views.base import paginate, tenant_view
from memory_admin.views.diffs import line_diff

# Tabs of a user's page; members see only the first two (their own notebook and facts).
TABS = [("notebook", "Notebook"), ("facts", "Facts"), ("episodes", "Episodes"), ("context", "Context preview"),
        ("asof", "As of"), ("activity", "Activity")]
MEMBER_TABS = {"notebook", "facts"}
FACT_FILTERS = ("status", "category", "kind", "source", "stale", "q")


@tenant_view(staff_only=True)
def users(request: HttpRequest) -> HttpResponse:
    q = request.GET.get("q", "").strip()
    sort = request.GET.get("sort", "facts")
    page = paginate(request, sel.memory_users(request.principal, q=q, sort=sort))
    return render(request, "dashboard/users.html", {"page": page, "q": q, "sort": sort,
                                                    "sorts": list(sel.USER_SORTS)})


def _user_context(request: HttpRequest, user_id: int, tab: str) -> dict:
    if request.is_member and tab not in MEMBER_TABS:
        raise Http404("Members see their own notebook and facts only.")
    memory_user = get_visible(request.principal, MemoryUser.objects.all(), pk=user_id)
    tabs = [(key, label) for key, label in TABS if not request.is_member or key in MEMBER_TABS]
    return {"memory_user": memory_user, "tab": tab, "tabs": tabs}


# --- Notebook -------------------------------------------------------------------------------------

def _notebook_page(request: HttpRequest, ctx: dict, *, draft: str | None = None, base_version: int | None = None,
                   conflict: dict | None = None, preview: bool = False, status: int = 200) -> HttpResponse:
    memory_user = ctx["memory_user"]
    notebook = visible(request.principal, Notebook.objects.filter(memory_user=memory_user)).first()
    revisions = []
    diff = None
    if notebook is not None:
        revisions = list(
            visible(request.principal, NotebookRevision.objects.filter(notebook=notebook))
            .only("version", "author", "note", "created_at", "notebook_id").order_by("-version")[:50]
        )
        diff_version = request.GET.get("diff")
        if diff_version and diff_version.isdigit():
            pair = {r.version: r for r in visible(request.principal, NotebookRevision.objects.filter(
                notebook=notebook, version__in=[int(diff_version) - 1, int(diff_version)]))}
            new = pair.get(int(diff_version))
            if new is not None:
                old = pair.get(int(diff_version) - 1)
                diff = {"version": new.version, "rows": line_diff(old.content if old else "", new.content,
                                                                  old_label=f"v{new.version - 1}",
                                                                  new_label=f"v{new.version}")}
    current = notebook.content if notebook else ""
    ctx.update({
        "notebook": notebook,
        "draft": current if draft is None else draft,
        "base_version": (notebook.version if notebook else 0) if base_version is None else base_version,
        "revisions": revisions,
        "diff": diff,
        "conflict": conflict,
        "preview": preview,
        "can_edit": request.principal.can(WRITE_MEMORY),
    })
    return render(request, "dashboard/user_notebook.html", ctx, status=status)


@tenant_view()
def user_notebook(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "notebook")
    if request.method != "POST":
        return _notebook_page(request, ctx)
    draft = request.POST.get("content", "").replace("\r\n", "\n")
    try:
        base_version = int(request.POST.get("base_version", "0"))
    except ValueError:
        base_version = 0
    if "preview" in request.POST:  # the no-JavaScript preview: render the draft, save nothing
        return _notebook_page(request, ctx, draft=draft, base_version=base_version, preview=True)
    try:
        notebook_save(principal=request.principal, memory_user=ctx["memory_user"], content=draft,
                      base_version=base_version, note=request.POST.get("note", "")[:500])
    except Conflict as exc:
        current = Notebook.objects.get(tenant_id=request.principal.tenant_id, memory_user=ctx["memory_user"])
        conflict = {
            "detail": exc.detail, "their_version": current.version, "your_base": base_version,
            "current": current.content, "updated_by": current.updated_by, "updated_at": current.updated_at,
            "rows": line_diff(current.content, draft, old_label=f"saved v{current.version}", new_label="your draft"),
        }
        # The draft stays in the editor; saving again now (base = current) is a deliberate overwrite.
        return _notebook_page(request, ctx, draft=draft, base_version=current.version, conflict=conflict,
                              status=409)
    except DomainError as exc:
        ctx["error"] = exc.detail
        return _notebook_page(request, ctx, draft=draft, base_version=base_version, status=exc.status)
    return redirect(reverse("user_notebook", args=[request.tenant.slug, user_id]) + "?saved=1")


@require_POST
@tenant_view()
def markdown_preview(request: HttpRequest) -> HttpResponse:
    """The live preview of the notebook and skill editors: the draft rendered and sanitised, nothing stored."""
    return render(request, "dashboard/_markdown.html", {"text": request.POST.get("content", "")})


@tenant_view(ability=WRITE_MEMORY)
def notebook_restore_view(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "notebook")
    if request.method != "POST":
        return redirect("user_notebook", request.tenant.slug, user_id)
    try:
        notebook_restore(principal=request.principal, memory_user=ctx["memory_user"],
                         version=int(request.POST["version"]), base_version=int(request.POST["base_version"]))
    except (KeyError, ValueError, Notebook.DoesNotExist, NotebookRevision.DoesNotExist) as exc:
        raise Http404("No such revision.") from exc
    except DomainError as exc:
        ctx["error"] = exc.detail
        return _notebook_page(request, ctx, status=exc.status)
    return redirect(reverse("user_notebook", args=[request.tenant.slug, user_id]) + "?saved=1")


# --- Facts ----------------------------------------------------------------------------------------

@tenant_view()
def user_facts(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "facts")
    filters = {name: request.GET.get(name, "") for name in FACT_FILTERS}
    if "status" not in request.GET:
        filters["status"] = "active"
    page = paginate(request, sel.fact_rows(request.principal, ctx["memory_user"], filters))
    ctx.update({"page": page, "filters": filters, "choices": _fact_choices()})
    return render(request, "dashboard/user_facts.html", ctx)


def _fact_choices() -> dict:
    return {"status": Fact.Status.values, "category": Fact.Category.values, "kind": Fact.Kind.values,
            "source": Fact.Source.values}


# --- Episodes, context preview, as of, activity ---------------------------------------------------

@tenant_view(staff_only=True)
def user_episodes(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "episodes")
    qs = visible(request.principal, Episode.objects.filter(memory_user=ctx["memory_user"]))
    outcome = request.GET.get("outcome", "")
    if outcome:
        qs = qs.filter(outcome=outcome)
    qs = qs.select_related("thread").annotate(fact_count=Count("facts")).order_by("-started_at")
    ctx.update({"page": paginate(request, qs, 30), "outcome": outcome, "outcomes": Episode.Outcome.values})
    return render(request, "dashboard/user_episodes.html", ctx)


def _context_block():
    """The retrieval engineer's `context_block`; None until that module exists."""
    try:
        from memory_admin.services.context import context_block
    except ImportError:
        return None
    return context_block


@tenant_view(staff_only=True)
def user_context(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "context")
    task = request.GET.get("task", "")
    try:
        budget = max(50, min(32000, int(request.GET.get("budget", "2000"))))
    except ValueError:
        budget = 2000
    block_fn = _context_block()
    block = None
    error = None
    if block_fn is not None and "budget" in request.GET:
        try:
            block = block_fn(principal=request.principal, memory_user=ctx["memory_user"], task=task,
                             budget_tokens=budget)
        except DomainError as exc:
            error = exc.detail
    ctx.update({"task": task, "budget": budget, "available": block_fn is not None, "context_block": block,
                "error": error})
    return render(request, "dashboard/user_context.html", ctx)


@tenant_view(staff_only=True)
def user_asof(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "asof")
    raw = request.GET.get("date", "")
    moment = None
    error = None
    if raw:
        try:
            day = datetime.fromisoformat(raw)
            # A bare date means "at the end of that day".
            moment = day if "T" in raw else datetime.combine(day.date(), time.max)
            if timezone.is_naive(moment):
                moment = timezone.make_aware(moment)
        except ValueError:
            error = "Give a date as YYYY-MM-DD (or YYYY-MM-DDTHH:MM)."
    beliefs = sel.beliefs_as_of(request.principal, ctx["memory_user"], moment) if moment else None
    ctx.update({"date": raw, "moment": moment, "beliefs": beliefs, "error": error,
                "today": timezone.localdate().isoformat()})
    return render(request, "dashboard/user_asof.html", ctx)


@tenant_view(staff_only=True)
def user_activity(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "activity")
    ctx["page"] = paginate(request, sel.audit_events(request.principal, {}, memory_user=ctx["memory_user"]))
    return render(request, "dashboard/user_activity.html", ctx)
