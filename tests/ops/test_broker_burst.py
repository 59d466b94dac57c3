"""A burst on the embedded broker: a real worker (default concurrency, prefork) started on this run's
test database takes 500 queued bulk tasks and runs each exactly once, and work sent to `control` and
`interactive` after the backlog runs first, not behind it. The worker imports this module for its
probe task, which appends its argument to a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from extraction.broker import queue_stats
from memory_admin.celery import app
from tests.ops.test_broker_stats import embedded_broker  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BURST = 500


@app.task(name="tests.broker_probe", ignore_result=True)
def broker_probe(label: str) -> None:
    with open(os.environ["BROKER_PROBE_FILE"], "a") as out:
        out.write(label + "\n")


def test_a_worker_drains_a_burst_once_each_and_runs_control_and_interactive_work_first(
    embedded_broker,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    with app.connection_for_write() as conn:
        for i in range(BURST):
            app.send_task("tests.broker_probe", args=[f"bulk-{i}"], queue="bulk", connection=conn)
        app.send_task("tests.broker_probe", args=["control"], queue="control", connection=conn)
        app.send_task("tests.broker_probe", args=["interactive"], queue="interactive", connection=conn)
    stats = queue_stats()
    assert [stats[q]["depth"] for q in ("control", "interactive", "bulk")] == [1, 1, BURST]

    db = connection.settings_dict
    ran = tmp_path / "ran"
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={db['HOST']}",
        "PYTHONPATH": str(ROOT),
        "BROKER_PROBE_FILE": str(ran),
        "MEMORY_ADMIN_DATA_DIR": str(tmp_path),
        "EMBEDDER": "openai",  # no model to load: this worker only runs probes
        "WORKER_HEARTBEAT_SECONDS": "0",
        "LOG_LEVEL": "WARNING",
    }
    for name in ("TEST_DB_NAME", "CELERY_BROKER_URL"):
        env.pop(name, None)
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.ops.test_broker_burst", "worker", "--loglevel=WARNING"]
            + ["--without-heartbeat", "--without-mingle", "--without-gossip"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        labels: list[str] = []
        first_at = None
        while len(labels) < BURST + 2:
            assert worker.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{len(labels)} of {BURST + 2} ran\n" + log.read_text()[-3000:]
            time.sleep(0.1)
            labels = ran.read_text().split() if ran.exists() else []
            if labels and first_at is None:
                first_at = time.monotonic()
        drained = time.monotonic() - first_at
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
    time.sleep(0.5)
    labels = ran.read_text().split()
    assert sorted(labels) == sorted([f"bulk-{i}" for i in range(BURST)] + ["control", "interactive"])
    # Fetched first (the broker's order), they run among the first few of 502, not behind the backlog. Their
    # exact place depends on the pool: each of the default two children takes one of the first fetch, and a
    # child still starting on a loaded machine holds its task while the other runs a few bulk ones (seen: 6th).
    assert labels.index("control") < 10 and labels.index("interactive") < 10, labels[:12]
    assert queue_stats()["bulk"] == {"depth": 0, "oldest_age_seconds": None}
    print(f"\n{BURST + 2} tasks ran {drained:.1f} s after the first")
