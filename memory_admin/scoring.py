"""Decay and staleness (SPEC §7), defined once: in Python for single facts, in SQL for queries.

effective confidence = confidence × exp(−λ(kind)·days since last access) × reinforcement(access count)
    "last access" of a fact never read is when it was stored (created_at), not when it became true
    (valid_from): importing a 2023 conversation today must not make all of it fade at once, and an
    old observation must not outrank a newer one only by being written later.
    reinforcement = 1 + R·(1 − exp(−access_count / A)), bounded by 1 + R; never zero for unread facts.
    The product is capped at 1. Pinned facts do not decay (their confidence is returned as is).
staleness = 0.4·age factor + 0.3·access decay + 0.3·contradiction flag, in 0..1
    age factor   = 1 − exp(−days since valid_from / AGE_SCALE_DAYS)
    access decay = 1 − exp(−days since last access / ACCESS_SCALE_DAYS)   (the same "last access")
    contradiction flag = 1 while the fact is part of an open contradiction.
    stale above 0.7 (half weight in ranking), eviction candidate above 0.9.

Both forms are total: no stored value can make them raise (a fact dated 1500 or 2199, a negative
access count, a NaN confidence written straight into the table). Postgres raises on float underflow
(`exp(-1e6)`, or a product that rounds to 0), so every exponent is clamped to MAX_EXPONENT
(exp(-50) ≈ 2e-22: "fully decayed") and a stored confidence below TINY (or NaN) counts as exactly 0:
effective confidence is then 0 or at least TINY·exp(−50) ≈ 2e-34, far from where the products
ranking builds from it could underflow. Python mirrors each clamp, so the two forms still agree.
"""

from __future__ import annotations

import math
from datetime import datetime

from django.db.models import Case, F, FloatField, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

# Per-day decay rates by kind: skills slow, facts and decisions moderate, inferences fast.
DECAY_LAMBDA: dict[str, float] = {
    "skill": 0.002,
    "fact": 0.01,
    "decision": 0.01,
    "preference": 0.01,
    "correction": 0.005,
    "inference": 0.03,
}
REINFORCEMENT_MAX = 0.5
REINFORCEMENT_SCALE = 5.0
AGE_SCALE_DAYS = 180.0
ACCESS_SCALE_DAYS = 60.0
STALE_THRESHOLD = 0.7
EVICTION_THRESHOLD = 0.9
MAX_EXPONENT = 50.0
TINY = 1e-12


def _days(since: datetime | None, now: datetime) -> float:
    if since is None:
        return 0.0
    return max(0.0, (now - since).total_seconds() / 86400.0)


def _exp_neg(x: float) -> float:
    """exp(−x) for x ≥ 0, with x clamped to [0, MAX_EXPONENT]."""
    return math.exp(-min(max(x, 0.0), MAX_EXPONENT))


def _unit(x) -> float:
    """A confidence-like value in {0} ∪ [TINY, 1]: NaN and tiny values are 0, above 1 is 1."""
    x = float(x or 0.0)
    return min(x, 1.0) if x >= TINY else 0.0


def _last_access(fact) -> datetime | None:
    return fact.last_accessed_at or fact.created_at or fact.valid_from


def terms(fact, now: datetime | None = None) -> dict:
    """Every term of effective confidence and staleness for one fact: what the two scores are made
    of, so that a page explaining a score shows exactly the numbers that produced it."""
    now = now or timezone.now()
    lam = DECAY_LAMBDA.get(fact.kind, DECAY_LAMBDA["fact"])
    days_since_access = _days(_last_access(fact), now)
    age_days = _days(fact.valid_from or fact.created_at, now)
    confidence = _unit(fact.confidence)
    decay = 1.0 if fact.pinned else _exp_neg(lam * days_since_access)
    reinforcement = (
        1.0 if fact.pinned else (1 + REINFORCEMENT_MAX * (1 - _exp_neg((fact.access_count or 0) / REINFORCEMENT_SCALE)))
    )
    age_factor = 1 - _exp_neg(age_days / AGE_SCALE_DAYS)
    access_decay = 1 - _exp_neg(days_since_access / ACCESS_SCALE_DAYS)
    flag = 1.0 if fact.contested else 0.0
    return {
        "confidence": confidence,
        "pinned": fact.pinned,
        "lambda": lam,
        "days_since_access": days_since_access,
        "decay": decay,
        "access_count": fact.access_count,
        "reinforcement": reinforcement,
        "effective": min(1.0, confidence * decay * reinforcement),
        "age_days": age_days,
        "age_factor": age_factor,
        "access_decay": access_decay,
        "contested": fact.contested,
        "staleness": round(min(1.0, 0.4 * age_factor + 0.3 * access_decay + 0.3 * flag), 4),
        "stale_threshold": STALE_THRESHOLD,
        "eviction_threshold": EVICTION_THRESHOLD,
    }


