"""Entities drawn from a stored fact's own text, offline and deterministic (SPEC §12), for facts from
every door (POST /facts, /facts/batch, imports, and extraction when the model named none).

- Names: runs of capitalised words ("Acme Robotics", "Dana", "LGBTQ"), a leading common word dropped
  ("The", "Hey", "I"...), a possessive 's dropped. A single capitalised word that opens a sentence is
  taken only when it reads as a name: followed by ":" (the speaker of a transcript line), "'s" or ",".
- Relations: the first-person templates of the offline extractor (extraction.rules.clause_graph: "I work
  at Acme", "I live in Berlin"...), whose subject is the line's speaker when there is one, else the user.
- Everything resolves through services.entities (fact_entities_link): the same aliases, the same rules.

Drawing is per owner (a memory user, or a tenant's shared facts), not per fact: a fact is stored with
`entities_due`, and the write path only notes its owner (`draw_after_commit`). After the transaction
commits, a background thread of the process claims the owners' drawings (EntityDrawing) and sends one
task (`extraction.entities_draw`) for each owner that had none pending, so a write pays neither for the
graph nor for the broker round trip, and a burst of writes for one user makes one task, which draws
everything due. A lost task (the broker down, a worker killed) is made good by the beat's `sweep`, which
claims again the drawings of owners with facts due for a while; `manage.py entities_backfill` walks the
facts stored before drawing existed. Drawing is idempotent: a fact that has mentions already (the
extractor linked it, or an earlier run did) is skipped. Until its drawing ran, search counts a fact's
entities from its text (retrieval.candidates.undrawn_entities)."""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from extraction.rules import clause_graph, statements
from memory_admin import celery
from memory_admin.errors import DomainError
from memory_admin.models import Entity, EntityBackfill, EntityDrawing, Fact, FactEntity
from memory_admin.models.entities import fold_name
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import SELF_NAME, EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.entity_curation import entity_text
from memory_admin.services.entity_kinds import kind_of

log = logging.getLogger(__name__)

ACTOR = "entities:rules"
TASK = "extraction.entities_draw"
MAX_NAME_WORDS = 4
MAX_MENTIONS = 12  # a fact that names more is a list, not a statement about each name

# Capitalised words that are not names on their own (sentence openers, pronouns, greetings, days).
COMMON = frozenset(
    """a an the i i'm i've i'd i'll me my mine we our us you your he she it they them their his her its
    this that these those there here what when where which who whom whose why how whatever yes no not
    yeah yep nope ok okay oh ah hey hi hello bye thanks thank please sorry wow well so and but or if
    then also just really very too do does did is am are was were be been have has had will would can
    could should shall may might must let lets let's after before since as at by for from in into of
    on to with about anyway btw congrats congratulations great good nice awesome cool sure lol haha
    omg dear mr mrs ms dr monday tuesday wednesday thursday friday saturday sunday today tomorrow
    yesterday tonight january february march april june july august september october november
    december woah whoa wow aww aw plus absolutely actually definitely hopefully unfortunately agreed yup
    woohoo yay cheers gotcha oof ha hah haha hmm mm lately last recently anyway totally exactly however even
    yet now later see remember together everything everyone something nothing life man fri tues thurs wed
    sat sun mon yea""".split()
)
_WORD = re.compile(r"[^\W\d_][\w'’&.-]*")
_SPEAKER = re.compile(r"^\s*([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*){0,2}):\s")
_OPENERS = '.!?:;"“(\n'


def _is_cap(word: str) -> bool:
    return word[0].isupper()


def _opens_sentence(text: str, start: int) -> bool:
    before = text[:start].rstrip()
    return not before or before[-1] in _OPENERS


def _clean(word: str) -> str:
    word = re.sub(r"['’]s$", "", word)
    return word.strip(".'’-&")


def _runs(text: str) -> list[tuple[list[str], bool, str]]:
    """Runs of adjacent capitalised words: (words, opens a sentence, the character after the run)."""
    runs: list[tuple[list[str], bool, str]] = []
    words: list[str] = []
    opens, end = False, 0
    for m in _WORD.finditer(text):
        word = m.group()
        adjacent = bool(words) and text[end : m.start()].isspace() and not words[-1].endswith((".", "'s", "’s"))
        if words and not (adjacent and _is_cap(word)):
            runs.append((words, opens, text[end : end + 1]))
            words = []
        if _is_cap(word):
            if not words:
                opens = _opens_sentence(text, m.start())
            words.append(word)
            end = m.end()
    if words:
        runs.append((words, opens, text[end : end + 1]))
    return runs


