"""Exploration for operators: conversations with their provenance, tenant-wide search with the
product's ranking, and a context playground comparing two budgets. Reads only."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from memory_admin.errors import DomainError
from memory_admin.models import Fact, MemoryUser
from memory_admin.retrieval.context import MAX_BUDGET_TOKENS, context_block
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import visible
from memory_admin.services.checkpoints import thread_checkpoints
from memory_admin.views.base import (
    CONTEXT_BUDGET_MIN,
    context_budget,
    paginate_ids,
    preview_fields,
    task_too_long,
    tenant_view,
)


@tenant_view(staff_only=True)
def conversations(request: HttpRequest) -> HttpResponse:
    q = request.GET.get("q", "").strip()
    user = request.GET.get("user", "").strip()
    page = paginate_ids(request, sel.threads(request.principal, q=q, user=user))
    return render(request, "dashboard/conversations.html", {"page": page, "q": q, "user_q": user})


@tenant_view(staff_only=True)
def conversation(request: HttpRequest, thread_id: int) -> HttpResponse:
    page = sel.thread_view(request.principal, thread_id)
    page["checkpoints"] = thread_checkpoints(principal=request.principal, thread=page["thread"])
    return render(request, "dashboard/conversation.html", page)


@tenant_view(staff_only=True)
def search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:500]
    filters = {name: request.GET.get(name, "").strip() for name in sel.SEARCH_FILTERS}
    if filters["status"] not in ("", *Fact.Status.values):
        filters["status"] = ""
    result = sel.tenant_search(request.principal, query, filters) if query else None
    return render(
        request,
        "dashboard/search.html",
        {
            "q": query,
            "filters": filters,
            "result": result,
            "choices": {"status": Fact.Status.values, "category": Fact.Category.values, "source": Fact.Source.values},
        },
    )


@tenant_view(staff_only=True)
def playground(request: HttpRequest) -> HttpResponse:
    """The context block for a task and a user at two budgets, side by side: a token bar per section,
    what was dropped and why (the same `context_block` the API serves; reads are not counted)."""
    form = preview_fields(request)
    user_ref = form.get("user", "").strip()
    task = form.get("task", "").strip()
    budgets = (context_budget(form.get("budget_a"), 500), context_budget(form.get("budget_b"), 2000))
    users = visible(request.principal, MemoryUser.objects.filter(erased_at__isnull=True))
    memory_user = users.filter(external_id=user_ref).first() if user_ref else None
    columns, error = [], task_too_long(task)
    if memory_user is not None and "budget_a" in form and not error:
        try:
            for budget in budgets:
                block = context_block(
                    principal=request.principal, memory_user=memory_user, task=task, budget_tokens=budget
                )
                columns.append(sel.context_layout(request.principal, block, budget))
        except DomainError as exc:
            error = exc.detail
    elif user_ref and memory_user is None and not error:
        error = f"No memory user “{user_ref}” in this tenant."
    return render(
        request,
        "dashboard/playground.html",
        {
            "user_ref": user_ref,
            "task": task,
            "budgets": budgets,
            "columns": columns,
            "error": error,
            "memory_user": memory_user,
            "user_choices": list(users.order_by("external_id").values_list("external_id", flat=True)[:200]),
            "budget_min": CONTEXT_BUDGET_MIN,
            "budget_max": MAX_BUDGET_TOKENS,
        },
    )
