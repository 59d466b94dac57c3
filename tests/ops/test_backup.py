"""`manage.py backup` / `manage.py restore` with the real pg_dump/pg_restore on the embedded Postgres.

The commands run as processes against a scratch database of their own (a copy of this run's test
database with a tenant, facts and a notebook written through the services), so renaming and swapping
databases never touches the suite's database.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from memory_admin.backup import (
    Db,
    _other_sessions,
    backup_create,
    database_url,
    drop_database,
    opened_backup,
    restore_into_new_database,
)
from memory_admin.models import MemoryUser
from memory_admin.selectors.access import Principal
from memory_admin.services.facts import fact_write
from memory_admin.services.notebook import notebook_save
from memory_admin.services.tenants import tenant_create

pytestmark = pytest.mark.slow  # each test runs manage.py as processes (about 20 s each)

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = "Dana keeps the spare keys under the red flowerpot"


def manage(db: Db, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(db),
        "MEMORY_ADMIN_DATA_DIR": str(data_dir),
        "PYTHONPATH": str(ROOT),
    }
    for name in ("TEST_DB_NAME", "SECRET_KEY", "PII_FINGERPRINT_KEY"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def databases_like(db: Db, prefix: str) -> list[str]:
    with db.named("postgres").connect() as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY 1", [prefix.replace("_", r"\_") + "%"]
        ).fetchall()
    return [r[0] for r in rows]


def fact_contents(db: Db) -> list[str]:
    with db.connect() as conn:
        return [r[0] for r in conn.execute("SELECT content FROM memory_admin_fact ORDER BY content").fetchall()]


@pytest.fixture
def scratch(transactional_db, tmp_path):
    """A database of its own holding a tenant, two facts and a notebook (committed)."""
    tenant = tenant_create(slug=f"backup-{uuid.uuid4().hex[:6]}")
    principal = Principal.system(tenant.pk, actor="agent:backup-test")
    user = MemoryUser.objects.create(tenant=tenant, external_id="dana")
    fact_write(principal=principal, memory_user=user, content=ORIGINAL, source="user_stated")
    fact_write(
        principal=principal,
        memory_user=user,
        content="Dana prefers neovim",
        key="preference.editor",
        source="user_stated",
    )
    notebook_save(principal=principal, memory_user=user, content="# Dana\n- works at Acme", base_version=0)
    test_db = Db.from_django(connection.settings_dict)
    name = f"ma_backup_{uuid.uuid4().hex[:8]}"
    with opened_backup_of(test_db, tmp_path) as backup:
        scratch_db = restore_into_new_database(backup, test_db, name)
    yield scratch_db
    for leftover in databases_like(test_db, name):
        drop_database(test_db, leftover)


def opened_backup_of(db: Db, tmp_path: Path):
    path = tmp_path / "seed.tar"
    backup_create(path, db)
    return opened_backup(path)


def test_backup_change_restore_brings_the_data_back_and_keeps_the_old_database(scratch, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    file = tmp_path / "out" / "memory.backup"
    file.parent.mkdir()
    made = manage(scratch, data_dir, "backup", str(file))
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    with tarfile.open(file) as archive:
        names = set(archive.getnames())
        fingerprint_key = archive.extractfile("install/pii_fingerprint_key").read().decode().strip()
    assert {"manifest.json", "database.dump", "install/secret_key", "install/pii_fingerprint_key"} <= names
    assert fingerprint_key == (data_dir / "pii_fingerprint_key").read_text().strip()
    assert [p.name for p in file.parent.iterdir()] == [file.name], "work files were left beside the backup"

    with scratch.connect() as conn:  # the data changes after the backup
        conn.execute("UPDATE memory_admin_fact SET content = 'overwritten' WHERE content = %s", [ORIGINAL])
        conn.execute("DELETE FROM memory_admin_notebookchunk")
    assert ORIGINAL not in fact_contents(scratch)

    other_install = tmp_path / "other-data"  # a fresh install: the backup's keys come along
    other_install.mkdir()
    restored = manage(scratch, other_install, "restore", str(file))
    assert restored.returncode == 0, restored.stderr
    assert ORIGINAL in fact_contents(scratch)
    assert "overwritten" not in fact_contents(scratch)
    with scratch.connect() as conn:
        assert conn.execute("SELECT count(*) FROM memory_admin_notebookchunk").fetchone()[0] == 1
    kept = databases_like(scratch, f"{scratch.name}_pre_restore_")
    assert len(kept) == 1 and kept[0] in restored.stdout
    assert "overwritten" in fact_contents(scratch.named(kept[0])), "the previous data must be kept"
    assert (other_install / "pii_fingerprint_key").read_text().strip() == fingerprint_key
    assert stat.S_IMODE((other_install / "pii_fingerprint_key").stat().st_mode) == 0o600
    assert databases_like(scratch, f"{scratch.name}_restoring_") == []


def _damaged_copies(file: Path, tmp_path: Path) -> dict[str, Path]:
    data = file.read_bytes()
    truncated = tmp_path / "truncated.backup"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    with tarfile.open(file) as archive:  # a byte in the middle of the dump itself
        member = archive.getmember("database.dump")
        flipped[member.offset_data + member.size // 2] ^= 0xFF
    corrupt = tmp_path / "corrupt.backup"
    corrupt.write_bytes(bytes(flipped))
    garbage = tmp_path / "garbage.backup"
    garbage.write_bytes(b"this is not a backup at all\n" * 50)
    return {"truncated": truncated, "corrupt": corrupt, "garbage": garbage}


def test_a_damaged_backup_is_refused_and_nothing_changes(scratch, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    file = tmp_path / "memory.backup"
    assert manage(scratch, data_dir, "backup", str(file)).returncode == 0
    with scratch.connect() as conn:
        conn.execute("UPDATE memory_admin_fact SET content = 'changed after the backup' WHERE content = %s", [ORIGINAL])
    before = fact_contents(scratch)
    for kind, damaged in _damaged_copies(file, tmp_path).items():
        result = manage(scratch, data_dir, "restore", str(damaged))
        assert result.returncode != 0, kind
        assert "Nothing was changed" in result.stderr, (kind, result.stderr[-500:])
        assert "Traceback" not in result.stderr, kind
        assert fact_contents(scratch) == before, kind
    assert databases_like(scratch, f"{scratch.name}_") == [], "a refused restore left a database behind"


def test_restore_refuses_while_the_database_is_in_use_and_changes_nothing(scratch, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    file = tmp_path / "memory.backup"
    assert manage(scratch, data_dir, "backup", str(file)).returncode == 0
    with scratch.connect() as conn:
        conn.execute("UPDATE memory_admin_fact SET content = 'changed' WHERE content = %s", [ORIGINAL])
    busy = scratch.connect(autocommit=True)  # a web server's session, say
    try:
        refused = manage(scratch, data_dir, "restore", str(file))
        assert refused.returncode != 0
        assert "other session(s)" in refused.stderr and "Nothing was changed" in refused.stderr
        assert "changed" in fact_contents(scratch)
        assert databases_like(scratch, f"{scratch.name}_") == []
        forced = manage(scratch, data_dir, "restore", "--terminate", str(file))
        assert forced.returncode == 0, forced.stderr
        with pytest.raises(psycopg.OperationalError):
            busy.execute("SELECT 1")  # its session was ended at the swap
    finally:
        busy.close()
    assert ORIGINAL in fact_contents(scratch)


def test_only_client_sessions_still_open_count_as_in_use(scratch):
    """What refuses a restore is a session someone would have to stop: a connection closed a moment
    ago is given time to go, and Postgres's own workers (autovacuum after the writes) do not count."""
    with scratch.named("postgres").connect(autocommit=True) as admin:
        for _ in range(5):
            scratch.connect().close()
            assert _other_sessions(admin, scratch.name) == 0
        busy = scratch.connect(autocommit=True)
        try:
            assert _other_sessions(admin, scratch.name, settle=0.3) == 1
        finally:
            busy.close()
        workers = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type <> 'client backend' AND datname IS NOT NULL"
        ).fetchone()[0]
        assert _other_sessions(admin, scratch.name) == 0, f"{workers} worker session(s) counted as users"