def names(text: str) -> list[str]:
    """The proper names of a text, in order of first appearance, each once."""
    found: dict[str, str] = {}
    for raw, opens, after in _runs(text):
        words = [_clean(w) for w in raw]
        first_was_common = False
        while words and (not words[0] or words[0].casefold() in COMMON):
            words.pop(0)
            first_was_common = True
        while words and (not words[-1] or words[-1].casefold() in COMMON):
            words.pop()
        words = words[:MAX_NAME_WORDS]
        if not words or len(words[0]) < 2:
            continue
        alone_at_start = len(words) == 1 and opens and not first_was_common
        if alone_at_start and after not in (":", ",", "'", "’") and not raw[0].endswith(("'s", "’s")):
            continue
        if alone_at_start and after == "," and words[0].casefold().endswith("ly"):
            continue  # "Honestly, ...": an adverb, not a speaker
        name = " ".join(words)
        found.setdefault(fold_name(name), name)
    return list(found.values())


_THE_USER = re.compile(r"^the user(?:'s|’s| (is|has|was)| (\w+)s)\b", re.I)
_USER_VERB = {"is": "I am", "has": "I have", "was": "I was", "does": "I do"}


def _first_person(clause: str) -> str:
    """A fact in the product's own third person ("The user works at Acme") as the first-person clause the
    rules read ("I work at Acme"); any other clause unchanged."""
    m = _THE_USER.match(clause)
    if not m:
        return clause
    if m.group(1):
        head = _USER_VERB[m.group(1).lower()]
    elif m.group(2):
        head = "I " + m.group(2)
    else:
        head = "My"
    return head + clause[m.end() :]


_NAMED = re.compile(r"^(?:['’]s\s+|\s+([a-z]+)\b)")
_FAMILY = re.compile(
    r"\bmy\s+(?:best\s+|old\s+|close\s+)?(friend|sister|brother|mom|mum|mother|dad|father|wife|husband|partner|"
    r"son|daughter|cousin|aunt|uncle|boss|manager|colleague|coworker|mentor|neighbou?r)s?,?\s+$",
    re.I,
)
_KIN = {"friend", "colleague", "coworker", "boss", "manager", "mentor", "neighbor", "neighbour"}


def _named_first_person(clause: str, name: str) -> str | None:
    """A clause about a named person ("Ada lives in Lisbon", "Ada's editor is Zed") as the first-person
    clause the rules read ("I live in Lisbon"); None when the name is not followed by a verb or 's."""
    rest = clause[len(name) :]
    m = _NAMED.match(rest)
    if not m:
        return None
    tail = rest[m.end() :]
    if rest[:1] in ("'", "’"):
        return "My " + tail
    verb = m.group(1)
    if verb in _USER_VERB:
        verb = _USER_VERB[verb].split()[1]
    elif verb.endswith("ies"):
        verb = verb[:-3] + "y"
    elif verb.endswith(("sses", "xes", "zes", "shes", "ches", "oes")):
        verb = verb[:-2]
    elif verb.endswith("s") and not verb.endswith("ss"):
        verb = verb[:-1]
    return f"I {verb} {tail.lstrip()}"


_CAPITALISED = re.compile(r"^([A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+)?)(?=['’]s\b|\s)")


def _opener(clause: str, found: list[str]) -> str | None:
    """The name a clause opens with: a drawn name, else its capitalised first words unless common
    ("Ada lives in Lisbon": a sentence's first word is a name only if a rule then holds of it)."""
    name = _opening_name(clause, found)
    if name is None:
        m = _CAPITALISED.match(clause)
        words = m.group(1).split() if m else []
        while words and words[-1].casefold() in COMMON:
            words.pop()
        name = " ".join(words) if words and words[0].casefold() not in COMMON else None
    return name


def _opening_name(body: str, found: list[str]) -> str | None:
    """The name the text opens with ("Dana Scully moved to Lisbon"), what the fact is about."""
    start = body.lstrip()
    return next((n for n in found if start.startswith(n) and start[len(n) : len(n) + 1] in (" ", "'", "’")), None)


