"""Backup and restore of the whole database (`manage.py backup` / `manage.py restore`).

A backup is one tar file, mode 0600, written beside its final name and renamed into place (a partial
file never looks like a backup):

- `manifest.json`: format, time, the migrations applied, the row count of every table and the
  sha256 of the dump, all read in the same snapshot as the dump;
- `database.dump`: `pg_dump --format=custom` of that snapshot (`--snapshot`, exported by a
  repeatable-read transaction held open while pg_dump runs: one consistent point in time);
- `install/secret_key`, `install/pii_fingerprint_key`: the keys in effect. The PII fingerprint key is
  what makes a restored block's fingerprint match a new sighting of the same value; the secret key
  keeps sessions valid. The file already holds every memory, so it is as sensitive as the keys:
  hence 0600. `--no-secrets` leaves them out.

Restore never deletes before the new data is in place: the file is checked (tar readable, dump hash,
`pg_restore --list`), restored into a new database, verified there (migrations applied are known to
this code, row counts equal the manifest's; older migrations are brought up to date by `migrate`),
and only then swapped in by renaming both databases in one transaction. The previous database is
kept as `<name>_pre_restore_<time>` (printed) until the operator drops it. Anything that fails before
the swap drops only the new database; the current one is never touched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from memory_admin import config

FORMAT = "memory-admin/backup-v1"
SECRET_NAMES = ("secret_key", "pii_fingerprint_key")
DUMP_MEMBER = "database.dump"
MANIFEST_MEMBER = "manifest.json"


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says what to do. Nothing was changed."""


@dataclass(frozen=True)
class Db:
    """Where a database lives: Django's DATABASES entry, any database name."""

    name: str
    host: str = ""
    port: str = ""
    user: str = ""
    password: str = ""
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_django(cls, entry: dict[str, Any], name: str | None = None) -> Db:
        options = tuple(sorted((str(k), str(v)) for k, v in (entry.get("OPTIONS") or {}).items()))
        return cls(
            name=name or entry["NAME"],
            host=entry.get("HOST") or "",
            port=str(entry.get("PORT") or ""),
            user=entry.get("USER") or "",
            password=entry.get("PASSWORD") or "",
            options=options,
        )

    def named(self, name: str) -> Db:
        return Db(name, self.host, self.port, self.user, self.password, self.options)

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection:
        params = {
            k: v
            for k, v in (("host", self.host), ("port", self.port), ("user", self.user), ("password", self.password))
            if v
        }
        return psycopg.connect(dbname=self.name, autocommit=autocommit, **params, **dict(self.options))

    def libpq_env(self) -> dict[str, str]:
        """The connection for pg_dump/pg_restore/psql as libpq variables (no password on a command line)."""
        env = {**os.environ, "PGDATABASE": self.name}
        for var, value in (
            ("PGHOST", self.host),
            ("PGPORT", self.port),
            ("PGUSER", self.user),
            ("PGPASSWORD", self.password),
        ):
            if value:
                env[var] = value
        for key, value in self.options:
            if key in ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout"):
                env[f"PG{key.upper()}"] = value
        return env


def pg_tool(name: str) -> str:
    """pg_dump / pg_restore: from PG_BIN_DIR, else the pgserver wheel's (Postgres 16, the embedded
    server's own), else PATH. Against a managed server, set PG_BIN_DIR to tools at least its version."""
    candidates = []
    if config.get("PG_BIN_DIR"):
        candidates.append(Path(config.get("PG_BIN_DIR")) / name)
    try:
        import pgserver

        candidates.append(Path(pgserver.__file__).parent / "pginstall" / "bin" / name)
    except ImportError:  # pragma: no cover - pgserver is a dependency
        pass
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    found = shutil.which(name)
    if not found:
        raise BackupError(f"{name} not found: install the Postgres client tools or set PG_BIN_DIR.")
    return found