def effective_confidence(fact, now: datetime | None = None) -> float:
    return terms(fact, now)["effective"]


def staleness(fact, now: datetime | None = None) -> float:
    return terms(fact, now)["staleness"]


def is_stale(fact, now: datetime | None = None) -> bool:
    return fact.status == "stale" or staleness(fact, now) > STALE_THRESHOLD


def scores(fact, now: datetime | None = None) -> tuple[float, float, bool]:
    """(effective confidence, staleness, is_stale) from one evaluation of the terms."""
    t = terms(fact, now)
    return t["effective"], t["staleness"], fact.status == "stale" or t["staleness"] > STALE_THRESHOLD


# --- SQL forms, for ordering and filtering inside queries (alias-free: table columns by name) ---
# Ages in float8 (date_part), not numeric (EXTRACT returns numeric since Postgres 14): numeric exp()
# and division cost ~10 µs a row, which a search describing 200 candidates pays on every request.


def _lambda_sql(kind_column: str) -> str:
    cases = " ".join(f"WHEN '{kind}' THEN {lam}" for kind, lam in DECAY_LAMBDA.items())
    return f"(CASE {kind_column} {cases} ELSE {DECAY_LAMBDA['fact']} END)"


def _last_access_sql(table: str) -> str:
    return f"COALESCE({table}.last_accessed_at, {table}.created_at, {table}.valid_from)"


def last_access_expression() -> Coalesce:
    """`_last_access` as an ORM expression, for filters on how long a fact has gone unread."""
    return Coalesce("last_accessed_at", "created_at", "valid_from")


def _days_sql(since: str, now: str) -> str:
    # GREATEST/LEAST treat NaN as the largest value: a NaN age clamps to MAX_EXPONENT downstream.
    return f"GREATEST(0, date_part('epoch', {now} - {since}) / 86400.0)"


def _exp_neg_sql(x: str) -> str:
    return f"exp(-LEAST(GREATEST({x}, 0), {MAX_EXPONENT}))"


def _unit_sql(x: str) -> str:
    # NaN compares above every number in Postgres, hence the explicit test. `x` appears three times:
    # a column, never an expression holding a placeholder.
    return f"(CASE WHEN {x} >= {TINY} AND {x} <> 'NaN'::float8 THEN LEAST({x}, 1.0) ELSE 0.0 END)"


def effective_confidence_sql(table: str = "memory_admin_fact", now: str = "now()") -> str:
    """`now` is an SQL expression for the time of evaluation (a `%s::timestamptz` placeholder for
    "as of" questions)."""
    days = _days_sql(_last_access_sql(table), now)
    confidence = _unit_sql(f"{table}.confidence")
    decay = _exp_neg_sql(f"{_lambda_sql(table + '.kind')} * {days}")
    # In float8, as Python computes it: `access_count / 5.0` would be numeric, and numeric exp() costs
    # ~4 µs a row (a search describes every candidate), for a value that then differs from Python's in its
    # last bits.
    reads = _exp_neg_sql(f"{table}.access_count::float8 / {REINFORCEMENT_SCALE}::float8")
    reinforcement = f"(1 + {REINFORCEMENT_MAX}::float8 * (1 - {reads}))"
    decayed = f"LEAST(1.0, {confidence} * {decay} * {reinforcement})"
    return f"(CASE WHEN {table}.pinned THEN {confidence} ELSE {decayed} END)"


def staleness_sql(table: str = "memory_admin_fact") -> str:
    age_days = _days_sql(f"COALESCE({table}.valid_from, {table}.created_at)", "now()")
    access_days = _days_sql(_last_access_sql(table), "now()")
    age_factor = f"(1 - {_exp_neg_sql(f'{age_days} / {AGE_SCALE_DAYS}')})"
    access_decay = f"(1 - {_exp_neg_sql(f'{access_days} / {ACCESS_SCALE_DAYS}')})"
    return (
        f"LEAST(1.0, 0.4 * {age_factor} + 0.3 * {access_decay}"
        f" + 0.3::float8 * (CASE WHEN {table}.contested THEN 1.0::float8 ELSE 0.0::float8 END))"
    )


def annotate_scores(queryset):
    """Add `eff_conf` and `stale_score` computed by Postgres (one formula, shared with Python)."""
    return queryset.annotate(
        eff_conf=RawSQL(effective_confidence_sql(), (), output_field=FloatField()),  # noqa: S611 - constants only
        stale_score=RawSQL(staleness_sql(), (), output_field=FloatField()),  # noqa: S611 - constants only
    )


def stale_weight_expression():
    """1.0 for fresh facts, 0.5 for stale ones, as an ORM expression over an annotated queryset."""
    return Case(
        When(status="stale", then=Value(0.5)),
        When(stale_score__gt=STALE_THRESHOLD, then=Value(0.5)),
        default=Value(1.0),
        output_field=FloatField(),
    ) * F("eff_conf")