def _trim(value: str, found: list[str]) -> str:
    """A rule's captured value cut to the name it starts with ("Berlin and uses Neovim" → "Berlin")."""
    key = fold_name(value)
    starts = [n for n in found if key.startswith(fold_name(n) + " ")]
    return max(starts, key=len) if starts else value


def _merge_role(current: str | None, role: str) -> str:
    order = (FactEntity.Role.SUBJECT, FactEntity.Role.OBJECT, FactEntity.Role.MENTIONED)
    return role if current is None or order.index(role) < order.index(current) else current


def draw(text: str) -> tuple[list[EntityMention], list[RelationDraft]]:
    """The mentions (name, type, role) and relations a fact's text states, by the rules of the docstring."""

    speaker_match = _SPEAKER.match(text)
    speaker = speaker_match.group(1) if speaker_match and fold_name(speaker_match.group(1)) not in COMMON else None
    body = text[speaker_match.end() :] if speaker else text
    kinds: dict[str, str] = {}
    roles: dict[str, str] = {}
    shown: dict[str, str] = {}
    relations: list[RelationDraft] = []
    if speaker:
        key = fold_name(speaker)
        shown[key], kinds[key], roles[key] = speaker, "person", FactEntity.Role.SUBJECT
    found = names(body)
    for clause in statements(body):
        subject, first = speaker, _first_person(clause)
        opener = _opener(clause, found) if first == clause and not speaker else None
        named = _named_first_person(clause, opener) if opener else None
        mentions, stated = clause_graph(named) if named is not None else ((), ())
        if stated:  # "Ada lives in Lisbon": a rule holds of Ada, the subject, a person
            subject = opener
            shown.setdefault(fold_name(opener), opener)
            # ...unless its name says it is an organisation ("Acme Robotics is based in Lisbon"): a
            # company is based in a place, it does not live there.
            if kind_of(opener, "") == "company":
                kinds[fold_name(opener)] = "company"
                stated = tuple(
                    RelationDraft(r.subject, "based_in", r.object) if r.type == "lives_in" else r for r in stated
                )
        else:
            mentions, stated = clause_graph(first)
        for mention in mentions:
            is_self = fold_name(mention.name) == SELF_NAME
            name = subject if subject and is_self else _trim(mention.name, found)
            key = fold_name(name)
            shown.setdefault(key, name)
            kind = kind_of(name, "") if mention.type == "other" and not is_self else mention.type
            kinds[key] = kind if kinds.get(key, "other") == "other" else kinds[key]
            roles[key] = _merge_role(roles.get(key), mention.role)
        for relation in stated:
            who = subject if subject and fold_name(relation.subject) == SELF_NAME else relation.subject
            relations.append(RelationDraft(who, relation.type, _trim(relation.object, found)))
        _kin(clause, found, subject, relations, kinds)
    opening = _opening_name(body, found)
    for name in found:
        key = fold_name(name)
        shown.setdefault(key, name)
        role = FactEntity.Role.SUBJECT if name == opening and not speaker else FactEntity.Role.MENTIONED
        roles[key] = _merge_role(roles.get(key), role)
        if kinds.get(key, "other") == "other":
            at = body.find(name)
            kinds[key] = kind_of(name, body[max(at, 0) - 40 : max(at, 0)] if at > 0 else "")
    keys = list(shown)[:MAX_MENTIONS]
    mentions = [EntityMention(shown[k], kinds.get(k, "other"), roles[k]) for k in keys]
    return mentions, relations


def _kin(clause: str, found: list[str], subject: str | None, relations: list, kinds: dict) -> None:
    """ "my friend Dana", "my sister Ana": the speaker (or the user) knows a person of that name."""
    for name in found:
        at = clause.find(name)
        m = _FAMILY.search(clause[max(at - 40, 0) : at]) if at > 0 else None
        if m is None:
            continue
        kinds[fold_name(name)] = "person"
        kind = "knows" if m.group(1).lower() in _KIN else "family_of"
        relations.append(RelationDraft(subject or SELF_NAME, kind, name))