def _run(args: list[str], db: Db) -> subprocess.CompletedProcess:
    result = subprocess.run(args, env=db.libpq_env(), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tool = Path(args[0]).name
        raise BackupError(f"{tool} failed (exit {result.returncode}): {result.stderr.strip()[-800:]}")
    return result


# --- reading a database's state ------------------------------------------------------------------


def _tables(cursor: psycopg.Cursor) -> list[str]:
    cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
    return [row[0] for row in cursor.fetchall()]


def database_state(cursor: psycopg.Cursor) -> dict[str, Any]:
    """The row count of every table and the migrations applied, as one cursor (one snapshot) sees them."""
    counts = {}
    for table in _tables(cursor):
        cursor.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        counts[table] = cursor.fetchone()[0]
    migrations: list[list[str]] = []
    if "django_migrations" in counts:
        cursor.execute("SELECT app, name FROM django_migrations ORDER BY app, name")
        migrations = [list(row) for row in cursor.fetchall()]
    return {"row_counts": counts, "migrations": migrations}


# --- backup --------------------------------------------------------------------------------------


def secrets_in_effect() -> dict[str, str]:
    from django.conf import settings

    return {"secret_key": settings.SECRET_KEY, "pii_fingerprint_key": settings.PII_FINGERPRINT_KEY}


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(datetime.now(UTC).timestamp())
    archive.addfile(info, io.BytesIO(data))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def backup_create(target: Path, db: Db, *, secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """Write a backup of `db` to `target` (0600); returns its manifest. `secrets` (name → value) are
    the install keys to include; None includes none."""
    target = Path(target)
    # Beside the target: the dump is as large as the backup, and /tmp may be small.
    with tempfile.TemporaryDirectory(prefix=".ma-backup-", dir=target.parent) as work:
        dump = Path(work) / DUMP_MEMBER
        with db.connect() as conn, conn.cursor() as cursor:
            # The snapshot pg_dump reads is the one the counts were read in: the manifest describes
            # exactly the dump, whatever is written meanwhile.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute("SELECT pg_export_snapshot(), current_setting('server_version')")
            snapshot, server_version = cursor.fetchone()
            state = database_state(cursor)
            _run(
                [
                    pg_tool("pg_dump"),
                    "--format=custom",
                    f"--snapshot={snapshot}",
                    "--no-owner",
                    "--no-privileges",
                    f"--file={dump}",
                ],
                db,
            )
            conn.rollback()
        manifest = {
            "format": FORMAT,
            "created_at": datetime.now(UTC).isoformat(),
            "database": db.name,
            "server_version": server_version,
            "dump_sha256": _sha256(dump),
            "dump_bytes": dump.stat().st_size,
            "secrets": sorted(secrets or {}),
            **state,
        }
        _write_archive(target, dump, manifest, secrets or {})
    return manifest


def _write_archive(target: Path, dump: Path, manifest: dict[str, Any], secrets: dict[str, str]) -> None:
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as archive:
            _add_bytes(archive, MANIFEST_MEMBER, json.dumps(manifest, indent=1).encode())
            archive.add(dump, arcname=DUMP_MEMBER)
            for name, value in sorted(secrets.items()):
                _add_bytes(archive, f"install/{name}", (value + "\n").encode())
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(partial, 0o600)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


# --- reading a backup ----------------------------------------------------------------------------


@dataclass
class Backup:
    manifest: dict[str, Any]
    dump: Path
    secrets: dict[str, str]


@contextmanager
def opened_backup(path: Path) -> Iterator[Backup]:
    """The backup's parts, checked: a damaged or truncated file raises BackupError before anything."""
    path = Path(path)
    if not path.is_file():
        raise BackupError(f"{path}: no such backup file.")
    with tempfile.TemporaryDirectory(prefix="ma-restore-") as work:
        try:
            with tarfile.open(path, mode="r:") as archive:
                members = {m.name: m for m in archive.getmembers()}
                manifest = json.loads(_member(archive, members, MANIFEST_MEMBER))
                dump = Path(work) / DUMP_MEMBER
                _copy_member(archive, members, DUMP_MEMBER, dump)
                secrets = {
                    name: _member(archive, members, f"install/{name}").decode().strip()
                    for name in SECRET_NAMES
                    if f"install/{name}" in members
                }
        except (tarfile.TarError, EOFError, OSError, ValueError, KeyError) as exc:
            raise BackupError(
                f"{path} is not a readable backup (damaged or truncated: {exc}). Nothing was changed."
            ) from exc
        _check_manifest(path, manifest, dump)
        yield Backup(manifest, dump, secrets)


def _member(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str) -> bytes:
    if name not in members:
        raise KeyError(f"{name} missing")
    handle = archive.extractfile(members[name])
    data = handle.read() if handle else b""
    if len(data) != members[name].size:
        raise EOFError(f"{name} is cut short")
    return data


def _copy_member(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str, target: Path) -> None:
    """Stream a member to a file (a dump can be larger than memory), checking it is whole."""
    if name not in members:
        raise KeyError(f"{name} missing")
    handle = archive.extractfile(members[name])
    if handle is None:
        raise KeyError(f"{name} is not a file")
    with open(target, "wb") as out:
        shutil.copyfileobj(handle, out, 1 << 20)
    if target.stat().st_size != members[name].size:
        raise EOFError(f"{name} is cut short")


def _check_manifest(path: Path, manifest: dict[str, Any], dump: Path) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path} is not a memory-admin backup (format {FORMAT} expected). Nothing was changed.")
    if _sha256(dump) != manifest.get("dump_sha256"):
        raise BackupError(f"{path}: the database dump does not match its checksum (damaged). Nothing was changed.")
    try:
        _run([pg_tool("pg_restore"), "--list", str(dump)], Db(name="postgres"))
    except BackupError as exc:
        raise BackupError(f"{path}: pg_restore cannot read the dump ({exc}). Nothing was changed.") from exc


# --- restore -------------------------------------------------------------------------------------


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d%H%M%S")


def restore_into_new_database(backup: Backup, db: Db, name: str) -> Db:
    """Create database `name` beside `db` and restore the dump into it, in one transaction."""
    with db.named("postgres").connect(autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    target = db.named(name)
    try:
        _run(
            [
                pg_tool("pg_restore"),
                "--no-owner",
                "--no-privileges",
                "--exit-on-error",
                "--single-transaction",
                f"--dbname={name}",
                str(backup.dump),
            ],
            target,
        )
    except BackupError:
        drop_database(db, name)
        raise
    return target


def drop_database(db: Db, name: str) -> None:
    with db.named("postgres").connect(autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def verify_restored(backup: Backup, restored: Db) -> list[tuple[str, str]]:
    """Row counts and migrations of the restored database equal the manifest's; returns the migrations
    this code has that the backup lacks (to apply before the swap). Raises BackupError otherwise."""
    with restored.connect() as conn, conn.cursor() as cursor:
        state = database_state(cursor)
    expected = backup.manifest.get("row_counts", {})
    wrong = {
        t: (expected.get(t), state["row_counts"].get(t))
        for t in set(expected) | set(state["row_counts"])
        if expected.get(t) != state["row_counts"].get(t)
    }
    if wrong:
        raise BackupError(
            f"the restored database differs from the backup's manifest (table: expected, found): "
            f"{dict(sorted(wrong.items())[:5])}. Nothing was changed."
        )
    applied = {tuple(m) for m in state["migrations"]}
    if applied != {tuple(m) for m in backup.manifest.get("migrations", [])}:
        raise BackupError("the restored migrations differ from the backup's manifest. Nothing was changed.")
    from django.db.migrations.loader import MigrationLoader

    known = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    unknown = sorted(applied - known)
    if unknown:
        raise BackupError(
            f"the backup was made by a newer version (migrations unknown here: {unknown[:3]}); "
            "restore it with that version. Nothing was changed."
        )
    return sorted(known - applied)


def database_url(db: Db) -> str:
    """A DATABASE_URL for `db` (the form `embedded_db.database_from_url` reads)."""
    from urllib.parse import quote, urlencode

    auth = quote(db.user) + (f":{quote(db.password)}" if db.password else "") + "@" if db.user else ""
    socket = db.host.startswith("/")
    netloc = auth + ("" if socket else db.host) + (f":{db.port}" if db.port and not socket else "")
    query = dict(db.options) | ({"host": db.host} if socket else {}) | ({"port": db.port} if socket and db.port else {})
    return f"postgresql://{netloc}/{quote(db.name)}" + (f"?{urlencode(query)}" if query else "")


def migrate_database(restored: Db) -> None:
    """Bring a backup made by an older version up to this code's migrations, before it is swapped in."""
    from django.conf import settings

    result = subprocess.run(
        [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "migrate", "--noinput"],
        env={**os.environ, "DATABASE_URL": database_url(restored)},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BackupError(
            f"migrating the restored database failed: {result.stderr.strip()[-800:]}. Nothing was changed."
        )


SESSIONS_SETTLE_S = 3.0  # a client that just disconnected stays listed until its backend has exited


def _other_sessions(admin: psycopg.Connection, name: str, *, settle: float = SESSIONS_SETTLE_S) -> int:
    """Client sessions on `name` other than ours. Postgres's own workers (autovacuum after a burst
    of writes) are not the operator's to stop and are ended at the swap; a session that is closing
    is given `settle` seconds to go."""
    deadline = time.monotonic() + settle
    while True:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'",
            [name],
        ).fetchone()
        if not row[0] or time.monotonic() >= deadline:
            return row[0]
        time.sleep(0.1)


def _exists(admin: psycopg.Connection, name: str) -> bool:
    return admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def swap_databases(db: Db, restored: Db, *, terminate: bool) -> str:
    """Put `restored` in the place of `db` (both renamed in one transaction); returns the name the
    previous database is kept under ("" when there was none). Refuses while other sessions use `db`,
    unless `terminate`."""
    keep_as = f"{db.name}_pre_restore_{_stamp()}"[:63]
    current = sql.Identifier(db.name)
    with db.named("postgres").connect(autocommit=True) as admin:
        if not _exists(admin, db.name):  # a new install: nothing to keep
            admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(restored.name), current))
            return ""
        sessions = _other_sessions(admin, db.name, settle=0.0 if terminate else SESSIONS_SETTLE_S)
        if sessions and not terminate:
            raise BackupError(
                f"{sessions} other session(s) use {db.name}: stop the web server, worker and beat "
                "(or pass --terminate). Nothing was changed."
            )
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(current))
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [db.name],
            )
            with admin.transaction():
                admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(current, sql.Identifier(keep_as)))
                admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(restored.name), current))
        except psycopg.Error:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(current))
            raise
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(keep_as)))
    return keep_as


