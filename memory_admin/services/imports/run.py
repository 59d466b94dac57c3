"""`user_import`: an export replayed into a memory user, in one transaction."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from memory_admin.models import ImportedItem, MemoryUser
from memory_admin.selectors.access import WRITE_MEMORY, Principal
from memory_admin.services.audit import audit
from memory_admin.services.imports.checks import check_import
from memory_admin.services.imports.conversations import _replay_episode, _replay_messages, _replay_skills
from memory_admin.services.imports.graph import _replay_graph
from memory_admin.services.imports.replay import ImportReport, _embed_facts, _Replay, _replay_timeline, _restore_history


def user_import(*, principal: Principal, memory_user: MemoryUser, data: dict[str, Any], max_items: int) -> ImportReport:
    """Replay an export (validated by the API's `ExportIn`, as a dict) into `memory_user`; see the
    module docstring. Raises TooLarge/Invalid for an export refused whole (nothing written)."""
    principal.require(WRITE_MEMORY)
    check_import(data, max_items=max_items)
    with transaction.atomic():
        # One import of a user at a time: the second waits, then finds the first's items done.
        MemoryUser.objects.select_for_update(no_key=True).filter(pk=memory_user.pk).first()
        replay = _Replay(principal, memory_user, data)
        _embed_facts(replay)
        _replay_timeline(replay)
        _restore_history(replay)
        _replay_graph(replay)
        _replay_skills(replay)
        _replay_messages(replay)
        for index, item in enumerate(data["episodes"]):
            _replay_episode(replay, index, item)
        ImportedItem.objects.bulk_create(replay.recorded, batch_size=1000)
        report = replay.report
        audit(
            principal,
            "user.import",
            outcome="imported",
            target=memory_user,
            memory_user_id=memory_user.pk,
            after={
                "imported": dict(report.imported),
                "already_imported": dict(report.already_imported),
                "refused": len(report.refused),
                "diverged": len(report.diverged),
            },
        )
    return report
