"""One table of setting limits: PATCH /settings and the dashboard settings form accept and refuse the
same values, lock the same row and write the same audit event."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memory_admin.models import AuditEvent, TenantSettings

# (setting, the largest or smallest value allowed, the nearest value refused). The two that used to
# disagree: min_message_chars (API 65,536, dashboard 100,000) and episode_idle_minutes (API 100,000,
# dashboard 10,080); similarities must be above 0 (the dashboard used to demand 0.01).
LIMITS = [
    ("min_message_chars", 65_536, 65_537),
    ("min_message_chars", 0, -1),
    ("episode_idle_minutes", 10_080, 10_081),
    ("episode_idle_minutes", 1, 0),
    ("fact_cap", 100_000, 100_001),
    ("fact_cap", 1, 0),
    ("debounce_seconds", 86_400, 86_401),
    ("confidence_threshold", 1.0, 1.01),
    ("auto_resolve_gap", 0.0, -0.01),
    ("dedup_similarity", 0.005, 0.0),
    ("contradiction_similarity", 0.005, 0.0),
]


def stored(tenant, name):
    return getattr(TenantSettings.objects.get(tenant=tenant), name)


@pytest.mark.parametrize(("name", "allowed", "refused"), LIMITS)
def test_the_api_takes_the_agreed_limit_and_refuses_one_past_it(tenant, admin_api, name, allowed, refused):
    r = admin_api.patch("settings", {name: allowed})
    assert r.status_code == 200 and r.json()[name] == allowed, r.content
    r = admin_api.patch("settings", {name: refused})
    assert r.status_code == 422, r.content
    assert (r.json()["code"], r.json()["field"]) == ("invalid", name)
    assert stored(tenant, name) == allowed


@pytest.mark.parametrize(("name", "allowed", "refused"), LIMITS)
def test_the_dashboard_form_takes_the_agreed_limit_and_refuses_one_past_it(tenant, admin, name, allowed, refused):
    url = reverse("settings", args=[tenant.slug])
    assert admin.post(url, {name: str(allowed)}).status_code == 302
    assert stored(tenant, name) == allowed
    r = admin.post(url, {name: str(refused)})
    body = r.content.decode()
    assert r.status_code == 422
    assert 'role="alert"' in body and name.replace("_", " ") + " must be" in body
    assert stored(tenant, name) == allowed


def test_the_form_names_the_range_it_enforces(tenant, admin):
    url = reverse("settings", args=[tenant.slug])
    body = admin.get(url).content.decode()
    assert 'name="min_message_chars" value="20" step="1" min="0" max="65536"' in body
    assert "Allowed: 0 to 65536." in body and "Allowed: 1 to 10080." in body
    assert "Allowed: above 0, up to 1." in body
    body = admin.post(url, {"min_message_chars": "100000"}).content.decode()
    assert "min message chars must be between 0 and 65536." in body
    body = admin.post(url, {"fact_cap": "12.5"}).content.decode()
    assert "fact cap must be a whole number." in body
    body = admin.post(url, {"dedup_similarity": "nan"}).content.decode()
    assert "dedup similarity must be a number." in body


def test_openapi_states_the_same_ranges(tenant, admin_api):
    schema = admin_api.get("/api/v1/openapi.json").json()["components"]["schemas"]["SettingsPatch"]["properties"]

    def bounds(name):
        branches = schema[name]["anyOf"]
        return [
            {k: v for k, v in b.items() if k in ("minimum", "maximum", "exclusiveMinimum")}
            for b in branches
            if b.get("type") != "null"
        ]

    assert bounds("min_message_chars") == [{"minimum": 0, "maximum": 65536}]
    assert bounds("episode_idle_minutes") == [{"minimum": 1, "maximum": 10080}]
    assert {"exclusiveMinimum": 0, "maximum": 1} in bounds("dedup_similarity")


def test_both_doors_write_one_audit_event_of_the_same_shape(tenant, admin_api, admin):
    assert admin_api.patch("settings", {"fact_cap": 40}).status_code == 200
    assert admin.post(reverse("settings", args=[tenant.slug]), {"fact_cap": "41"}).status_code == 302
    events = list(AuditEvent.objects.filter(action="settings.update").order_by("created_at", "pk"))
    assert [e.actor_type for e in events] == ["agent", "staff"]
    assert [(e.before["fact_cap"], e.after["fact_cap"]) for e in events] == [(100, 40), (40, 41)]
    assert set(events[0].after) == set(events[1].after) >= {"pii_policy", "search_weights", "extraction_enabled"}
