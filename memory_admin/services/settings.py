"""A tenant's settings: one table of what each may be set to, one update for the API and the dashboard.

`LIMITS` is the only statement of a setting's type and range: the API schema (`SettingsPatch`) is
built from it, the dashboard settings page shows its units, ranges and help, and
`tenant_settings_update` enforces it for every caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from memory_admin.db.cursors import prepared_cursor
from memory_admin.db.hydrate import hydrate
from memory_admin.errors import Invalid
from memory_admin.models import PII_ACTIONS, PII_KINDS, TenantSettings
from memory_admin.models.tenancy import default_search_weights
from memory_admin.selectors.access import ADMIN, Principal, require_tenant_wide
from memory_admin.services.audit import audit

# Each search weight is a factor of one ranking component; at least one must be above 0.
SEARCH_WEIGHT_NAMES = tuple(default_search_weights())
SEARCH_WEIGHT_MAX = 10


@dataclass(frozen=True)
class Limit:
    """What one numeric setting may hold, and how the dashboard explains it."""

    name: str
    type: type[int] | type[float]
    minimum: float
    maximum: float
    label: str
    unit: str
    help: str
    # The minimum itself is refused (a similarity of 0 would merge or compare every pair of facts).
    above_minimum: bool = False

    @property
    def allowed(self) -> str:
        low, high = f"{self.minimum:g}", f"{self.maximum:g}"
        return f"above {low}, up to {high}" if self.above_minimum else f"{low} to {high}"

    def check(self, value: object) -> int | float:
        """`value` as stored, or Invalid naming the setting."""
        words = self.name.replace("_", " ")
        if self.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise Invalid(f"{words} must be a whole number.", field=self.name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise Invalid(f"{words} must be a number.", field=self.name)
        too_low = value <= self.minimum if self.above_minimum else value < self.minimum
        if too_low or value > self.maximum:
            if self.above_minimum:
                raise Invalid(f"{words} must be above {self.minimum:g} and at most {self.maximum:g}.", field=self.name)
            raise Invalid(f"{words} must be between {self.minimum:g} and {self.maximum:g}.", field=self.name)
        return self.type(value)


LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit(
            "confidence_threshold",
            float,
            0,
            1,
            "Minimum confidence",
            "score 0–1",
            "Writes claiming less confidence than this are refused (rejected: low confidence).",
        ),
        # Above 0, as the database's check constraint says: 0 would make every pair of facts a duplicate.
        Limit(
            "dedup_similarity",
            float,
            0,
            1,
            "Duplicate similarity",
            "cosine 0–1",
            "A new fact at least this similar to an existing one is merged into it instead of stored.",
            above_minimum=True,
        ),
        Limit(
            "contradiction_similarity",
            float,
            0,
            1,
            "Contradiction similarity",
            "cosine 0–1",
            "Facts this similar but saying different things are checked for a contradiction.",
            above_minimum=True,
        ),
        Limit(
            "auto_resolve_gap",
            float,
            0,
            1,
            "Auto-resolve gap",
            "confidence points 0–1",
            "A contradiction resolves itself when one side is this much more confident; "
            "below, it goes to the review queue.",
        ),
        Limit(
            "fact_cap",
            int,
            1,
            100_000,
            "Fact cap per user",
            "facts",
            "Above this many active facts, the least useful unpinned ones are evicted.",
        ),
        Limit(
            "debounce_seconds",
            int,
            0,
            86_400,
            "Extraction delay",
            "seconds",
            "How long a conversation must be quiet before its new messages are extracted.",
        ),
        # Up to the largest message the API accepts (SPEC §11: 64 KB): a higher minimum would silently stop
        # all extraction, which is what the kill switch is for.
        Limit(
            "min_message_chars",
            int,
            0,
            64 * 1024,
            "Shortest message extracted",
            "characters",
            'Shorter messages (greetings, "ok") are logged but not sent to extraction.',
        ),
        # Up to a week: a conversation quiet for longer is over, and its episode belongs in "what happened
        # last time" (SPEC §2, §6) rather than waiting weeks to be summarised.
        Limit(
            "episode_idle_minutes",
            int,
            1,
            7 * 24 * 60,
            "Episode break",
            "minutes",
            "A pause this long in a conversation starts a new episode.",
        ),
    )
}

# Every setting the API reads and writes, in the order it answers them.
SETTING_NAMES = (*LIMITS, "pii_policy", "search_weights", "extraction_enabled")


_SETTINGS_ATTNAMES = [f.attname for f in TenantSettings._meta.concrete_fields]
# Read by every write and search: fixed SQL instead of the ORM compiling the same lookup per request.
_SETTINGS_SQL = "SELECT {} FROM {} WHERE tenant_id = %s".format(
    ", ".join(connection.ops.quote_name(f.column) for f in TenantSettings._meta.concrete_fields),
    connection.ops.quote_name(TenantSettings._meta.db_table),
)


def tenant_settings(tenant_id: int) -> TenantSettings:
    """The tenant's settings row, created with the defaults the first time it is asked for. Every write
    and search reads it: the statement is prepared (parsed and planned once per connection)."""
    with prepared_cursor() as cursor:
        cursor.execute(_SETTINGS_SQL, [tenant_id])
        rows = cursor.fetchall()
    if rows:
        return hydrate(TenantSettings, _SETTINGS_ATTNAMES, rows)[0]
    settings, _ = TenantSettings.objects.get_or_create(tenant_id=tenant_id)
    return settings


def settings_snapshot(obj: TenantSettings) -> dict[str, Any]:
    """Every setting by name (what GET /settings answers, and the audit event's before/after)."""
    return {name: _copy(getattr(obj, name)) for name in SETTING_NAMES}


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


@transaction.atomic
def tenant_settings_update(*, principal: Principal, changes: Mapping[str, Any]) -> TenantSettings:
    """Change some settings of the principal's tenant (admins only). Every value is checked first
    (Invalid names the setting; nothing is saved), then the row is saved under its lock and audited
    once. `pii_policy` and `search_weights` may name only some of their entries."""
    require_tenant_wide(principal, ADMIN)
    obj = TenantSettings.objects.select_for_update().get(pk=tenant_settings(principal.tenant_id).pk)
    before = settings_snapshot(obj)
    for name, value in changes.items():
        setattr(obj, name, _checked(obj, name, value))
    obj.save()
    audit(principal, "settings.update", outcome="updated", target=obj, before=before, after=settings_snapshot(obj))
    return obj


def _checked(obj: TenantSettings, name: str, value: object) -> Any:
    if name in LIMITS:
        return LIMITS[name].check(value)
    if name == "pii_policy":
        return _pii_policy(obj.pii_policy, value)
    if name == "search_weights":
        return _search_weights(obj.search_weights, value)
    if name == "extraction_enabled":
        if not isinstance(value, bool):
            raise Invalid("extraction enabled must be true or false.", field=name)
        return value
    raise Invalid(f"{name}: no such setting.", field=name)


def _pii_policy(current: dict[str, str], value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise Invalid("pii_policy: give an action per PII kind.", field="pii_policy")
    for kind, action in value.items():
        if kind not in PII_KINDS or action not in PII_ACTIONS:
            raise Invalid(
                f"PII policy for {kind}: choose one of {', '.join(PII_ACTIONS)}.",
                field=f"pii_policy.{kind}" if kind in PII_KINDS else "pii_policy",
            )
    return {**current, **value}


def _search_weights(current: dict[str, float], value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise Invalid("search_weights: give a weight per ranking component.", field="search_weights")
    for name, weight in value.items():
        field = f"search_weights.{name}"
        if name not in SEARCH_WEIGHT_NAMES:
            raise Invalid(f"search_weights: choose from {', '.join(SEARCH_WEIGHT_NAMES)}.", field=field)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= SEARCH_WEIGHT_MAX:
            raise Invalid(f"{field} must be a number from 0 to {SEARCH_WEIGHT_MAX}.", field=field)
    weights = {**current, **value}
    if not any(weights.values()):
        # Every hit would score 0: ranking would be arbitrary. Refuse rather than store it.
        raise Invalid("search_weights: at least one weight must be above 0.", field="search_weights")
    return weights
