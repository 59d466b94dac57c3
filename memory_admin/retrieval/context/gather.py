"""Gathering the context block: what could go in, in order. Notebooks, pinned facts, skills and episodes
from one statement; the entities the task names; the facts as one sequence (the search's ranking, with
the related memory of the strongest matches), the same at every budget. Facts come from the search
through `retrieval.search.fact_ranking` and its typed `Candidate`, never its row layout."""

from __future__ import annotations

import functools
import itertools
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import F, FloatField, Func, Q, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Abs, Least

from memory_admin import metrics, scoring
from memory_admin.db.compiled import bind, compiled
from memory_admin.knowledge import conf
from memory_admin.models import Entity, Episode, Fact, FactEntity, MemoryUser, Message, Notebook, Relation, Skill
from memory_admin.retrieval.chunks import chunk_ranking
from memory_admin.retrieval.context.documents import claims, document_items
from memory_admin.retrieval.context.render import (
    SECTION_ORDER,
    Item,
    RankedFact,
    Section,
    fact_item,
    one_line,
    pinned_item,
    quoted,
    rendered,
    tokens_of,
)
from memory_admin.retrieval.names import WORD, name_keys
from memory_admin.retrieval.query import vectors_for
from memory_admin.retrieval.ranking import NEIGHBOUR_MINUTES
from memory_admin.retrieval.search import Ranking, fact_ranking
from memory_admin.selectors.access import Principal, visible
from memory_admin.services.guard import verdict

# Shared (org/global) candidates of each kind (nearest, full text). The same at every budget: the ranking
# (IDF and the vector's rescaling are relative to the candidates) must not depend on the budget, or a
# larger budget could rank, and hold, other facts. At 20 the session's default ef_search serves the
# HNSW walk without a transaction to raise it.
SHARED_CANDIDATES = 20
# Related memory: the user's facts observed next to the RELATED_ANCHORS best matches, nearest in time
# first (the turn right before or after an anchor, the better anchor first at the same distance), at
# most RELATED_MAX_TOKENS of them, come right after the RELATED_AFTER best ranked facts. The search's
# neighbour support lifts the turns around a match into the ranking already; a larger share displaces
# better-ranked facts (bench/README.md: at 2,000 tokens 20 % cost multi-hop recall 0.755 -> 0.709; 10 /
# 5 / 120 tokens, about three turns, was the best of the LoCoMo dev grid, issue 15).
RELATED_AFTER = 10
RELATED_MAX_TOKENS = 120
RELATED_ANCHORS = 5
RELATED_LIMIT = 100
PINNED_LIMIT = 100
SKILL_LIMIT = 5
EPISODE_LIMIT = 5
_STATUSES = (Fact.Status.ACTIVE, Fact.Status.STALE)
# What a ranked fact needs to be rendered and to find its related memory; a related fact also what its
# effective confidence and staleness need (scoring.py).
_FACT_FIELDS = ("id", "content", "valid_from", "contested", "memory_user", "message")
_RELATED_FIELDS = (
    *_FACT_FIELDS,
    "status",
    "kind",
    "confidence",
    "pinned",
    "access_count",
    "last_accessed_at",
    "created_at",
)


def _task_words(task: str) -> set[str]:
    words = {w.lower() for w in WORD.findall(task)}
    # A crude plural fold is enough for path segments such as deploy/kubernetes.
    return words | {w[:-1] for w in words if len(w) > 3 and w.endswith("s")}


_PATH_SEPARATORS = re.compile(r"[/._\-\s]+")


def _skill_score(path: str, prefix: str, words: set[str]) -> int:
    """100 for a path under the task itself (`prefix`: the task as a path, lowercased), else the path
    segments the task's words name."""
    if prefix and path.startswith(prefix):
        return 100
    segments = {s for s in _PATH_SEPARATORS.split(path.lower()) if s and s != "md"}
    return len(segments & words)


# Notebooks, pinned facts, skill paths and recent episodes come from one statement, compiled once per
# principal (each part built by the ORM from `visible()`, the one access check) with the memory user as
# a sentinel; each part's rows come back as JSON.
_USER = -7_340_029
_PINNED_COLUMNS = ("id", "content", "valid_from", "memory_user_id", "status", "confidence", "pinned", "kind")
_PINNED_COLUMNS += ("contested", "access_count", "last_accessed_at", "created_at")


