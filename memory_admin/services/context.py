"""Moved to `memory_admin.retrieval.context` (issue 30): this module re-exports its names while callers
outside the project move; nothing inside the project imports it."""

from memory_admin.retrieval.context import MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS, context_block  # noqa: F401
from memory_admin.retrieval.context.fill import MIN_CUT_TOKENS  # noqa: F401
from memory_admin.retrieval.context.gather import ENTITY_LIMIT  # noqa: F401
from memory_admin.retrieval.context.render import ANGLE_BRACKETS  # noqa: F401