@functools.lru_cache(maxsize=8192)
def drawn_names(text: str) -> tuple[tuple[tuple[str, bool, str], ...], tuple[tuple[str, str], ...]]:
    """What drawing a fact of this text would link, by folded name: ((name, is its subject, the text a new
    entity of it is embedded from)...), and the (subject, object) of the relations it states. Cached:
    search counts it for every candidate not drawn yet, again at each search until its drawing ran."""

    mentions, relations = draw(text)
    return (
        tuple(
            (fold_name(m.name), m.role == FactEntity.Role.SUBJECT, entity_text(Entity(name=m.name, type=m.type)))
            for m in mentions
        ),
        tuple((fold_name(r.subject), fold_name(r.object)) for r in relations),
    )


def fact_draw(fact: Fact, *, mentioned: bool) -> int:
    """Draw and link one fact's entities, unless it has mentions already (`mentioned`: the extractor linked
    it, or an earlier run did); returns the entities linked. The caller holds the owner's write lock
    (fact_entities_link's rule)."""
    if fact.status != Fact.Status.ACTIVE or fact.tenant_id is None or mentioned:
        return 0
    mentions, relations = draw(fact.content)
    if not mentions:
        return 0
    principal = Principal.system(fact.tenant_id, actor=ACTOR)
    try:
        with transaction.atomic():
            return len(fact_entities_link(principal=principal, fact=fact, mentions=mentions, relations=relations))
    except (DatabaseError, DomainError):
        log.warning("the entities of fact %s were not drawn", fact.pk, exc_info=True)
        return 0


def _draw(facts: list[Fact]) -> int:
    """Draw these facts of one owner (the caller holds its lock, in a transaction) and mark them drawn."""
    ids = [fact.pk for fact in facts]
    mentioned = set(FactEntity.objects.filter(fact_id__in=ids).values_list("fact_id", flat=True))  # one query
    linked = sum(fact_draw(fact, mentioned=fact.pk in mentioned) for fact in facts)
    Fact.objects.filter(pk__in=ids).update(entities_due=False)
    return linked


def facts_draw(fact_ids: Iterable[UUID | str]) -> int:
    """Draw the entities of these facts, one owner's facts under that owner's lock (the backfill's walk,
    and tasks sent before drawing was per owner). Facts gone, not active or already linked are skipped.
    Returns the entities linked."""
    # Inside: the write path (services.facts.write) imports this module at the top.
    from memory_admin.services.facts import lock_memory_user

    facts = Fact.objects.filter(pk__in=list(fact_ids)).defer(*Fact.VECTORS, "content_hash")
    by_owner: dict[int | None, list[Fact]] = {}
    for fact in facts.order_by("valid_from", "created_at", "pk"):
        by_owner.setdefault(fact.memory_user_id, []).append(fact)
    linked = 0
    for owner, owned in by_owner.items():
        with transaction.atomic():
            if owner is not None:
                lock_memory_user(owner)
            linked += _draw(owned)
    return linked


# --- One pending drawing per owner ------------------------------------------------------------------
#
# A fact is stored with `entities_due`; its owner (a memory user, or a tenant's shared facts) has one
# EntityDrawing row. A write claims the owner's drawing after commit: the claim sets `pending_since` when
# it was clear and only then is a task sent, so a burst of writes for one user sends one task, which
# draws everything due when it runs, including what was written while it ran. The task clears the claim
# in the transaction that finds nothing more due: a write committed before that is drawn by it, a write
# committed after it claims again. A claim whose task sent no sign of life for ENTITY_DRAW_LOST_SECONDS
# (the message lost, the worker killed) is claimed again by the next write or by the beat's sweep.

DRAW_CHUNK = 50  # facts drawn per transaction: the owner's writes wait for its lock that long at most
DRAW_TASK_SECONDS = 20.0  # then the task hands over to a new one, behind the other owners' drawings

Owner = tuple[int, int | None]  # (tenant id, memory user id or None for the tenant's shared facts)

_CLAIM_SQL = (
    "INSERT INTO memory_admin_entitydrawing AS d (tenant_id, memory_user_id, pending_since, touched_at, runs,"
    " facts_drawn) SELECT o.t, o.u, now(), now(), 0, 0 FROM unnest(%s::bigint[], %s::bigint[]) AS o(t, u)"
    " ON CONFLICT (tenant_id, memory_user_id) DO UPDATE SET pending_since = now(), touched_at = now()"
    " WHERE d.pending_since IS NULL OR d.touched_at < now() - make_interval(secs => %s)"
    " RETURNING d.tenant_id, d.memory_user_id"
)