@functools.lru_cache(maxsize=256)
def _side_statement(principal: Principal) -> tuple[str, tuple]:
    own_or_shared = Q(memory_user_id=_USER) | Q(memory_user__isnull=True)
    notebooks = visible(principal, Notebook.objects.filter(own_or_shared)).values(
        "id", "memory_user_id", "content", "version"
    )
    # Two branches, each served by the partial index on pinned facts (an OR of the user and the shared
    # scope would scan the whole org scope).
    pinned = Fact.objects.filter(pinned=True, status=Fact.Status.ACTIVE).values(*_PINNED_COLUMNS)
    own_pinned = visible(principal, pinned.filter(memory_user_id=_USER))[:PINNED_LIMIT]
    shared_pinned = visible(principal, pinned.filter(memory_user__isnull=True))[:PINNED_LIMIT]
    skills = visible(principal, Skill.objects.filter(own_or_shared)).values("id", "path", "memory_user_id")
    episodes = (
        visible(principal, Episode.objects.filter(memory_user_id=_USER))
        .exclude(summary="")
        .order_by("-ended_at")
        .values("id", "ended_at", "outcome", "summary")[:EPISODE_LIMIT]
    )
    parts = [compiled(qs) for qs in (notebooks, own_pinned, shared_pinned, skills, episodes)]
    (nb, nb_p), (own, own_p), (shared, shared_p), (sk, sk_p), (ep, ep_p) = parts
    pinned_sql = (
        f"SELECT c.id, c.content, c.valid_from, c.memory_user_id, c.confidence, c.created_at,"
        f" {scoring.effective_confidence_sql('c')} AS effective, {scoring.staleness_sql('c')} AS staleness,"
        f" c.status FROM (({own}) UNION ALL ({shared})) AS c"
    )
    sql = " UNION ALL ".join(
        f"(SELECT {i}, row_to_json(t)::text FROM ({part}) AS t)" for i, part in enumerate((nb, pinned_sql, sk, ep))
    )
    return sql, (*nb_p, *own_p, *shared_p, *sk_p, *ep_p)


def _send_side(principal: Principal, memory_user: MemoryUser) -> Callable[[], list[tuple]]:
    sql, params = _side_statement(principal)
    return _sent(sql, bind(params, {_USER: memory_user.pk}))


def _sent(sql: str, params: list) -> Callable[[], list[tuple]]:
    """Execute a statement now and read its rows later: inside `_pipeline()` it is sent without waiting
    for its result, so Postgres runs it while Python goes on."""
    cursor = connection.cursor()
    cursor.execute(sql, params)

    def rows() -> list[tuple]:
        try:
            return cursor.fetchall()
        finally:
            cursor.close()

    return rows


@contextmanager
def _pipeline() -> Iterator[None]:
    """psycopg's pipeline mode on Django's connection (statements are sent without waiting for their
    results; leaving it waits for them all). Without it (libpq older than 14) statements simply run."""
    import psycopg

    connection.ensure_connection()
    with connection.connection.pipeline() if psycopg.Pipeline.is_supported() else nullcontext():
        yield


def _gather_side(
    principal: Principal, memory_user: MemoryUser, task: str, sections: dict[str, Section], rows: list[tuple]
) -> tuple[set, str]:
    """Notebooks, pinned facts, skills and episodes from the side statement's rows (the content of the
    chosen skills in a second statement). Returns the ids of the pinned facts, and the notebooks' text
    (the tenant's, then the user's: the user's own wins a disagreement between them)."""
    parts: dict[int, list[dict]] = {0: [], 1: [], 2: [], 3: []}
    for part, row in rows:
        parts[part].append(json.loads(row))
    _gather_notebooks(memory_user, parts[0], sections)
    pinned = _gather_pinned(memory_user, parts[1], sections["pinned"])
    _gather_skills(principal, task, parts[2], sections["skills"])
    _gather_episodes(parts[3], sections["episodes"])
    notebooks = sorted(parts[0], key=lambda nb: nb["memory_user_id"] is not None)
    return pinned, "\n".join(nb["content"] for nb in notebooks)


def _gather_notebooks(memory_user: MemoryUser, rows: list[dict], sections: dict[str, Section]) -> None:
    notebooks = {row["memory_user_id"]: row for row in rows}
    for name, owner in (("notebook", memory_user.pk), ("tenant_notebook", None)):
        nb = notebooks.get(owner)
        if nb is not None and nb["content"].strip():
            sections[name].items.append(Item(f"notebook:{nb['id']}:v{nb['version']}", quoted(nb["content"].strip())))


