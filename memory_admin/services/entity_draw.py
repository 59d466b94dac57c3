"""Entities drawn from a stored fact's own text, offline and deterministic (SPEC §12), for facts from
every door (POST /facts, /facts/batch, imports, and extraction when the model named none).

- Names: runs of capitalised words ("Acme Robotics", "Dana", "LGBTQ"), a leading common word dropped
  ("The", "Hey", "I"...), a possessive 's dropped. A single capitalised word that opens a sentence is
  taken only when it reads as a name: followed by ":" (the speaker of a transcript line), "'s" or ",".
- Relations: the first-person templates of the offline extractor (extraction.rules.clause_graph: "I work
  at Acme", "I live in Berlin"...), whose subject is the line's speaker when there is one, else the user.
- Everything resolves through services.entities (fact_entities_link): the same aliases, the same rules.

The write path only notes the facts it stored (`draw_after_commit`); after its transaction commits, a
background thread of the process sends one task (`extraction.entities_draw`) for every id committed
since its last send, so a write pays neither for the graph nor for the broker round trip. A
lost task (the broker down) is made good by the beat's `sweep`, which walks the facts written since its
marker; `manage.py entities_backfill` walks the older ones the same way.
`facts_draw` is idempotent: a fact that has mentions already (the extractor linked it, or an earlier
run did) is skipped."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from memory_admin.errors import DomainError
from memory_admin.models import EntityBackfill, Fact, FactEntity
from memory_admin.models.entities import fold_name
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import SELF_NAME, EntityMention, RelationDraft, fact_entities_link

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
    december""".split()
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
        name = " ".join(words)
        found.setdefault(fold_name(name), name)
    return list(found.values())


_THE_USER = re.compile(r"^the user(?:'s|’s| (is|has|was)| (\w+)s)\b", re.I)
_USER_VERB = {"is": "I am", "has": "I have", "was": "I was"}


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
    from extraction.rules import clause_graph, statements

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
        mentions, stated = clause_graph(_first_person(clause))
        for mention in mentions:
            name = speaker if speaker and fold_name(mention.name) == SELF_NAME else _trim(mention.name, found)
            key = fold_name(name)
            shown.setdefault(key, name)
            kinds[key] = mention.type if kinds.get(key, "other") == "other" else kinds[key]
            roles[key] = _merge_role(roles.get(key), mention.role)
        for relation in stated:
            subject = speaker if speaker and fold_name(relation.subject) == SELF_NAME else relation.subject
            relations.append(RelationDraft(subject, relation.type, _trim(relation.object, found)))
    opening = _opening_name(body, found)
    for name in found:
        key = fold_name(name)
        shown.setdefault(key, name)
        role = FactEntity.Role.SUBJECT if name == opening and not speaker else FactEntity.Role.MENTIONED
        roles[key] = _merge_role(roles.get(key), role)
    keys = list(shown)[:MAX_MENTIONS]
    mentions = [EntityMention(shown[k], kinds.get(k, "other"), roles[k]) for k in keys]
    return mentions, relations


def fact_draw(fact: Fact) -> int:
    """Draw and link one fact's entities, unless it has mentions already; returns the entities linked.
    The caller holds the owner's write lock (fact_entities_link's rule)."""
    if fact.status != Fact.Status.ACTIVE or fact.tenant_id is None:
        return 0
    if FactEntity.objects.filter(fact_id=fact.pk).exists():
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


def facts_draw(fact_ids: Iterable[UUID | str]) -> int:
    """The task's body: draw the entities of these facts, one owner's facts under that owner's lock.
    Facts gone, not active or already linked are skipped. Returns the entities linked."""
    from memory_admin.services.facts import lock_memory_user

    facts = Fact.objects.filter(pk__in=list(fact_ids), status=Fact.Status.ACTIVE).defer("embedding", "embedding_next")
    by_owner: dict[int | None, list[Fact]] = {}
    for fact in facts.order_by("valid_from", "created_at", "pk"):
        by_owner.setdefault(fact.memory_user_id, []).append(fact)
    linked = 0
    for owner, owned in by_owner.items():
        with transaction.atomic():
            if owner is not None:
                lock_memory_user(owner)
            linked += sum(fact_draw(fact) for fact in owned)
    return linked


# Sending a task is a broker round trip (about 4 ms on the default database broker): the request does
# not wait for it. Committed ids go to a per-process outbox that a background thread sends, every id
# waiting at that moment in one task. With ENTITY_DRAW_SEND_IN_REQUEST (the test suite) the send happens
# at commit, in the request. Ids in the outbox of a process that dies are the beat's sweep's.
_outbox: set[str] = set()
_outbox_lock = threading.Lock()
_outbox_ready = threading.Event()
_sender: tuple[int, threading.Thread] | None = None  # (pid, thread): a forked worker starts its own


def _send(ids: list[str]) -> None:
    from memory_admin.celery import dispatch

    dispatch(TASK, ids)


def _send_loop() -> None:
    while True:
        _outbox_ready.wait()
        # Ids that arrive meanwhile ride along: a send costs ~4 ms of this process's CPU (the broker's
        # INSERT through SQLAlchemy), as much as a whole write, and four clients writing one fact each
        # would otherwise send a task per write.
        time.sleep(getattr(settings, "ENTITY_DRAW_SEND_EVERY", 0.0))
        with _outbox_lock:
            ids = sorted(_outbox)
            _outbox.clear()
            _outbox_ready.clear()
        if ids:
            _send(ids)


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
    ids = [str(i) for i in pending]
    pending.clear()
    if getattr(settings, "ENTITY_DRAW_SEND_IN_REQUEST", False):
        _send(ids)
        return
    with _outbox_lock:
        _outbox.update(ids)
        _outbox_ready.set()
    _ensure_sender()


def draw_after_commit(fact: Fact | None) -> None:
    """The write path's hook: once the current transaction commits, one task draws the entities of every
    active fact noted in it. Costs no statement; outside a transaction the task is sent at once."""
    if fact is None or fact.status != Fact.Status.ACTIVE or fact.tenant_id is None:
        return
    pending = getattr(connection, "_entity_draw_pending", None)
    if pending is None:
        pending = connection._entity_draw_pending = set()
    if not any(entry[1] is _flush for entry in connection.run_on_commit):
        pending.clear()  # noted in a transaction that rolled back: those facts do not exist
    pending.add(fact.pk)
    transaction.on_commit(_flush)


# --- Walking the facts in order: the backfill command and the live sweep --------------------------------

SWEEP_SCOPE = "live"
SWEEP_GRACE_SECONDS = 5.0  # a fact this new is the after-commit task's, not the sweep's (yet)
SWEEP_START_MINUTES = 10.0  # a first sweep starts this far back; older facts are the backfill's
SWEEP_BATCH = 500


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
    """The beat's catch-up: facts whose after-commit task was lost (the broker down, a worker killed) are
    drawn here, walking forward from the live marker to SWEEP_GRACE_SECONDS ago. Returns facts gone through."""
    now = timezone.now()
    marker, created = EntityBackfill.objects.get_or_create(scope=SWEEP_SCOPE)
    if created or marker.last_created_at is None:
        marker.last_created_at = now - timedelta(minutes=SWEEP_START_MINUTES)
        marker.last_fact_id = UUID(int=0)
    facts = facts_after(marker).filter(created_at__lte=now - timedelta(seconds=SWEEP_GRACE_SECONDS))
    done, _ = walk_step(marker, facts, SWEEP_BATCH)
    return done