def test_an_older_backup_restored_on_a_new_install_is_migrated_before_it_is_swapped_in(scratch, tmp_path):
    """A backup made before the newest migration, restored where no database exists yet: the restored copy
    is brought up to this code's migrations, then takes the database's name."""
    with scratch.connect() as conn:  # what the database looked like one migration ago
        newest, previous = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM django_migrations WHERE app = 'memory_admin' ORDER BY name DESC LIMIT 2"
            )
        ]
    undone = manage(scratch, tmp_path, "migrate", "memory_admin", previous)
    assert undone.returncode == 0, undone.stderr
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    file = tmp_path / "older.backup"
    assert manage(scratch, data_dir, "backup", "--no-secrets", str(file)).returncode == 0
    with tarfile.open(file) as archive:
        assert not [n for n in archive.getnames() if n.startswith("install/")]
    fresh = scratch.named(f"{scratch.name}_fresh")
    restored = manage(fresh, data_dir, "restore", str(file))
    assert restored.returncode == 0, restored.stderr
    assert "1 migrations applied" in restored.stdout and "kept as" not in restored.stdout
    assert ORIGINAL in fact_contents(fresh)
    with fresh.connect() as conn:
        assert conn.execute("SELECT count(*) FROM django_migrations WHERE name = %s", [newest]).fetchone()[0] == 1
    assert databases_like(scratch, f"{fresh.name}_") == []