def _gather_pinned(memory_user: MemoryUser, rows: list[dict], section: Section) -> set:
    rows.sort(key=lambda r: (-r["confidence"], -datetime.fromisoformat(r["created_at"]).timestamp()))
    for row in rows[:PINNED_LIMIT]:
        section.items.append(pinned_item(row))
    return {uuid.UUID(row["id"]) for row in rows[:PINNED_LIMIT]}


# The columns a ranked fact's line and related memory need (`RankedFact` after its id), carried by the ranking
# statement itself at the end of every candidate row: the candidate branches visit each fact's row
# anyway, so the block reads no ranked fact a second time.
_CARRY = ("content", "valid_from", "contested", "memory_user", "message")


def _ranked_items(ranking: Ranking) -> Iterator[Item]:
    """The ranked facts in rank order, each built from its candidate row as the fill reaches it."""
    for _, row, parts in ranking.scored:
        fact = RankedFact(row.id, *row.carried)
        yield fact_item(fact, effective=parts["effective_confidence"], stale=parts["stale"])


def _fact_sequence(principal: Principal, memory_user: MemoryUser, ranking: Ranking, pinned: set) -> Iterator[Item]:
    """The order facts are offered to the block, the same at every budget (so a larger budget only
    adds): the RELATED_AFTER best ranked, then the related memory of the strongest (at most
    RELATED_MAX_TOKENS), then the rest of the ranking."""
    ranked = _ranked_items(ranking)
    head = list(itertools.islice(ranked, RELATED_AFTER))
    yield from head
    anchors = [i.fact for i in head[:RELATED_ANCHORS] if i.fact.memory_user_id == memory_user.pk]
    spent = 0
    for fact in _related_facts(principal, memory_user, anchors, exclude=pinned | {i.fact.pk for i in head}):
        item = rendered(fact_item(fact))
        item.tokens = tokens_of(item.text)
        if spent + item.tokens <= RELATED_MAX_TOKENS:
            spent += item.tokens
            item.related = True
            yield item
    yield from ranked


def _related_facts(
    principal: Principal, memory_user: MemoryUser, anchors: list[RankedFact], exclude: set
) -> list[Fact]:
    """The user's facts observed next to the anchors (same thread, same episode, or within
    NEIGHBOUR_MINUTES), nearest in time first, taking the anchors in turn."""
    if not anchors:
        return []
    window = timedelta(minutes=NEIGHBOUR_MINUTES)
    near = Q()
    for anchor in anchors:
        near |= Q(valid_from__range=(anchor.valid_from - window, anchor.valid_from + window))
    messages = [a.message_id for a in anchors if a.message_id]
    if messages:
        near |= Q(message__thread__in=Message.objects.filter(pk__in=messages).values("thread_id"))
    through = Episode.facts.through.objects
    near |= Q(
        pk__in=through.filter(episode__in=through.filter(fact__in=[a.pk for a in anchors]).values("episode_id")).values(
            "fact_id"
        )
    )
    qs = (
        visible(principal, Fact.objects.for_user(memory_user).filter(status__in=_STATUSES))
        .filter(near)
        .exclude(pk__in={a.pk for a in anchors} | set(exclude))
        .only(*_RELATED_FIELDS)
        .annotate(distance=_seconds_to_nearest(anchors))
        .order_by("distance", "valid_from", "id")[:RELATED_LIMIT]
    )
    facts = list(qs)
    for fact in facts:
        fact.memory_user = memory_user

    def nearest(fact: Fact) -> tuple[float, int]:
        return min((abs((fact.valid_from - a.valid_from).total_seconds()), i) for i, a in enumerate(anchors))

    return sorted(facts, key=nearest)


def _seconds_to_nearest(anchors: list[RankedFact]) -> Func:
    """Seconds between a fact's observation and the nearest anchor's: the related facts are read nearest
    first, so that a long thread or a busy half hour cannot push the turns right next to a match past
    RELATED_LIMIT."""
    gaps = [
        Abs(
            Func(
                F("valid_from") - Value(a.valid_from),
                template="EXTRACT(EPOCH FROM %(expressions)s)",
                output_field=FloatField(),
            )
        )
        for a in anchors
    ]
    return Least(*gaps, output_field=FloatField()) if len(gaps) > 1 else gaps[0]


