"""Step 1 of every write (facts, notebooks, skills, corrections, messages): the secret/PII scan.

A refusal is recorded (PiiBlock + audit event) in its own transaction before `Blocked` is raised, so
the record survives while nothing of the refused write is stored.
"""

from __future__ import annotations

from django.db import transaction

from memory_admin.errors import Blocked
from memory_admin.models import PiiBlock
from memory_admin.selectors.access import Principal
from memory_admin.services.audit import audit
from memory_admin.services.pii import ScanResult, scan
from memory_admin.services.settings import tenant_settings


def screen_text(principal: Principal, text: str, *, route: str, memory_user_id: int | None) -> ScanResult:
    """Scan `text` under the tenant's PII policy; raise Blocked (after recording it) or return
    the result whose `content` is safe to store (redacted where the policy says so)."""
    result = scan(text, tenant_settings(principal.tenant_id).pii_policy)
    if not result.findings:
        return result
    action = "blocked" if result.blocked else "redacted" if result.redacted else "flagged"
    with transaction.atomic():
        block = PiiBlock.objects.create(
            tenant_id=principal.tenant_id,
            memory_user_id=memory_user_id,
            agent_id=principal.agent_id,
            actor=principal.actor,
            route=route,
            action=action,
            kinds=result.kinds,
            redacted_preview=result.preview,
            fingerprint=result.fingerprint,
        )
        audit(
            principal,
            f"{route}.write",
            outcome=action,
            target=block,
            memory_user_id=memory_user_id,
            after={"kinds": result.kinds, "preview": result.preview},
            reason=f"{', '.join(result.kinds)} found by the secret/PII scan",
        )
    result.block_id = str(block.pk)  # type: ignore[attr-defined]
    if result.blocked:
        raise Blocked(
            f"Refused: the text contains {', '.join(result.kinds)}. Nothing was stored; "
            f"an auditor can see block {block.pk}.",
            block_id=str(block.pk),
            kinds=result.kinds,
            outcome="blocked",
        )
    return result
