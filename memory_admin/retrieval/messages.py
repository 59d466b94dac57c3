"""Messages as episodic memory (KINDS.md): a user's indexed messages are candidates of a search beside
its facts, described as the candidate statement describes a fact (`Candidate`), so that one ranking
(`ranking.score`) orders both kinds: IDF, cosine rescaling, neighbours and the priors are computed over
the facts and messages together.

What a message is to the ranking: its cosine distance to the query (its embedding, filled by the worker:
services/message_index.py), the query lexemes its text holds, its lexemes, its age from `created_at` (the
time it was said), importance MESSAGE_IMPORTANCE, a constant confidence MESSAGE_CONFIDENCE (what the user
said, taken as a statement they made), and the entities the query names by alias that it mentions, read
from its words (`mentions_of`): a fact naming the person asked about is lifted by the entity factor, so a
message naming them is too (LoCoMo dev, messages path, pooled R@10 0.748 -> 0.789).

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
import json
import re
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
from memory_admin.retrieval.candidates import MAX_LEXEMES, MAX_QUERY_ENTITIES, Candidate
from memory_admin.retrieval.names import WORD, name_keys, or_tsquery
from memory_admin.selectors.access import Principal, visible

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
_KEYS_SENTINEL = "\x00message-name-keys\x00"
# What may precede a message's first word (a name opening it is what the message is about).
_NOT_WORD = "".join(chr(c) for c in range(128) if not (chr(c).isalnum() or chr(c) == "_"))


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
    # The entities the query names by alias (the user's own or the tenant's), as the fact candidates'
    # `search_alias` finds them and numbers them (by id): their alias keys, once, on every row.
    keys = RawSQL("%s::varchar(200)[]", (_KEYS_SENTINEL,))  # noqa: S611 - a bound parameter
    owner = Q(memory_user_id=_USER_SENTINEL) | Q(memory_user__isnull=True)
    named = visible(principal, Entity.objects.filter(owner, merged_into__isnull=True, alias_keys__overlap=keys))
    named_sql, named_params = compiled(named.values("id", "alias_keys")[:MAX_QUERY_ENTITIES])
    statement = (
        "WITH message_qv AS (SELECT %s::vector AS v),"
        f" message_lx AS (SELECT (tsvector_to_array(to_tsvector('english', %s)))[1:{MAX_LEXEMES}] AS q)"
        " SELECT (SELECT q FROM message_lx),"
        f" (SELECT json_agg(e.alias_keys ORDER BY e.id)::text FROM ({named_sql}) AS e), m.id, m.distance,"
        " GREATEST(0, date_part('epoch', now() - m.created_at) / 86400.0)::float8,"
        " COALESCE(length(m.search_vector), 0), tsvector_to_array(m.search_vector),"
        # What a hit shows of it, carried (as the fact candidates carry theirs): no second statement.
        " m.thread__external_id, m.role, m.created_at, m.content"
        f" FROM (SELECT DISTINCT ON (u.id) * FROM ({union}) AS u ORDER BY u.id) AS m"
    )
    return statement, (_VECTOR_SENTINEL, _QUERY_SENTINEL, *named_params, *(p for _, ps in branches for p in ps))


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
        _KEYS_SENTINEL: name_keys(query),
    }
    with vector_cursor(binary_results=True, prepared=True) as cursor:
        cursor.execute(statement, bind(params, values))
        result = cursor.fetchall()
    if not result:
        return []
    bits = {lexeme: 1 << i for i, lexeme in enumerate(result[0][0] or ())}
    query_lexemes = bits.keys()  # lexemes are distinct within a tsvector: the common ones' bits sum to the mask
    named = _named(result[0][1])
    return [
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
        for _, _, pk, distance, age_days, doc_len, lexemes, *shown in result
    ]


def _named(alias_keys_json: str | None) -> list[re.Pattern]:
    """For each entity the query names, in order, a pattern finding any of its names among a text's words
    (casefolded, as alias keys are)."""
    if not alias_keys_json:
        return []
    patterns = []
    for alias_keys in json.loads(alias_keys_json):
        names = sorted({r"\W+".join(map(re.escape, WORD.findall(key))) for key in alias_keys} - {""}, key=len)
        # An entity without a word in its names (never made by drawing) keeps its bit and matches nothing.
        alternatives = "|".join(reversed(names)) or r"(?!)"
        patterns.append(re.compile(r"(?<![^\W_])(?:" + alternatives + r")(?![^\W_])"))
    return patterns


def mentions_of(text: str, named: list[re.Pattern]) -> tuple[int, int, int]:
    """A message's entity column (as the candidate statement gives a fact's: the named entities it
    mentions, bit i for the i-th; those it is about; no neighbours): it mentions an entity when one of
    its names occurs among its words, and is about it when it opens with that name (its speaker, or the
    subject of its first sentence). Read from the words, not drawn: entity drawing costs ~1 ms a text, too
    much for the hundred and more messages of a search (LoCoMo dev: pooled R@10 0.789 read, 0.791 drawn)."""
    folded = text.casefold()
    opening = len(folded) - len(folded.lstrip(_NOT_WORD))
    mask = subject = 0
    for bit, pattern in enumerate(named):
        found = pattern.search(folded)
        if found is not None:
            mask |= 1 << bit
            if found.start() == opening:
                subject |= 1 << bit
    return mask, subject, 0


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
