"""What every dashboard page shares: sign-in, the tenant from the URL, the principal, errors as pages.

`tenant_view` turns (request.user, tenant slug) into the same `Principal` the API uses, so every
page reads through `selectors.access.visible`/`get_visible`: another tenant's or another user's
object is a 404, never a 403.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme

from memory_admin.api.schemas.retrieval import MAX_QUERY_CHARS
from memory_admin.errors import DomainError, Forbidden, Invalid, NotFound
from memory_admin.inputs import unreadable_field
from memory_admin.retrieval.context import MAX_BUDGET_TOKENS
from memory_admin.selectors.access import ADMIN, AUDIT, CURATE, READ, WRITE_MEMORY
from memory_admin.selectors.staff import memberships_of, principal_from_membership

PER_PAGE = 50

# The top-nav entry each page belongs to (by URL name), so the nav marks the current page everywhere.
NAV_SECTIONS = {
    "overview": ("overview",),
    "users": (
        "users",
        "user",
        "user_notebook",
        "user_facts",
        "user_episodes",
        "user_context",
        "user_asof",
        "user_activity",
        "fact_detail",
        "notebook_restore",
        "facts",
    ),
    "review": ("review", "review_bulk", "eviction", "quarantine", "fact_queue_action", "entity_review"),
    "entities": ("entities", "entity", "entity_merge"),
    "lifecycle": ("lifecycle",),
    "tenant_notebook": ("tenant_notebook",),
    "skills": ("skills", "skill_edit"),
    "batches": ("batches",),
    "conversations": ("conversations", "conversation"),
    "search": ("search",),
    "knowledge_sources": (
        "knowledge_sources",
        "knowledge_source_add",
        "knowledge_source",
        "knowledge_source_delete",
        "knowledge_document",
    ),
    "playground": ("playground",),
    "pii": ("pii", "pii_detail"),
    "audit": ("audit",),
    "keys": ("keys",),
    "access_log": ("access_log",),
    "settings": ("settings",),
}
_SECTION_OF = {name: section for section, names in NAV_SECTIONS.items() for name in names}

# The staff nav in groups (each entry's key is its section and its URL name): on a phone it folds
# into a menu button beside the current page's name, instead of one row of fifteen links.
NAV_GROUPS = (
    (
        "Memory",
        (
            ("overview", "Overview"),
            ("users", "Users"),
            ("search", "Search"),
            ("entities", "Entities"),
            ("knowledge_sources", "Knowledge"),
            ("conversations", "Conversations"),
            ("playground", "Playground"),
        ),
    ),
    (
        "Curation",
        (
            ("review", "Review"),
            ("lifecycle", "Lifecycle"),
            ("tenant_notebook", "Team notebook"),
            ("skills", "Skills"),
            ("batches", "Extraction"),
        ),
    ),
    (
        "Oversight",
        (
            ("pii", "PII blocks"),
            ("audit", "Audit log"),
            ("keys", "Agents & keys"),
            ("access_log", "Access log"),
            ("settings", "Settings"),
        ),
    ),
)


def nav_groups(principal) -> list[tuple[str, list[tuple[str, str]]]]:
    """The nav entries this principal may open (the PII log is the auditor's and admin's)."""
    return [
        (group, [(key, words) for key, words in entries if key != "pii" or principal.can(AUDIT)])
        for group, entries in NAV_GROUPS
    ]


def nav_section(request: HttpRequest) -> str:
    """The nav entry of this page; a member's own notebook and facts are their own entries."""
    name = request.resolver_match.url_name if request.resolver_match else ""
    if getattr(request, "is_member", False) and name in ("user", "user_notebook", "notebook_restore"):
        return "my_notebook"
    if getattr(request, "is_member", False) and name in ("user_facts", "fact_detail"):
        return "my_facts"
    return _SECTION_OF.get(name, "")


