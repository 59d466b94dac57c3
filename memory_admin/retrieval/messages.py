"""Messages as episodic memory (KINDS.md): a user's indexed messages are candidates of a search beside
its facts, described as the candidate statement describes a fact (`Candidate`), so that one ranking
(`ranking.score`) orders both kinds: IDF, cosine rescaling, neighbours and the priors are computed over
the facts and messages together.

What a message is to the ranking: its cosine distance to the query (its embedding, filled by the worker:
services/message_index.py), the query lexemes its text holds, its lexemes, its age from `created_at` (the
time it was said), importance MESSAGE_IMPORTANCE, a constant confidence MESSAGE_CONFIDENCE (what the user
said, taken as a statement they made), and the entities the query names that it mentions, counted from its
text as drawing a fact of that text would link them (`mentions_of`): a fact naming the person asked about
is lifted by the entity factor, so a message naming them is too (LoCoMo dev, messages path, pooled R@10
0.748 -> 0.791).

Deduplication (`dedupe`): a message and the facts extracted from it (`Fact.message`) are one hit. The
group takes the place of its best-ranked member, which stands for it, unless that is a message that says
no more than its facts among the candidates (no more than SAYS_MORE lexemes none of them holds): then the
best of its facts stands. So the ten best say ten things, not one thing twice (LoCoMo dev: 823 of 7,600
places held a second copy of a turn; pooled R@10 0.741 -> 0.748).

Access: the messages are read through `visible()`, the one access check (tenant, and the users a
restricted key reaches), of the one memory user searched.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib.postgres.search import SearchQuery
from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL
from pgvector import Vector

from memory_admin.db.compiled import bind, compiled
from memory_admin.db.cursors import vector_cursor
from memory_admin.models import Entity, Fact, MemoryUser, Message
from memory_admin.retrieval.candidates import MAX_LEXEMES, MAX_QUERY_ENTITIES, Candidate, _mention_column
from memory_admin.retrieval.names import name_keys, or_tsquery
from memory_admin.selectors.access import Principal, visible
from memory_admin.services.entity_draw import drawn_names

# The `src` of a message candidate (a fact's is its branch, 0 or more).
MESSAGE_SRC = -1
# A search considers a user's MESSAGE_NEAREST messages nearest the query and the MESSAGE_KEYWORD best
# full-text matches among the first KEYWORD_SCAN (ts_rank), not every message: a conversation log grows
# without bound, and ranking every message of a long one in Python cost ~3x the facts-only search at 550
# messages a user (bench/JOURNAL.md "Messages as episodic memory").
MESSAGE_NEAREST = 150
MESSAGE_KEYWORD = 50
KEYWORD_SCAN = 500
# What a message counts as in the ranking (module docstring). Tuned on the LoCoMo dev split
# (bench/messages_locomo.py, bench/JOURNAL.md "Messages as episodic memory"): 0.9 while the offline
# extractor wrote 80 facts; 1.0 once rules-v2 wrote 732 (pooled R@10 0.714 -> 0.742 at 150 nearest).
MESSAGE_CONFIDENCE = 1.0
MESSAGE_IMPORTANCE = 0.5
# A message with more than this many lexemes that its facts among the candidates lack says more: it may
# stand for them.
SAYS_MORE = 3
DEDUPE_WINDOW = 3

_USER_SENTINEL = -7_340_041
_QUERY_SENTINEL = "\x00message-query\x00"
_VECTOR_SENTINEL = object()
_TSQ_SENTINEL = "\x00message-tsquery\x00"


def message_candidate_id(message_id: int) -> uuid.UUID:
    """A message's id as a candidate's (a UUID, as a fact's): version 0, so it never equals a fact's
    (version 4), and ranking's ties order it among them."""
    return uuid.UUID(int=message_id)


@functools.lru_cache(maxsize=256)
def _statement(principal: Principal, has_text: bool) -> tuple[str, tuple]:
    """The candidate statement of one user's messages, compiled once per principal (the user, the query
    text, its tsquery and its vector bound per request): the nearest ones, and the best full-text
    matches when the query has words."""
    distance = RawSQL("memory_admin_message.embedding <=> (SELECT v FROM message_qv)", ())  # noqa: S611 - constant
    own = visible(principal, Message.objects.filter(memory_user_id=_USER_SENTINEL, embedding__isnull=False))
    columns = ("id", "created_at", "search_vector", "distance", "thread__external_id", "role", "content")
    nearest = own.annotate(distance=distance).order_by("distance").values(*columns)[:MESSAGE_NEAREST]
    branches = [compiled(nearest)]
    if has_text:
        matching = own.filter(search_vector=SearchQuery(_TSQ_SENTINEL, search_type="raw", config="english"))
        sql, params = compiled(matching.annotate(distance=distance).values(*columns)[:KEYWORD_SCAN])
        branches.append(
            (
                f"SELECT k.* FROM ({sql}) AS k"
                f" ORDER BY ts_rank(k.search_vector, to_tsquery('english', %s)) DESC LIMIT {MESSAGE_KEYWORD}",
                (*params, _TSQ_SENTINEL),
            )
        )
    union = " UNION ALL ".join(f"(SELECT b.* FROM ({sql}) AS b)" for sql, _ in branches)
    statement = (
        "WITH message_qv AS (SELECT %s::vector AS v),"
        f" message_lx AS (SELECT (tsvector_to_array(to_tsvector('english', %s)))[1:{MAX_LEXEMES}] AS q)"
        " SELECT (SELECT q FROM message_lx), m.id, m.distance,"
        " GREATEST(0, date_part('epoch', now() - m.created_at) / 86400.0)::float8,"
        " COALESCE(length(m.search_vector), 0), tsvector_to_array(m.search_vector),"
        # What a hit shows of it, carried (as the fact candidates carry theirs): no second statement.
        " m.thread__external_id, m.role, m.created_at, m.content"
        f" FROM (SELECT DISTINCT ON (u.id) * FROM ({union}) AS u ORDER BY u.id) AS m"
    )
    return statement, (_VECTOR_SENTINEL, _QUERY_SENTINEL, *(p for _, ps in branches for p in ps))


def message_candidates(
    principal: Principal, memory_user: MemoryUser, *, query: str, vector: list[float]
) -> list[Candidate]:
    """The user's indexed messages the principal can see, as candidates (their `src` MESSAGE_SRC, their
    id `message_candidate_id`, carrying what `message_shown` shows); `matched` over the query's lexemes in
    the order the fact candidates number them (the same expression over the same text)."""
    tsq = or_tsquery(query)
    statement, params = _statement(principal, bool(tsq))
    values = {
        _USER_SENTINEL: memory_user.pk,
        _QUERY_SENTINEL: query[:2000],
        _VECTOR_SENTINEL: Vector(vector),
        _TSQ_SENTINEL: tsq,
    }
    with vector_cursor(binary_results=True, prepared=True) as cursor:
        cursor.execute(statement, bind(params, values))
        result = cursor.fetchall()
    if not result:
        return []
    bits = {lexeme: 1 << i for i, lexeme in enumerate(result[0][0] or ())}
    query_lexemes = bits.keys()  # lexemes are distinct within a tsvector: the common ones' bits sum to the mask
    named = named_entities(principal, memory_user, query)
    rows = [
        Candidate(
            id=message_candidate_id(pk),
            src=MESSAGE_SRC,
            status=Fact.Status.ACTIVE,
            importance=MESSAGE_IMPORTANCE,
            eff_conf=MESSAGE_CONFIDENCE,
            stale_score=0.0,
            age_days=age_days,
            distance=distance,
            matched=sum(map(bits.__getitem__, query_lexemes & (lexemes or ()))),
            doc_len=doc_len,
            lexemes=lexemes,
            ent=mentions_of(shown[-1], named) if named else None,
            due=None,
            carried=(pk, *shown),
        )
        for _, pk, distance, age_days, doc_len, lexemes, *shown in result
    ]
    return rows


def named_entities(principal: Principal, memory_user: MemoryUser, query: str) -> list[set[str]]:
    """The alias keys of the entities the query names by alias (the user's own or the tenant's), in the
    order the fact candidates number them (by id), so that a message's entity column counts with theirs;
    none when no alias matches (the facts' fallback by embedding is not followed for messages)."""
    keys = name_keys(query)
    if not keys:
        return []
    owner = Q(memory_user_id=memory_user.pk) | Q(memory_user__isnull=True)
    entities = visible(principal, Entity.objects.filter(owner, merged_into__isnull=True, alias_keys__overlap=keys))
    found = sorted(entities.values_list("id", "alias_keys")[:MAX_QUERY_ENTITIES])
    return [set(alias_keys) for _, alias_keys in found]


def mentions_of(text: str, named: list[set[str]]) -> tuple[int, int, int]:
    """A message's entity column, counted from its text as drawing a fact of it would link it (the named
    entities it mentions, those it is about; no neighbours)."""
    mentions, _ = drawn_names(text)
    return _mention_column(mentions, {}, named, set())


def is_message(row: Candidate) -> bool:
    return row.src == MESSAGE_SRC


def message_id_of(row: Candidate) -> int:
    return row.id.int


@dataclass(frozen=True)
class MessageShown:
    """A message hit as search shows it: its text as stored (screened at the write door)."""

    id: int
    thread_id: str
    role: str
    created_at: datetime
    text: str

    def out(self) -> dict:
        return {
            "id": self.id,
            "thread_id": self.thread_id,
            "role": self.role,
            "created_at": self.created_at,
            "text": self.text,
        }


def message_shown(row: Candidate) -> MessageShown:
    """A message candidate as its hit shows it (the columns it carries)."""
    return MessageShown(*row.carried)


_FACTS_FROM = (
    f"SELECT id, message_id FROM {Fact._meta.db_table} WHERE id = ANY(%s::uuid[]) AND message_id = ANY(%s::bigint[])"
)


def facts_from(fact_ids: list, message_ids: list[int]) -> dict:
    """fact id -> the id of the message it was extracted from, for the facts among `fact_ids` (candidates
    the principal can see) extracted from one of `message_ids`."""
    if not fact_ids or not message_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_FACTS_FROM, [fact_ids, message_ids])
        return dict(cursor.fetchall())


