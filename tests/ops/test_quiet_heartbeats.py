"""Celery's routine lines about the heartbeat tasks (sent every few seconds) wait for LOG_LEVEL=DEBUG;
everything else about them, and every line about other tasks, is logged as before."""

from __future__ import annotations

import logging

import pytest

import memory_admin.celery  # noqa: F401 - sets the heartbeat tasks
from memory_admin.requestlog import HeartbeatFilter


def record(logger: str, level: int, message: str, *args) -> logging.LogRecord:
    return logging.LogRecord(logger, level, __file__, 1, message, args or None, None)


@pytest.fixture
def root_at():
    root = logging.getLogger()
    before = root.level

    def set_level(level: int) -> None:
        root.setLevel(level)

    yield set_level
    root.setLevel(before)


@pytest.mark.parametrize(
    "line",
    [
        record(
            "celery.beat", logging.INFO, "Scheduler: Sending due task %s (%s)", "extraction-sweep", "extraction.sweep"
        ),
        record("celery.worker.strategy", logging.INFO, "Task extraction.index_messages[1f] received"),
        record("celery.app.trace", logging.INFO, "Task extraction.worker_heartbeat[2a] succeeded in 0.01s: None"),
        record("celery.app.trace", logging.INFO, "Task knowledge.refresh_due[3b] succeeded in 0.01s: 0"),
    ],
)
def test_a_heartbeats_routine_line_waits_for_debug(root_at, line):
    root_at(logging.INFO)
    assert not HeartbeatFilter().filter(line)
    root_at(logging.DEBUG)
    assert HeartbeatFilter().filter(line)


@pytest.mark.parametrize(
    "line",
    [
        record("celery.app.trace", logging.ERROR, "Task extraction.sweep[1f] raised unexpected: OperationalError()"),
        record("celery.app.trace", logging.INFO, "Task extraction.sweep[1f] retry: Retry in 5s"),
        record("celery.app.trace", logging.INFO, "Task extraction.close_thread[4c] succeeded in 0.2s: 'ep'"),
        record("celery.worker.strategy", logging.INFO, "Task extraction.sweeper_of_something[5d] received"),
        record("celery.beat", logging.WARNING, "Scheduler: cannot send extraction.sweep"),
        record("extraction.pipeline", logging.INFO, "batch 1 done: extraction.sweep planned it"),
    ],
)
def test_everything_else_is_logged(root_at, line):
    root_at(logging.INFO)
    assert HeartbeatFilter().filter(line)