def _lost_seconds() -> float:
    return float(getattr(settings, "ENTITY_DRAW_LOST_SECONDS", 300.0))


def claim(owners: Iterable[Owner]) -> list[Owner]:
    """The owners whose drawing this call claimed (none was pending, or the pending one is lost): a task
    must be sent for each of them, and for no other."""
    unique = sorted(set(owners), key=lambda o: (o[0], o[1] or 0))
    if not unique:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, [[t for t, _ in unique], [u for _, u in unique], _lost_seconds()])
        return [(t, u) for t, u in cursor.fetchall()]


def _owned(tenant_id: int, memory_user_id: int | None) -> QuerySet[Fact]:
    return Fact.objects.filter(tenant_id=tenant_id, memory_user_id=memory_user_id)


def _draw_chunk(tenant_id: int, memory_user_id: int | None) -> tuple[int, int]:
    """Draw the owner's next DRAW_CHUNK due facts under its lock: (facts, entity links made)."""
    # Inside: the write path (services.facts.write) imports this module at the top.
    from memory_admin.services.facts import lock_memory_user

    with transaction.atomic():
        if memory_user_id is not None:
            lock_memory_user(memory_user_id)
        due = _owned(tenant_id, memory_user_id).filter(entities_due=True).defer(*Fact.VECTORS, "content_hash")
        facts = list(due.order_by("created_at", "pk")[:DRAW_CHUNK])
        return len(facts), (_draw(facts) if facts else 0)


def _release(tenant_id: int, memory_user_id: int | None) -> bool:
    """Clear the owner's claim unless something became due meanwhile (then keep it: this task draws it)."""
    with transaction.atomic():
        EntityDrawing.objects.filter(tenant_id=tenant_id, memory_user_id=memory_user_id).update(pending_since=None)
        if _owned(tenant_id, memory_user_id).filter(entities_due=True).exists():
            transaction.set_rollback(True)
            return False
        return True


def owner_draw(*, tenant_id: int, memory_user_id: int | None) -> int:
    """The task's body: draw every due fact of the owner, those written while it runs too, then clear the
    claim. Idempotent (a fact drawn is no longer due; a linked one is left alone), so a task delivered
    twice or sent twice draws nothing twice. After DRAW_TASK_SECONDS it sends its successor and stops,
    so that one user's endless stream does not hold the worker from the other users. Returns the
    entities linked."""
    started = time.monotonic()
    drawings = EntityDrawing.objects.filter(tenant_id=tenant_id, memory_user_id=memory_user_id)
    drawings.update(touched_at=timezone.now(), runs=F("runs") + 1)
    drawn = linked = 0
    try:
        while True:
            facts, links = _draw_chunk(tenant_id, memory_user_id)
            drawn, linked = drawn + facts, linked + links
            if facts:
                drawings.update(touched_at=timezone.now())  # alive: the sweep leaves the claim alone
                if time.monotonic() - started > DRAW_TASK_SECONDS:
                    _send([(tenant_id, memory_user_id)], claimed=True)
                    break
            elif _release(tenant_id, memory_user_id):
                break
    finally:
        drawings.update(facts_drawn=F("facts_drawn") + drawn)
    return linked


# Claiming and sending are a statement and a broker round trip (a few ms): the request pays neither.
# Committed owners go to a per-process outbox that a background thread claims and sends, every owner
# waiting at that moment in one statement. With ENTITY_DRAW_SEND_IN_REQUEST (the test suite) this
# happens at commit, in the request. Owners in the outbox of a process that dies are the sweep's.
_outbox: set[Owner] = set()
_outbox_lock = threading.Lock()
_outbox_ready = threading.Event()
_sender: tuple[int, threading.Thread] | None = None  # (pid, thread): a forked worker starts its own


def _send(owners: Iterable[Owner], *, claimed: bool = False) -> int:
    """Claim the owners' drawings and send a task for each one claimed (`claimed`: they are already).
    A failed claim is logged: the facts stay due and the sweep sends their drawing. Returns tasks sent."""

    owners = list(owners)
    try:
        owners = owners if claimed else claim(owners)
    except DatabaseError:
        log.warning("could not claim the entity drawing of %d owners; the sweep will", len(owners), exc_info=True)
        return 0
    for tenant_id, memory_user_id in owners:
        celery.dispatch(TASK, tenant_id, memory_user_id)
    return len(owners)