@dataclass
class Restored:
    kept_as: str  # the previous database, kept until the operator drops it
    manifest: dict[str, Any]
    secrets: dict[str, str]
    migrated: list[tuple[str, str]]


def restore(path: Path, db: Db, *, terminate: bool = False) -> Restored:
    """Restore the backup at `path` in place of `db`. The secrets are the caller's to install
    (`install_backup_secrets`)."""
    try:
        with opened_backup(path) as backup:
            restored = restore_into_new_database(backup, db, f"{db.name}_restoring_{_stamp()}"[:63])
            try:
                missing = verify_restored(backup, restored)
                if missing:
                    migrate_database(restored)
                kept_as = swap_databases(db, restored, terminate=terminate)
            except BaseException:
                drop_database(db, restored.name)
                raise
            return Restored(kept_as, backup.manifest, backup.secrets, missing)
    except psycopg.Error as exc:  # e.g. no right to create or rename databases
        raise BackupError(f"the database server refused: {str(exc).strip()}. Nothing was changed.") from exc


def install_backup_secrets(secrets: dict[str, str], data_dir: Path) -> list[str]:
    """Write the backup's keys into the data directory (0600), keeping any different previous file as
    `<name>.pre-restore`; returns the names written. An environment variable still overrides a file."""
    written = []
    for name, value in sorted(secrets.items()):
        path = Path(data_dir) / name
        if path.is_file() and path.read_text().strip() == value:
            continue
        if path.is_file():
            os.replace(path, path.with_name(f"{name}.pre-restore"))
        fd = os.open(path.with_name(f".{name}.restoring"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
        os.replace(path.with_name(f".{name}.restoring"), path)
        written.append(name)
    return written