def says_more(message: Candidate, facts: list[Candidate]) -> bool:
    """The message holds more than SAYS_MORE lexemes none of `facts` (extracted from it) holds."""
    told = set().union(*(f.lexemes or () for f in facts))
    return len(set(message.lexemes or ()) - told) > SAYS_MORE


def dedupe(ranked: list[Candidate], k: int, message_of: int | None = None) -> list[Candidate]:
    """The k best of `ranked` (best first), a message and the facts extracted from it counted as one hit
    (module docstring): the group takes the place of its best-ranked member, and that member stands for
    it, unless it is a message that says no more than its facts among the candidates, which yields to the
    best of them. `message_of`: the position of a fact's `message_id` among the columns fact candidates
    carry, if they do (else it is read)."""
    # Within the first DEDUPE_WINDOW × k: far enough for every group to be whole in practice.
    window = ranked[: DEDUPE_WINDOW * k]
    messages = {message_id_of(r): r for r in window if is_message(r)}
    if not messages:
        return ranked[:k]
    if message_of is None:
        source = facts_from([r.id for r in window if not is_message(r)], list(messages))
    else:
        source = {
            r.id: r.carried[message_of]
            for r in window
            if not is_message(r) and r.carried and r.carried[message_of] in messages
        }
    if not source:
        return ranked[:k]
    facts_of: dict[int, list[Candidate]] = {}
    for row in window:
        if row.id in source:
            facts_of.setdefault(source[row.id], []).append(row)
    top: list[Candidate] = []
    seen: set = set()
    for row in ranked:
        group = message_id_of(row) if is_message(row) else source.get(row.id, row.id)
        if group in seen:
            continue
        seen.add(group)
        facts = facts_of.get(group)
        if facts and is_message(row) and not says_more(row, facts):
            row = facts[0]
        top.append(row)
        if len(top) == k:
            break
    return top