def _send_loop() -> None:
    while True:
        _outbox_ready.wait()
        # Owners that arrive meanwhile ride along: four clients writing one fact each share a claim.
        time.sleep(getattr(settings, "ENTITY_DRAW_SEND_EVERY", 0.0))
        with _outbox_lock:
            owners = list(_outbox)
            _outbox.clear()
            _outbox_ready.clear()
        if owners:
            close_old_connections()  # a long-lived thread: a connection broken meanwhile is replaced
            _send(owners)


def _ensure_sender() -> None:
    global _sender
    pid = os.getpid()
    if _sender is None or _sender[0] != pid or not _sender[1].is_alive():
        with _outbox_lock:
            if _sender is None or _sender[0] != pid or not _sender[1].is_alive():
                thread = threading.Thread(target=_send_loop, name="entity-draw-sender", daemon=True)
                thread.start()
                _sender = (pid, thread)


def _flush() -> None:
    pending = getattr(connection, "_entity_draw_pending", None)
    if not pending:
        return
    owners = list(pending)
    pending.clear()
    if getattr(settings, "ENTITY_DRAW_SEND_IN_REQUEST", False):
        _send(owners)
        return
    with _outbox_lock:
        _outbox.update(owners)
        _outbox_ready.set()
    _ensure_sender()


def draw_after_commit(fact: Fact | None) -> None:
    """The write path's hook: once the current transaction commits, the drawing of every owner of an
    active fact noted in it is claimed (and sent when none was pending). Costs no statement; outside a
    transaction the claim is made at once."""
    if fact is None or fact.status != Fact.Status.ACTIVE or fact.tenant_id is None:
        return
    pending = getattr(connection, "_entity_draw_pending", None)
    if pending is None:
        pending = connection._entity_draw_pending = set()
    if not any(entry[1] is _flush for entry in connection.run_on_commit):
        pending.clear()  # noted in a transaction that rolled back: those facts do not exist
    pending.add((fact.tenant_id, fact.memory_user_id))
    transaction.on_commit(_flush)


# --- Walking the facts in order: the backfill command; the live sweep ------------------------------------

SWEEP_GRACE_SECONDS = 5.0  # a fact this new is its write's claim's, not the sweep's (yet)


def facts_after(marker: EntityBackfill, *, tenant_id: int | None = None):
    """Active facts after the marker, in (created_at, id) order: where a walk continues."""
    facts = Fact.objects.filter(status=Fact.Status.ACTIVE, tenant__isnull=False)
    if tenant_id is not None:
        facts = facts.filter(tenant_id=tenant_id)
    if marker.last_created_at is not None:
        facts = facts.filter(
            Q(created_at__gt=marker.last_created_at) | Q(created_at=marker.last_created_at, pk__gt=marker.last_fact_id)
        )
    return facts.order_by("created_at", "pk")


def walk_step(marker: EntityBackfill, facts: QuerySet[Fact], size: int) -> tuple[int, int]:
    """Draw the next `size` facts of `facts` (facts_after's) and move the marker past them: (facts gone
    through, entity links made). A crash between the two redoes the step, which changes nothing."""
    rows = list(facts.values_list("pk", "created_at")[:size])
    if not rows:
        return 0, 0
    linked = facts_draw([pk for pk, _ in rows])
    marker.last_fact_id, marker.last_created_at = rows[-1]
    marker.facts_done += len(rows)
    marker.save(update_fields=["last_fact_id", "last_created_at", "facts_done", "updated_at"])
    return len(rows), linked


def sweep() -> int:
    """The beat's catch-up: the owners of facts due for longer than SWEEP_GRACE_SECONDS whose drawing is
    not pending (the write's claim never ran: its process died, the database was away) or is lost (no
    sign of life from its task for ENTITY_DRAW_LOST_SECONDS) get their drawing sent. Returns tasks sent."""
    # Global facts name no entities (fact_draw): nothing is due for them.
    Fact.objects.filter(entities_due=True, tenant__isnull=True).update(entities_due=False)
    cutoff = timezone.now() - timedelta(seconds=SWEEP_GRACE_SECONDS)
    due = Fact.objects.filter(entities_due=True, tenant__isnull=False, created_at__lte=cutoff)
    return _send(due.values_list("tenant_id", "memory_user_id").distinct().order_by())
