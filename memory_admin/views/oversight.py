"""For auditors (and admins): PII blocks with CSV export, and the audit log. Read only."""

from __future__ import annotations

import csv

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from memory_admin.inputs import implausible_time_reason
from memory_admin.models import AuditEvent, PiiBlock
from memory_admin.selectors import dashboard as sel
from memory_admin.selectors.access import AUDIT, get_visible, visible
from memory_admin.services.pii import CONTACT_KINDS, SECRET_KINDS
from memory_admin.templatetags.labels import changes
from memory_admin.views.base import paginate, tenant_view

PII_FILTERS = ("kind", "route", "action", "agent", "user", "since", "until")
# The actions the services audit, for the audit log's action select ("….write" covers every route's
# write-path outcome; a prefix such as "fact." matches all of a kind, the filter being "contains").
AUDIT_ACTIONS = (
    ("Writes", (".write", "fact.write", "message.write", "notebook.write", "review.write")),
    (
        "Facts",
        (
            "fact.",
            "fact.correct",
            "fact.forget",
            "fact.pin",
            "fact.evict",
            "fact.keep",
            "fact.lifecycle",
            "fact.overrule",
            "fact.promote",
        ),
    ),
    ("Review", ("contradiction.resolve", "contradiction.scan", "quarantine.release", "quarantine.discard")),
    ("Notebooks and skills", ("notebook.save", "skill.save")),
    ("Extraction", ("extraction.batch", "extraction.retry", "thread.close", "entity.link")),
    ("Lifecycle", ("lifecycle.gc", "lifecycle.contradiction_scan")),
    ("Administration", ("api_key.create", "api_key.revoke", "settings.update", "user.export", "user.erase")),
)
AUDIT_FILTERS = ("actor", "actor_type", "action", "outcome", "target", "user", "since", "until")


def _filters(request: HttpRequest, names: tuple[str, ...]) -> dict[str, str]:
    out = {name: request.GET.get(name, "").strip() for name in names}
    for name in ("since", "until"):
        # A malformed date would be a 500 inside the query; ignore it instead.
        if out.get(name) and not _is_date(out[name]):
            out[name] = ""
    return out


def _is_date(text: str) -> bool:
    """A day the filters can use: ISO, and inside the plausible window (9999-12-31 plus the one day
    an `until` adds would overflow)."""
    from datetime import UTC, date, datetime, time

    try:
        day = date.fromisoformat(text)
    except ValueError:
        return False
    return implausible_time_reason(datetime.combine(day, time.min, tzinfo=UTC)) is None


@tenant_view(ability=AUDIT)
def pii_list(request: HttpRequest) -> HttpResponse:
    filters = _filters(request, PII_FILTERS)
    page = paginate(request, sel.pii_blocks(request.principal, filters))
    routes = visible(request.principal, PiiBlock.objects.all()).order_by().values_list("route", flat=True).distinct()
    return render(
        request,
        "dashboard/pii.html",
        {
            "page": page,
            "filters": filters,
            "kinds": [*CONTACT_KINDS, *SECRET_KINDS],
            "routes": sorted(routes),
            "actions": PiiBlock.Action.values,
        },
    )


@tenant_view(ability=AUDIT)
def pii_detail(request: HttpRequest, block_id) -> HttpResponse:
    block = get_visible(request.principal, PiiBlock.objects.select_related("agent", "memory_user"), pk=block_id)
    repeats = visible(request.principal, PiiBlock.objects.filter(fingerprint=block.fingerprint))
    # Not "block": inside {% block %} Django binds that name to the block node itself.
    return render(
        request,
        "dashboard/pii_detail.html",
        {
            "pii": block,
            "repeat_count": repeats.count(),
            "repeats": list(repeats.select_related("agent", "memory_user").order_by("-created_at")[:50]),
            "events": list(
                visible(
                    request.principal, AuditEvent.objects.filter(target_type="piiblock", target_id=str(block.pk))
                ).order_by("created_at")[:20]
            ),
        },
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value) -> str:
    """Spreadsheet-safe: a cell starting with = + - @ would run as a formula when the CSV is opened."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@tenant_view(ability=AUDIT)
def pii_export(request: HttpRequest) -> StreamingHttpResponse:
    filters = _filters(request, PII_FILTERS)
    rows = sel.pii_blocks(request.principal, filters)
    writer = csv.writer(_Echo())
    header = [
        "id",
        "created_at",
        "action",
        "kinds",
        "route",
        "agent",
        "memory_user",
        "actor",
        "fingerprint",
        "repeat_count",
        "redacted_preview",
    ]

    def stream():
        yield writer.writerow(header)
        # `agent` is what the list shows: the agent's name, else the actor that wrote (staff, system,
        # or an agent whose row is gone).
        for b in rows.iterator(chunk_size=500):
            yield writer.writerow(
                [
                    _cell(v)
                    for v in (
                        b.pk,
                        b.created_at.isoformat(),
                        b.action,
                        ";".join(b.kinds),
                        b.route,
                        b.agent.name if b.agent else b.actor,
                        b.memory_user.external_id if b.memory_user else "",
                        b.actor,
                        b.fingerprint,
                        b.repeat_count,
                        b.redacted_preview,
                    )
                ]
            )

    response = StreamingHttpResponse(stream(), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="pii-blocks-{request.tenant.slug}-{stamp}.csv"'
    return response


@tenant_view(staff_only=True)
def audit_log(request: HttpRequest) -> HttpResponse:
    filters = _filters(request, AUDIT_FILTERS)
    events = sel.audit_events(request.principal, filters)
    # Page through ids, then read that page's events: OFFSET and ordering then handle narrow rows,
    # so a deep page no longer sorts every event's before/after JSON (which spilled to disk).
    page = paginate(request, events.values_list("pk", flat=True))
    page.object_list = list(events.filter(pk__in=list(page.object_list)))
    return render(
        request,
        "dashboard/audit.html",
        {"page": page, "filters": filters, "actions": AUDIT_ACTIONS, "actor_types": ["agent", "staff", "system"]},
    )


@tenant_view(staff_only=True)
def audit_export(request: HttpRequest) -> StreamingHttpResponse:
    """The audit log as filtered on the page, as CSV (before/after as JSON), streamed."""
    import json

    rows = sel.audit_events(request.principal, _filters(request, AUDIT_FILTERS))
    writer = csv.writer(_Echo())
    header = [
        "id",
        "created_at",
        "actor_type",
        "actor",
        "action",
        "outcome",
        "target_type",
        "target_id",
        "memory_user",
        "reason",
        "changed_fields",
        "before",
        "after",
    ]

    def stream():
        yield writer.writerow(header)
        for e in rows.iterator(chunk_size=500):
            changed = ";".join(r["field"] for r in changes(e) if r["changed"])
            yield writer.writerow(
                [
                    _cell(v)
                    for v in (
                        e.pk,
                        e.created_at.isoformat(timespec="seconds"),
                        e.actor_type,
                        e.actor,
                        e.action,
                        e.outcome,
                        e.target_type,
                        e.target_id,
                        e.memory_user.external_id if e.memory_user else "",
                        e.reason,
                        changed,
                        json.dumps(e.before, sort_keys=True) if e.before is not None else "",
                        json.dumps(e.after, sort_keys=True) if e.after is not None else "",
                    )
                ]
            )

    response = StreamingHttpResponse(stream(), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="audit-{request.tenant.slug}-{stamp}.csv"'
    return response
