"""Beat's last resort: a beat that can reach the broker but cannot publish anything for
BEAT_GIVE_UP_SECONDS exits with status 3 (so `manage.py up` or any supervisor starts a new one)
instead of logging SchedulingError forever. A real beat on a Postgres of its own, whose broker
table is made to refuse every message by a trigger."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pgserver
import pytest

from tests.ops.test_outage import ROOT, TempPostgres

pytestmark = pytest.mark.slow

REFUSE = """
CREATE FUNCTION refuse_messages() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'broker table refuses writes'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON broker_message FOR EACH ROW EXECUTE FUNCTION refuse_messages();
"""


def published(pg: TempPostgres) -> bool:
    try:
        out = pgserver.psql(
            [
                "-h",
                str(pg.dir),
                "-U",
                "postgres",
                "-d",
                "memory_admin",
                "-tAc",
                "SELECT EXISTS (SELECT FROM broker_message)",
            ]
        )
    except subprocess.CalledProcessError:
        return False  # no table yet
    return out.strip() == "t"


def test_a_beat_that_cannot_publish_exits_for_its_supervisor(tmp_path):
    pg = TempPostgres()
    log = tmp_path / "beat.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": pg.url,
        "MEMORY_ADMIN_DATA_DIR": str(tmp_path),
        "EXTRACTION_SWEEP_SECONDS": "1",
        "BEAT_GIVE_UP_SECONDS": "4",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("TEST_DB_NAME", None)
    env.pop("CELERY_BROKER_URL", None)
    with open(log, "wb") as out:
        beat = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "memory_admin",
                "beat",
                "--loglevel=INFO",
                "-s",
                str(tmp_path / "schedule"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not published(pg):  # beat publishes, then the broker table refuses every message
            assert beat.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        pgserver.psql(["-h", str(pg.dir), "-U", "postgres", "-d", "memory_admin", "-c", REFUSE])
        refused_at = time.monotonic()
        code = beat.wait(60)
        took = time.monotonic() - refused_at
        text = log.read_text()
        assert code == 3, text[-3000:]
        assert "nothing published for" in text and "exiting so a fresh beat is started" in text
        assert 4 <= took < 30, took
    finally:
        if beat.poll() is None:
            beat.kill()
            beat.wait(10)
        pg.destroy()