def tenant_view(*, ability: str = READ, staff_only: bool = False) -> Callable:
    """Decorate a view taking (request, slug, ...). `staff_only` pages are not for members, who see
    only their own notebook and facts (SPEC §1)."""

    def decorator(view: Callable) -> Callable:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, slug: str, *args, **kwargs) -> HttpResponse:
            memberships = memberships_of(request.user)
            membership = next((m for m in memberships if m.tenant.slug == slug), None)
            if membership is None:
                raise Http404("No tenant with that name is visible to you.")
            principal = principal_from_membership(membership, request.user.get_username())
            request.tenant = membership.tenant
            request.membership = membership
            request.memberships = memberships
            request.principal = principal
            request.can = {name: principal.can(name) for name in (READ, WRITE_MEMORY, CURATE, ADMIN, AUDIT)}
            request.is_member = principal.member_user_id is not None
            request.nav = nav_section(request)
            request.nav_groups = nav_groups(principal)
            request.nav_label = next(
                (words for _, entries in NAV_GROUPS for key, words in entries if key == request.nav), ""
            )
            if staff_only and request.is_member:
                return forbidden(request, "Members see their own notebook and facts only.")
            if not principal.can(ability):
                return forbidden(request, f"Your role ({principal.role}) may not open this page.")
            # One check for every filter and form field of every page (SPEC §11), before any view runs.
            unreadable = unreadable_field(request.GET) or (
                unreadable_field(request.POST) if request.method == "POST" else None
            )
            if unreadable:
                return invalid(request, f"The field “{unreadable[0]}” {unreadable[1]}; nothing was changed.")
            try:
                return view(request, *args, **kwargs)
            except NotFound as exc:
                raise Http404(exc.detail) from exc
            except Forbidden as exc:
                return forbidden(request, exc.detail)
            except Invalid as exc:
                return invalid(request, f"{exc.detail} Nothing was changed.")

        return wrapper

    return decorator


def forbidden(request: HttpRequest, detail: str) -> HttpResponse:
    return render(request, "dashboard/error.html", {"title": "Not allowed", "detail": detail}, status=403)


def invalid(request: HttpRequest, detail: str) -> HttpResponse:
    return render(request, "dashboard/error.html", {"title": "Invalid input", "detail": detail}, status=422)


def domain_error(request: HttpRequest, exc: DomainError, *, template: str = "dashboard/_flash.html") -> HttpResponse:
    """A refused action, shown where it happened (htmx) or as a page."""
    return render(
        request,
        template,
        {"level": "error", "detail": exc.detail, "code": exc.code},
        status=exc.status if not request.htmx else 200,
    )


def paginate(request: HttpRequest, queryset: QuerySet | list, per_page: int = PER_PAGE) -> Page:
    """One COUNT and one LIMIT/OFFSET query, whatever the page."""
    return Paginator(queryset, per_page).get_page(request.GET.get("page"))


def paginate_ids(request: HttpRequest, queryset: QuerySet, per_page: int = PER_PAGE) -> Page:
    """Page through the ids of an ordered queryset, then read that page's rows (with their joins) by
    primary key. The sort and OFFSET then handle narrow rows, and a misestimated filter cannot turn
    the joins into a loop over every candidate row. One query more than `paginate`."""
    page = paginate(request, queryset.values_list("pk", flat=True), per_page)
    ids = list(page.object_list)
    rows = {row.pk: row for row in queryset.order_by().filter(pk__in=ids)}
    page.object_list = [rows[pk] for pk in ids if pk in rows]
    return page


def paginate_id_list(request: HttpRequest, ids: list, queryset: QuerySet, per_page: int = PER_PAGE) -> Page:
    """Page through ids already in order (no COUNT), then read that page's rows from `queryset` by
    primary key (one query)."""
    page = paginate(request, ids, per_page)
    rows = {row.pk: row for row in queryset.order_by().filter(pk__in=list(page.object_list))}
    page.object_list = [rows[pk] for pk in page.object_list if pk in rows]
    return page


def safe_next(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return fallback


# The context previews' smallest budget: below it a preview holds little more than the fence.
CONTEXT_BUDGET_MIN = 50


def preview_fields(request: HttpRequest):
    """A context preview's form (user page, playground): a GET's query, or, for a task too long for a URL
    (dashboard.js posts the form then: 2,000 characters of a non-Latin script are ~12-18 kB escaped, over
    what the web server reads of a request line), the POST's fields."""
    return request.POST if request.method == "POST" else request.GET


def task_too_long(task: str) -> str | None:
    """The preview's refusal of a task the API would refuse (422 on `task`), or None."""
    if len(task) > MAX_QUERY_CHARS:
        return f"The task is {len(task):,} characters; the API takes at most {MAX_QUERY_CHARS:,}. Nothing was shown."
    return None


def context_budget(raw: str | None, default: int) -> int:
    """The token budget of a context preview (user page, playground): clamped into the previews'
    range, whose top is the API's (`retrieval.context.MAX_BUDGET_TOKENS`); not a number: `default`."""
    try:
        return max(CONTEXT_BUDGET_MIN, min(MAX_BUDGET_TOKENS, int(raw or "")))
    except ValueError:
        return default
