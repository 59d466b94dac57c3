"""Skills, messages and episodes of an export."""

from __future__ import annotations

from collections import Counter
from typing import Any

from memory_admin.errors import Blocked, Invalid
from memory_admin.models import Episode, Fact, Message, Thread
from memory_admin.services.agent_text import agent_text_check
from memory_admin.services.audit import audit
from memory_admin.services.extraction import MAX_MESSAGES_PER_REQUEST, MessageIn, message_post
from memory_admin.services.imports.checks import _digest, _skill_revisions
from memory_admin.services.imports.replay import _Replay
from memory_admin.services.screening import screen_text
from memory_admin.services.skills import check_skill_path, skill_save

# --- skills, messages, episodes ---------------------------------------------------------------------


def _replay_skills(replay: _Replay) -> None:
    for index, skill in enumerate(replay.data["skills"]):
        path = check_skill_path(skill["path"])
        for revision in _skill_revisions(skill):
            source = f"skill:{_digest(path, revision['version'])}"
            if replay.seen("skill_revisions", source):
                continue
            current = replay.user.skills.filter(path=path).values_list("version", flat=True).first() or 0
            try:
                saved = skill_save(
                    principal=replay.principal,
                    path=path,
                    content=revision["content"],
                    base_version=current,
                    memory_user=replay.user,
                )
            except (Blocked, Invalid) as exc:
                replay.refuse("skill_revisions", index, source, exc)
                continue
            replay.record("skill_revisions", source, str(saved.version))


def _message_sources(messages: list[dict[str, Any]]) -> list[str]:
    """A message's identity: a digest of its thread, role, time and text, and which repeat it is."""
    seen: Counter = Counter()
    sources = []
    for m in messages:
        key = _digest(m["thread_id"], m["role"], m["created_at"].isoformat(), m["content"])
        seen[key] += 1
        sources.append(f"message:{_digest(key, seen[key])}")
    return sources


def _replay_messages(replay: _Replay) -> None:
    sources = _message_sources(replay.data["messages"])
    todo = [
        (i, m, sources[i]) for i, m in enumerate(replay.data["messages"]) if not replay.seen("messages", sources[i])
    ]
    runs: list[list[tuple[int, dict[str, Any], str]]] = []
    for entry in todo:  # consecutive messages of one thread: one post
        if runs and runs[-1][0][1]["thread_id"] == entry[1]["thread_id"] and len(runs[-1]) < MAX_MESSAGES_PER_REQUEST:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    for run in runs:
        _post_messages(replay, run)


def _post_messages(replay: _Replay, run: list[tuple[int, dict[str, Any], str]]) -> None:
    """One thread's consecutive messages; secrets in them are redacted by `message_post` (a thread id
    that is itself a secret refuses the run)."""
    try:
        posted = message_post(
            principal=replay.principal,
            memory_user=replay.user,
            thread_id=run[0][1]["thread_id"],
            messages=[MessageIn(m["role"], m["content"], m["created_at"]) for _, m, _ in run],
        )
    except Blocked as exc:
        for index, _, source in run:
            replay.refuse("messages", index, source, exc)
        return
    Message.objects.filter(pk__in=[m.pk for m in posted.messages]).update(
        status=Message.Status.SKIPPED, skip_reason="imported"
    )
    if not posted.thread.messages.filter(status=Message.Status.PENDING).exists():
        Thread.objects.filter(pk=posted.thread.pk).update(extract_due_at=None)
    for (_, _, source), message in zip(run, posted.messages, strict=True):
        replay.record("messages", source, str(message.pk))


def _replay_episode(replay: _Replay, index: int, item: dict[str, Any]) -> None:
    source = f"episode:{item['id']}"
    if replay.seen("episodes", source):
        return
    try:
        summary = screen_text(replay.principal, item["summary"], route="episode", memory_user_id=replay.user.pk).content
        agent_text_check(summary, field="summary", what="episode summary", prose=True, allow_empty=True)
    except (Blocked, Invalid) as exc:
        replay.refuse("episodes", index, source, exc)
        return
    thread = replay.user.threads.filter(external_id=item["thread_id"]).first() if item["thread_id"] else None
    episode = Episode.objects.create(
        tenant_id=replay.principal.tenant_id,
        memory_user=replay.user,
        thread=thread,
        started_at=item["started_at"],
        ended_at=max(item["ended_at"], item["started_at"]),
        summary=summary,
        outcome=item["outcome"],
        summarizer="import",
    )
    fact_ids = [replay.fact_ids[str(i)] for i in item["fact_ids"] if str(i) in replay.fact_ids]
    episode.facts.set(Fact.objects.filter(pk__in=fact_ids, memory_user=replay.user))
    audit(replay.principal, "episode.import", outcome="created", target=episode, memory_user_id=replay.user.pk)
    replay.record("episodes", source, str(episode.pk))
