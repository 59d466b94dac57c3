"""The audit log stays on its indexes with 20,000 events: the page walks `audit_tenant_created` in
order (or `audit_tenant_outcome` for an outcome), and date filters are index ranges, not a cast of
every row."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memory_admin.models import AuditEvent, MemoryUser

EVENTS = 20_000


def _fill(tenant, n: int) -> None:
    """n events, one every 130 s back from now, like a busy tenant's months of history."""
    for i in range(5):
        MemoryUser.objects.create(tenant=tenant, external_id=f"speed-{tenant.pk}-{i}")
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO memory_admin_auditevent (tenant_id, memory_user_id, actor_type, actor, action, outcome,
                 target_type, target_id, before, after, reason, created_at)
               SELECT %(t)s,
                 (SELECT id FROM memory_admin_memoryuser WHERE tenant_id = %(t)s ORDER BY id OFFSET (g %% 5) LIMIT 1),
                 (ARRAY['agent', 'staff', 'system'])[1 + g %% 3], 'agent:bot-' || (g %% 7),
                 (ARRAY['fact.write', 'fact.correct', 'notebook.save', 'fact.lifecycle'])[1 + g %% 4],
                 (ARRAY['created', 'merged', 'blocked'])[1 + g %% 3], 'fact', md5(g::text)::uuid::text,
                 jsonb_build_object('content', repeat('x', 500)), jsonb_build_object('content', repeat('y', 500)),
                 'reason ' || g, now() - make_interval(secs => g * 130)
               FROM generate_series(1, %(n)s) g""",
            {"t": tenant.pk, "n": n},
        )
        cursor.execute("ANALYZE memory_admin_auditevent")


@pytest.fixture
def busy_log(tenant, other_tenant):
    _fill(tenant, EVENTS)
    _fill(other_tenant, EVENTS)  # another tenant's history must not be read either
    return tenant


def _page_plan(client, url: str) -> str:
    """EXPLAIN ANALYZE of the query that fetches the page's rows."""
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    sql = next(
        q["sql"] for q in ctx.captured_queries if 'FROM "memory_admin_auditevent"' in q["sql"] and "LIMIT" in q["sql"]
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN ANALYZE " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def _full_sort(plan: str) -> bool:
    # An Incremental Sort on the presorted created_at only orders ties by id; a plain Sort reads and
    # sorts every matching row.
    return bool(re.search(r"(^|->)\s*Sort\s+\(cost", plan, re.M))


def _median_ms(client, url: str, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        assert client.get(url).status_code == 200
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)[runs // 2]


def test_the_log_reads_its_index_in_order_and_dates_are_ranges(auditor, busy_log):
    url = reverse("audit", args=[busy_log.slug])
    today = timezone.localdate()
    week_ago = (today - timedelta(days=7)).isoformat()
    cases = {
        "first page": "",
        "since a week ago": f"?since={week_ago}",
        "until 20 days ago": f"?until={(today - timedelta(days=20)).isoformat()}",
        "outcome": "?outcome=blocked",
        "actor type": "?actor_type=staff",
    }
    auditor.get(url)  # warm
    for label, query in cases.items():
        plan = _page_plan(auditor, url + query)
        print(f"{label}: {_median_ms(auditor, url + query):.1f} ms")
        assert "audit_tenant_" in plan, f"{label}: not on an audit index\n{plan}"
        assert not _full_sort(plan), f"{label}: sorts every matching row\n{plan}"
        assert "::date" not in plan, f"{label}: casts created_at of every row to a date\n{plan}"
    # A deep page: Postgres may sort rather than walk 15,000 index entries, but it sorts (created_at,
    # id) pairs in memory, never whole events on disk, and the page holds the right events.
    deep = _page_plan(auditor, url + "?page=300")
    print(f"page 300: {_median_ms(auditor, url + '?page=300'):.1f} ms")
    assert "Disk:" not in deep and int(re.search(r"width=(\d+)", deep).group(1)) <= 64, deep
    expected = list(
        AuditEvent.objects.filter(tenant=busy_log)
        .order_by("-created_at")
        .values_list("action", "target_id")[299 * 50 : 300 * 50]
    )
    body = auditor.get(url + "?page=300").content.decode()
    assert [f"fact {target[:8]}" in body for _, target in expected] == [True] * 50
    assert "audit_tenant_outcome" in _page_plan(auditor, url + "?outcome=blocked")
    since_plan = _page_plan(auditor, url + f"?since={week_ago}")
    assert re.search(r"Index Cond: .*created_at >=", since_plan), since_plan


def test_date_filters_cover_whole_days_in_the_local_timezone(auditor, tenant):
    tz = timezone.get_current_timezone()
    day = timezone.localdate() - timedelta(days=3)
    start = datetime.combine(day, datetime.min.time(), tzinfo=tz)
    moments = {
        "before": start - timedelta(microseconds=1),
        "first": start,
        "last": start + timedelta(days=1) - timedelta(microseconds=1),
        "after": start + timedelta(days=1),
    }
    for name, moment in moments.items():
        event = AuditEvent.objects.create(tenant=tenant, actor_type="staff", actor="staff:x", action=f"probe.{name}")
        with connection.cursor() as cursor:  # created_at is auto_now_add and the table refuses UPDATE
            cursor.execute("SET LOCAL memory_admin.erasing = 'on'")
            cursor.execute("UPDATE memory_admin_auditevent SET created_at = %s WHERE id = %s", [moment, event.pk])
            cursor.execute("SET LOCAL memory_admin.erasing = 'off'")
    body = auditor.get(
        reverse("audit", args=[tenant.slug]), {"since": day.isoformat(), "until": day.isoformat()}
    ).content.decode()
    assert "probe.first" in body and "probe.last" in body
    assert "probe.before" not in body and "probe.after" not in body


def test_outcome_is_matched_exactly(auditor, tenant):
    for outcome in ("blocked", "unblocked"):
        AuditEvent.objects.create(
            tenant=tenant, actor_type="staff", actor="staff:x", action=f"probe.{outcome}", outcome=outcome
        )
    body = auditor.get(reverse("audit", args=[tenant.slug]), {"outcome": "blocked"}).content.decode()
    assert "probe.blocked" in body and "probe.unblocked" not in body
