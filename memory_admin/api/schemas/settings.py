"""A tenant's settings: the body and the patch, typed from the one table of limits."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import Field, StrictBool, StrictInt

from memory_admin.api.schemas.common import StrictIn, number
from memory_admin.models import PII_ACTIONS, PII_KINDS
from memory_admin.services.settings import LIMITS, SEARCH_WEIGHT_MAX, SEARCH_WEIGHT_NAMES


class SettingsOut(Schema):
    confidence_threshold: float
    dedup_similarity: float
    contradiction_similarity: float
    auto_resolve_gap: float
    fact_cap: int
    pii_policy: dict[str, str]
    search_weights: dict[str, float]
    debounce_seconds: int
    min_message_chars: int
    extraction_enabled: bool
    episode_idle_minutes: int


def setting(name: str) -> Any:
    """A numeric setting's type, from the one table of limits (services.settings.LIMITS), so that
    OpenAPI states its range and the API refuses what the service would refuse."""
    limit = LIMITS[name]
    low = {"gt" if limit.above_minimum else "ge": limit.minimum}
    if limit.type is int:
        return Annotated[StrictInt, Field(**low, le=limit.maximum, description=limit.help)]
    return number(**low, le=limit.maximum, description=limit.help)


PiiKind = Literal[PII_KINDS]
PiiAction = Literal[PII_ACTIONS]
SearchWeightName = Literal[SEARCH_WEIGHT_NAMES]


class SettingsPatch(StrictIn):
    confidence_threshold: setting("confidence_threshold") | None = None
    dedup_similarity: setting("dedup_similarity") | None = None
    contradiction_similarity: setting("contradiction_similarity") | None = None
    auto_resolve_gap: setting("auto_resolve_gap") | None = None
    fact_cap: setting("fact_cap") | None = None
    pii_policy: dict[PiiKind, PiiAction] | None = None
    search_weights: dict[SearchWeightName, number(ge=0, le=SEARCH_WEIGHT_MAX)] | None = None
    debounce_seconds: setting("debounce_seconds") | None = None
    min_message_chars: setting("min_message_chars") | None = None
    extraction_enabled: StrictBool | None = None
    episode_idle_minutes: setting("episode_idle_minutes") | None = None
