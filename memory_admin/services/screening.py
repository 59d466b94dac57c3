"""Step 1 of every write (facts, notebooks, skills, corrections, messages): the secret/PII scan.

A refusal is recorded (PiiBlock + audit event) in its own transaction before `Blocked` is raised, so
the record survives while nothing of the refused write is stored. The record holds kinds, a redacted
preview and a keyed fingerprint, never the value.

Every string an agent or a person can make us store goes through here (SPEC §11):
- content (facts, notebooks, skills, corrections, merged review text): `screen_text`, under the
  tenant policy (secrets blocked; contact PII blocked, redacted or flagged);
- free-text side fields (the `reason` of correct/forget, the notebook save `note`, review and
  curation notes): `screen_text` too, so contact PII can be redacted out of them;
- identifiers (user ids, thread ids, task ids, skill paths, fact keys): `screen_identifier`. An id
  cannot be redacted (the redacted form would name another thing), so whatever the policy would block
  or redact refuses the write; only a `flag` policy lets contact PII through (flagged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction

from memory_admin import metrics
from memory_admin.errors import Blocked
from memory_admin.models import PiiBlock
from memory_admin.selectors.access import Principal
from memory_admin.services.audit import audit
from memory_admin.services.pii import ScanResult, find, scan
from memory_admin.services.settings import tenant_settings

T = TypeVar("T")


def screen_text(
    principal: Principal,
    text: str,
    *,
    route: str,
    memory_user_id: int | None,
    what: str = "text",
    policy: dict[str, str] | None = None,
    action: str = "write",
    detail: dict[str, Any] | None = None,
) -> ScanResult:
    """Scan `text` under the tenant's PII policy; raise Blocked (after recording it) or return
    the result whose `content` is safe to store (redacted where the policy says so). The audit event is
    `{route}.{action}`, with `detail` beside the kinds and the preview."""
    if not text:
        return ScanResult(content=text)
    result = scan(text, tenant_settings(principal.tenant_id).pii_policy if policy is None else policy)
    if not result.findings:
        return result
    outcome = "blocked" if result.blocked else "redacted" if result.redacted else "flagged"
    with transaction.atomic():
        block = PiiBlock.objects.create(
            tenant_id=principal.tenant_id,
            memory_user_id=memory_user_id,
            agent_id=principal.agent_id,
            actor=principal.actor,
            route=route,
            action=outcome,
            kinds=result.kinds,
            redacted_preview=result.preview,
            fingerprint=result.fingerprint,
        )
        audit(
            principal,
            f"{route}.{action}",
            outcome=outcome,
            target=block,
            memory_user_id=memory_user_id,
            after={"kinds": result.kinds, "preview": result.preview, **(detail or {})},
            reason=f"{', '.join(result.kinds)} found in the {what} by the secret/PII scan",
        )
    result.block_id = str(block.pk)  # type: ignore[attr-defined]
    metrics.pii_found(route, outcome, result.kinds)
    if result.blocked:
        raise Blocked(
            f"Refused: the {what} contains {', '.join(result.kinds)}. Nothing was stored; "
            f"an auditor can see block {block.pk}.",
            block_id=str(block.pk),
            kinds=result.kinds,
            outcome="blocked",
        )
    return result


def screen_identifier(
    principal: Principal, value: str | None, *, what: str, route: str, memory_user_id: int | None = None
) -> str | None:
    """An identifier stored as given: refused (Blocked, recorded) when it holds a secret, or contact
    PII the tenant policy blocks or redacts; returned unchanged otherwise."""
    if not value or not find(value):
        return value
    policy = {
        kind: "flag" if action == "flag" else "block"
        for kind, action in tenant_settings(principal.tenant_id).pii_policy.items()
    }
    screen_text(principal, value, route=route, memory_user_id=memory_user_id, what=what, policy=policy)
    return value


def screens(field_name: str, *, route: str):
    """Decorator for a service taking a free-text keyword argument `field_name` (a reason, a note):
    the text is screened before the service runs (and before any transaction it opens), and the
    service receives the safe form."""
    import functools

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args, principal: Principal, **kwargs):
            if kwargs.get(field_name):
                kwargs[field_name] = screen_text(
                    principal, kwargs[field_name], route=route, memory_user_id=None, what=field_name.replace("_", " ")
                ).content
            return fn(*args, principal=principal, **kwargs)

        return wrapper

    return decorate
