"""Lifecycle jobs started by a person from the dashboard (SPEC §7, §9).

The jobs themselves live in `extraction.lifecycle` and audit every fact they change as the system;
these wrappers check the role first and add one audit event naming who started the run, so the
audit log answers "why did 40 facts get evicted at 14:02".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from extraction.lifecycle import contradiction_scan, lifecycle_gc
from memory_admin.selectors.access import ADMIN, CURATE, READ, Principal
from memory_admin.services.audit import audit


def lifecycle_gc_preview(*, principal: Principal) -> dict[str, Any]:
    """What the daily GC would do now for the principal's tenant; changes nothing."""
    principal.require(READ)
    return lifecycle_gc(tenant_id=principal.tenant_id, dry_run=True)


def lifecycle_gc_run(*, principal: Principal) -> dict[str, Any]:
    """Run the daily GC now (admins only); returns the report of what it changed."""
    principal.require(ADMIN)
    report = lifecycle_gc(tenant_id=principal.tenant_id, dry_run=False)
    audit(principal, "lifecycle.gc", outcome="ran", target_type="tenant", target_id=str(principal.tenant_id),
          after={"counts": report["counts"], "total": report["total"]},
          reason="GC started from the dashboard")
    return report


def contradiction_scan_run(*, principal: Principal, since: datetime | None) -> dict[str, Any]:
    """Run the contradiction scan now over facts changed since `since` (all when None); curators only."""
    principal.require(CURATE)
    report = contradiction_scan(tenant_id=principal.tenant_id, since=since)
    audit(principal, "lifecycle.contradiction_scan", outcome="ran", target_type="tenant",
          target_id=str(principal.tenant_id),
          after={**{k: report[k] for k in ("checked", "queued", "auto_resolved")},
                 "since": since.isoformat() if since else None},
          reason="contradiction scan started from the dashboard")
    return report
