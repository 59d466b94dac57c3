"""docs/monitoring's Prometheus alert rules and Grafana dashboard name only series that a real scrape of
this product has: a renamed metric fails here instead of silently emptying a panel or an alert."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from memory_admin.models import MemoryUser
from memory_admin.services.heartbeats import SWEEP, WORKER, heartbeat_record

MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
SERIES = re.compile(r"\b(memory_admin_[a-z_]+)\b")


@pytest.fixture
def scraped(db, api, tenant) -> set[str]:
    """Every series name a scrape declares after a request, a write and a search: each family's samples
    (histograms' _bucket/_count/_sum, counters' _total), also for a family with no sample yet."""
    MemoryUser.objects.create(tenant=tenant, external_id="alice")
    heartbeat_record(SWEEP)  # a running beat and worker
    heartbeat_record(WORKER)
    api.post("users/alice/facts", {"content": "Alice prefers tea over coffee.", "source": "user_stated"})
    api.get("users/alice/search", q="tea")
    api.get("users/alice/context", task="tea")
    text = Client().get("/metrics").content.decode()
    names = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
        names.update(sample.name for sample in family.samples)
    return names


def test_every_alert_is_well_formed_and_uses_series_the_product_exports(scraped):
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"][0]["rules"]
    assert len(rules) >= 8
    for rule in rules:
        assert {"alert", "expr", "labels", "annotations"} <= set(rule)
        assert rule["labels"]["severity"] in {"page", "ticket"}
        assert set(SERIES.findall(rule["expr"])) <= scraped, rule["alert"]


def test_every_dashboard_panel_queries_series_the_product_exports(scraped):
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(dashboard["panels"]) >= 10 and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for expr in exprs:
        assert SERIES.findall(expr) and set(SERIES.findall(expr)) <= scraped, expr