def _gather_skills(principal: Principal, task: str, rows: list[dict], section: Section) -> None:
    """Skills are chosen by path: the paths of all, the content of the few chosen."""
    words, prefix = _task_words(task), task.strip().strip("/").lower()
    ranked = sorted(
        (
            (score, row["id"], row["path"], row["memory_user_id"])
            for row in rows
            if (score := _skill_score(row["path"], prefix, words)) > 0
        ),
        key=lambda item: (-item[0], item[3] is None, item[2]),
    )[:SKILL_LIMIT]
    if ranked:
        skills = visible(principal, Skill.objects.filter(pk__in=[item[1] for item in ranked]))
        chosen = {
            str(pk): (version, content) for pk, version, content in skills.values_list("id", "version", "content")
        }
        for _, pk, path, _ in ranked:
            if str(pk) in chosen:
                version, content = chosen[str(pk)]
                text = f"### {one_line(path)} (v{version})\n{quoted(content.strip())}"
                section.items.append(Item(path, text))


def _gather_episodes(rows: list[dict], section: Section) -> None:
    for ep in rows:
        # Summaries are guarded when built; one stored before that (or by another path) is checked here.
        summary = (
            one_line(ep["summary"])
            if not verdict(ep["summary"]).flagged
            else "(summary withheld: it reads as instructions to a model)"
        )
        ended = datetime.fromisoformat(ep["ended_at"])
        section.items.append(Item(str(ep["id"]), f"- [{ended:%Y-%m-%d}, {ep['outcome']}] {summary}\n"))


# The block's ranking is the search's, observed as one (labelled by the block, metrics.observe_search).
_rank = metrics.observe_search(fact_ranking)


# --- Entities the task names (issue 13 §3, issue 15 §4) -------------------------------------------------
# The entities whose alias the task names (the search's name keys), each summarised on one line: its type,
# how many facts mention it, other names, and a few open relations. At most ENTITY_LIMIT of them, within
# ENTITY_SHARE of the budget (at most ENTITY_MAX_TOKENS): the facts themselves are in the facts section.
# A line and the title take about 25 tokens: at 2.5 % the first shows from about 1,000 tokens on; below
# that the facts answer the task (LoCoMo dev, issue 15: 5 % -> 2.5 % lifted evidence recall at 500
# tokens 0.752 -> 0.756, 2,000 unchanged).
ENTITY_LIMIT = 3
ENTITY_RELATIONS = 3


# The statements of the entity section, compiled once per principal (built by the ORM from `visible()`,
# the memory user and the name keys as sentinels). The mention count is a subquery per matched entity:
# the ORM's Count over a join grouped every column of the entity (its 384-float vector included) and
# sorted a hub's mentions with them (17 ms for an org entity of 2,500 mentions at 1.1M facts).
_ENTITY_KEYS = "\x00context-entity-keys\x00"
_IDS = object()


@functools.lru_cache(maxsize=256)
def _entity_statements(principal: Principal) -> tuple[tuple[str, tuple], tuple[str, tuple]]:
    owned = Q(memory_user_id=_USER) | Q(memory_user__isnull=True)
    mentions = RawSQL(  # noqa: S611 - constant SQL
        f"SELECT count(DISTINCT fe.fact_id) FROM {FactEntity._meta.db_table} fe"
        f' WHERE fe.entity_id = "{Entity._meta.db_table}"."id"',
        (),
    )
    keys = RawSQL("%s::varchar(200)[]", (_ENTITY_KEYS,))  # noqa: S611 - a bound parameter
    entities = (
        visible(principal, Entity.objects.filter(owned, alias_keys__overlap=keys, merged_into__isnull=True))
        .annotate(facts=mentions)
        .order_by("-facts", "pk")
        .values_list("id", "name", "aliases", "type", "facts")[:ENTITY_LIMIT]
    )
    ids = RawSQL("SELECT unnest(%s::uuid[])", (_IDS,))  # noqa: S611 - a bound parameter
    relations = (
        visible(principal, Relation.objects.filter(owned, valid_to__isnull=True))
        .filter(Q(subject_id__in=ids) | Q(object_id__in=ids))
        .order_by("-valid_from", "pk")
        .values_list("subject_id", "object_id", "type", "subject__name", "object__name")
    )
    return compiled(entities), compiled(relations)


