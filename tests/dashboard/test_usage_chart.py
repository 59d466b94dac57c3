"""The overview's "Reads and context requests per day": searches, context requests and fact reads made
through the real API are counted per day and shown with their numbers."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from memory_admin.models import UsageDay

pytestmark = pytest.mark.django_db


def _write(api, user, content):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code == 201, r.content
    return r.json()["fact"]["id"]


def _usage_card(html: str) -> str:
    match = re.search(r'<section class="card" id="usage">(.*?)</section>', html, re.S)
    assert match, "no usage chart on the overview"
    return match.group(1)


def test_api_reads_show_on_the_overview(api, operator, tenant):
    fact_id = _write(api, "uma", "Uma drinks green tea every morning")
    _write(api, "uma", "Uma lives in Lisbon")
    for q in ("tea", "Lisbon", "nothing matches this"):  # a search without hits is still a search
        assert api.get("users/uma/search", q=q).status_code == 200
    assert api.get("users/uma/context", task="breakfast", budget_tokens=500).status_code == 200
    for _ in range(2):
        assert api.get(f"facts/{fact_id}").status_code == 200
    assert api.get("facts/00000000-0000-0000-0000-000000000000").status_code == 404  # not a read

    html = operator.get(reverse("overview", args=[tenant.slug])).content.decode()
    card = _usage_card(html)
    assert "Reads and context requests per day" in card
    assert "3 searches, 1 context requests, 2 fact reads" in card
    assert 'class="value">6</text>' in card  # the day's total written above its bar
    today = timezone.localdate().strftime("%b %d")
    # The table fallback: the day, then searches, context requests, fact reads and the total.
    row = re.search(rf'<tr><th scope="row">{today}</th>(.*?)</tr>', card, re.S).group(1)
    assert re.findall(r'<td class="num">(\d+)</td>', row) == ["3", "1", "2", "6"]
    assert "<title>" + today + ": searches 3</title>" in card


def test_dashboard_reads_are_not_counted(operator, tenant, memory_user, make_fact):
    make_fact(memory_user, "Alice likes tea")
    assert operator.get(reverse("search", args=[tenant.slug]) + "?q=tea").status_code == 200
    assert not UsageDay.objects.filter(tenant=tenant).exists()
    html = operator.get(reverse("overview", args=[tenant.slug])).content.decode()
    assert 'id="usage"' not in html  # an empty chart is folded into the overview's one line
    assert re.search(r'id="empty-charts">Nothing yet in the last 14 days: [^<]*reads and context requests', html)


def test_range_choice_and_other_tenants(operator, tenant, other_tenant):
    today = timezone.localdate()
    UsageDay.objects.create(tenant=tenant, day=today - timedelta(days=20), kind="context", count=40)
    UsageDay.objects.create(tenant=tenant, day=today, kind="search", count=5)
    UsageDay.objects.create(tenant=other_tenant, day=today, kind="search", count=900)
    week = _usage_card(operator.get(reverse("overview", args=[tenant.slug]) + "?days=7").content.decode())
    assert "5 searches, 0 context requests, 0 fact reads" in week
    month = _usage_card(operator.get(reverse("overview", args=[tenant.slug]) + "?days=30").content.decode())
    assert "5 searches, 40 context requests, 0 fact reads" in month
    assert (today - timedelta(days=20)).strftime("%b %d") in month


def test_usage_rows_hold_no_user_identifier(api, admin_api, tenant):
    _write(api, "erin-usage", "Erin's codename is heron")
    assert api.get("users/erin-usage/search", q="codename").status_code == 200
    assert admin_api.delete("users/erin-usage").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(u)::text FROM memory_admin_usage_day u WHERE tenant_id = %s", [tenant.pk])
        rows = [r[0] for r in cursor.fetchall()]
    assert rows and not any("erin" in r or "heron" in r for r in rows)
    # The counts outlive the erased user: the chart still shows the search.
    assert UsageDay.objects.get(tenant=tenant, kind="search").count == 1
