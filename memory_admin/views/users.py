"""Memory users and a user's pages: notebook, facts, episodes, context preview, as-of, activity."""

from __future__ import annotations

from datetime import datetime, time

from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from memory_admin.errors import DomainError
from memory_admin.inputs import implausible_time_reason
from memory_admin.models import Episode, MemoryUser
from memory_admin.retrieval.context import MAX_BUDGET_TOKENS, context_block
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import WRITE_MEMORY, get_visible, visible
from memory_admin.views.base import (
    CONTEXT_BUDGET_MIN,
    context_budget,
    paginate,
    preview_fields,
    task_too_long,
    tenant_view,
)
from memory_admin.views.facts import band_descriptions, fact_choices, fact_filters
from memory_admin.views.notebooks import notebook_page, notebook_post, notebook_restore_post

# Tabs of a user's page; members see only the first two (their own notebook and facts).
TABS = [
    ("notebook", "Notebook"),
    ("facts", "Facts"),
    ("episodes", "Episodes"),
    ("context", "Context preview"),
    ("asof", "As of"),
    ("activity", "Activity"),
]
MEMBER_TABS = {"notebook", "facts"}
# The same names as the member's top nav: one name per page.
MEMBER_TAB_LABELS = {"notebook": "My notebook", "facts": "What agents believe about me"}


@tenant_view(staff_only=True)
def users(request: HttpRequest) -> HttpResponse:
    q = request.GET.get("q", "").strip()
    sort = request.GET.get("sort", "facts")
    ids, window = sel.memory_users(request.principal, q=q, sort=sort)
    page = paginate(request, ids)
    page.object_list = sel.memory_user_rows(request.principal, list(page.object_list))
    return render(
        request,
        "dashboard/users.html",
        {"page": page, "q": q, "sort": sort, "window": window, "sorts": list(sel.USER_SORTS)},
    )


def _user_context(request: HttpRequest, user_id: int, tab: str) -> dict:
    if request.is_member and tab not in MEMBER_TABS:
        raise Http404("Members see their own notebook and facts only.")
    memory_user = get_visible(request.principal, MemoryUser.objects.all(), pk=user_id)
    tabs = [(key, MEMBER_TAB_LABELS[key]) for key, _ in TABS if key in MEMBER_TABS] if request.is_member else TABS
    return {"memory_user": memory_user, "tab": tab, "tabs": tabs}


# --- Notebook (the editor itself lives in views.notebooks, shared with the tenant notebook) --------


def _notebook_ctx(request: HttpRequest, user_id: int) -> dict:
    ctx = _user_context(request, user_id, "notebook")
    slug = request.tenant.slug
    ctx.update(
        {
            "template": "dashboard/user_notebook.html",
            "save_url": reverse("user_notebook", args=[slug, user_id]),
            "restore_url": reverse("notebook_restore", args=[slug, user_id]),
            "can_edit": request.principal.can(WRITE_MEMORY),
        }
    )
    return ctx


@tenant_view()
def user_notebook(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _notebook_ctx(request, user_id)
    if request.method != "POST":
        return notebook_page(request, ctx)
    return notebook_post(request, ctx)


@require_POST
@tenant_view()
def markdown_preview(request: HttpRequest) -> HttpResponse:
    """The live preview of the notebook and skill editors: the draft rendered and sanitised, nothing stored."""
    return render(request, "dashboard/_markdown.html", {"text": request.POST.get("content", "")})


@tenant_view(ability=WRITE_MEMORY)
def notebook_restore_view(request: HttpRequest, user_id: int) -> HttpResponse:
    return notebook_restore_post(request, _notebook_ctx(request, user_id))


# --- Facts ----------------------------------------------------------------------------------------


@tenant_view()
def user_facts(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "facts")
    if request.is_member:
        show = request.GET.get("show", "in_use")
        show = show if show in sel.MEMBER_SHOWS else "in_use"
        q = request.GET.get("q", "").strip()
        page = paginate(request, sel.member_fact_rows(request.principal, ctx["memory_user"], show, q))
        ctx.update({"page": page, "show": show, "shows": sel.MEMBER_SHOWS, "q": q})
        return render(request, "dashboard/member_facts.html", ctx)
    filters = fact_filters(request)
    page = paginate(request, sel.fact_rows(request.principal, ctx["memory_user"], filters))
    ctx.update({"page": page, "filters": filters, "choices": fact_choices(), "bands": band_descriptions(filters)})
    return render(request, "dashboard/user_facts.html", ctx)


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


@tenant_view(staff_only=True)
def user_context(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "context")
    form = preview_fields(request)
    task = form.get("task", "")
    budget = context_budget(form.get("budget"), 2000)
    block = None
    error = task_too_long(task)
    if "budget" in form and not error:
        try:
            block = context_block(
                principal=request.principal, memory_user=ctx["memory_user"], task=task, budget_tokens=budget
            )
        except DomainError as exc:
            error = exc.detail
    ctx.update(
        {
            "task": task,
            "budget": budget,
            "context_block": block,
            "error": error,
            "budget_min": CONTEXT_BUDGET_MIN,
            "budget_max": MAX_BUDGET_TOKENS,
        }
    )
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
            reason = implausible_time_reason(moment)
            if reason:
                moment, error = None, f"The date {reason}."
        except (ValueError, OverflowError):
            error = "Give a date as YYYY-MM-DD (or YYYY-MM-DDTHH:MM)."
    beliefs = sel.beliefs_as_of(request.principal, ctx["memory_user"], moment) if moment else None
    ctx.update(
        {"date": raw, "moment": moment, "beliefs": beliefs, "error": error, "today": timezone.localdate().isoformat()}
    )
    return render(request, "dashboard/user_asof.html", ctx)


@tenant_view(staff_only=True)
def user_activity(request: HttpRequest, user_id: int) -> HttpResponse:
    ctx = _user_context(request, user_id, "activity")
    ctx["page"] = paginate(request, sel.audit_events(request.principal, {}, memory_user=ctx["memory_user"]))
    return render(request, "dashboard/user_activity.html", ctx)