def _send_named_entities(principal: Principal, memory_user: MemoryUser, keys: list[str]) -> Callable[[], list[tuple]]:
    """(id, name, aliases, type, facts) of the entities the name keys name, most mentioned first."""
    (sql, params), _ = _entity_statements(principal)
    return _sent(sql, bind(params, {_ENTITY_KEYS: keys, _USER: memory_user.pk}))


def _open_relations(principal: Principal, memory_user: MemoryUser, ids: list) -> list[tuple]:
    """(subject id, object id, type, subject name, object name) of the open relations of `ids`, newest
    first, at most ENTITY_RELATIONS a named entity."""
    _, (sql, params) = _entity_statements(principal)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} LIMIT {ENTITY_RELATIONS * len(ids)}", bind(params, {_IDS: ids, _USER: memory_user.pk}))
        return cursor.fetchall()


def _gather_entities(principal: Principal, memory_user: MemoryUser, entities: list[tuple], section: Section) -> None:
    """The lines of the entities the task names (`_send_named_entities`' rows)."""
    if not entities:
        return
    ids = [e[0] for e in entities]
    said: dict[Any, list[str]] = {pk: [] for pk in ids}
    for subject_id, object_id, kind, subject, obj in _open_relations(principal, memory_user, ids):
        for pk, line in (
            (subject_id, f"{kind.replace('_', ' ')} {obj}"),
            (object_id, f"{subject} {kind.replace('_', ' ')} it"),
        ):
            if pk in said and len(said[pk]) < ENTITY_RELATIONS:
                said[pk].append(line)
    for pk, name, aliases, kind, facts in entities:
        others = [a for a in aliases if a != name][:2]
        text = name + (f" (also: {', '.join(others)})" if others else "")
        text += (": " + "; ".join(said[pk])) if said[pk] else ""
        # The block's note first: nothing in a name can stand in for it.
        line = f"- [{kind}, in {facts} facts] {one_line(text)}\n"
        section.items.append(Item(str(pk), line))


def _gather_documents(
    principal: Principal,
    memory_user: MemoryUser,
    query: str,
    vector: list[float] | None,
    ranking: Ranking,
    notebooks: str,
    section: Section,
) -> None:
    """The chunks the task is about, on the facts' scale (`retrieval.chunks`), as cited items (documents.py)."""
    if float(conf.CONTEXT_SHARE()) <= 0:
        return
    if ranking.present is not None and "chunk" not in ranking.present:
        return  # the candidate statement found no active chunk this user can read (same snapshot)
    started = time.perf_counter()
    cosines = [parts["cosine"] for _, _, parts in ranking.scored]
    hits = chunk_ranking(
        principal,
        memory_user,
        query=query,
        vector=vector,
        weights=ranking.weights,
        facts_cosines=(min(cosines), max(cosines)) if cosines else None,
    )
    section.items, section.contradicts_notebook = document_items(hits, claims(notebooks) if notebooks else {})
    ranking.timings["chunks_ms"] = (time.perf_counter() - started) * 1000


def gather_sections(
    principal: Principal, memory_user: MemoryUser, task: str, budget_tokens: int
) -> tuple[list[Section], Ranking]:
    """Every section's candidates; the facts as a sequence read as the fill reaches them (one ranking,
    whatever the budget)."""
    sections = {name: Section(name) for name in SECTION_ORDER}
    query = (task or "").strip()
    keys = name_keys(task) if task else []
    vector, whole, embedded = None, None, {}
    with _pipeline():
        side = _send_side(principal, memory_user)
        named = _send_named_entities(principal, memory_user, keys) if keys else list
        if query:
            # The task's embedding is computed while Postgres runs the two statements above.
            vector, whole, embedded = vectors_for(query)
    pinned, notebooks = _gather_side(principal, memory_user, task, sections, side())
    _gather_entities(principal, memory_user, named(), sections["entities"])
    ranking = _rank(
        principal=principal,
        memory_user=memory_user,
        query=task,
        query_vector=vector,
        whole_vector=whole,
        exclude_ids=pinned,
        n_shared=SHARED_CANDIDATES,
        carry=_CARRY,
        probe=float(conf.CONTEXT_SHARE()) > 0,  # whether a chunk statement is worth sending
    )
    if embedded:
        ranking.timings = {**embedded, **ranking.timings}
    if query:
        _gather_documents(principal, memory_user, query, whole, ranking, notebooks, sections["documents"])
    sections["facts"].sequence = _fact_sequence(principal, memory_user, ranking, pinned)
    return [sections[name] for name in SECTION_ORDER], ranking
