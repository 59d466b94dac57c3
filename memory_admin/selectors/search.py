"""Moved to `memory_admin.retrieval` (issue 30): this module re-exports its names while callers outside
the project move; nothing inside the project imports it."""

from memory_admin.retrieval import *  # noqa: F403
from memory_admin.retrieval import __all__  # noqa: F401
from memory_admin.retrieval.candidates import hnsw_ef_search, undrawn_entities  # noqa: F401
from memory_admin.retrieval.names import name_spans  # noqa: F401
from memory_admin.retrieval.query import TOPIC_SHARE  # noqa: F401
from memory_admin.retrieval.ranking import HOP_SHARE, NEIGHBOUR_WEIGHT  # noqa: F401
