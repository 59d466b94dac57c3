"""Per-install secrets and a production configuration, checked in fresh processes (the settings are
read once per process)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FINGERPRINT = (
    "import django; django.setup();"
    "from memory_admin.services.pii import find, fingerprint;"
    "t = 'call Alice on +1 415 555 0123'; print(fingerprint(t, find(t)))"
)


def run(code_or_args, data_dir: Path, **env):
    base = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "memory_admin.settings",
        "MEMORY_ADMIN_DATA_DIR": str(data_dir),
        # Parsed, never connected to: nothing here touches a database.
        "DATABASE_URL": "postgresql://nobody:nothing@127.0.0.1:1/none",
    }
    args = [sys.executable, "-c", code_or_args] if isinstance(code_or_args, str) else [sys.executable, *code_or_args]
    return subprocess.run(args, cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_each_install_generates_its_own_keys_and_fingerprints_differ(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    first = run(FINGERPRINT, one)
    assert first.returncode == 0, first.stderr
    again = run(FINGERPRINT, one)
    other = run(FINGERPRINT, two)
    assert first.stdout == again.stdout  # stable across restarts of one install
    assert first.stdout != other.stdout  # another install cannot test guesses against this one's prints
    for name in ("secret_key", "pii_fingerprint_key"):
        path = one / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert len(path.read_text().strip()) >= 50
    assert (one / "secret_key").read_text() != (one / "pii_fingerprint_key").read_text()


@pytest.mark.slow
def test_the_fingerprint_key_comes_from_its_own_variable(tmp_path):
    a = run(FINGERPRINT, tmp_path, PII_FINGERPRINT_KEY="a" * 30 + "bcdefghijklmnopqrstuvwxyz0123456789")
    b = run(FINGERPRINT, tmp_path, PII_FINGERPRINT_KEY="z" * 30 + "bcdefghijklmnopqrstuvwxyz0123456789")
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert a.stdout != b.stdout
    # The same SECRET_KEY does not make the fingerprints equal: they are keyed separately.
    c = run(FINGERPRINT, tmp_path / "c", SECRET_KEY="s" * 60 + "xyz123")
    d = run(FINGERPRINT, tmp_path / "d", SECRET_KEY="s" * 60 + "xyz123")
    assert c.stdout != d.stdout


@pytest.mark.parametrize(
    "env",
    [
        {"SECRET_KEY": "dev-only-insecure-secret-key-change-me-in-production-0123456789"},
        {"SECRET_KEY": "django-insecure-" + "x1y2z3" * 10},
        {"SECRET_KEY": "short"},
        {"PII_FINGERPRINT_KEY": "changeme"},
    ],
    ids=["old public default", "django-insecure", "too short", "weak fingerprint key"],
)
def test_debug_off_refuses_to_start_with_a_default_or_weak_key(tmp_path, env):
    result = run("import django; django.setup()", tmp_path, DEBUG="0", **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "refusing to start" in result.stderr


def test_debug_tolerates_the_old_default_for_local_development(tmp_path):
    env = {"SECRET_KEY": "dev-only-insecure-secret-key-change-me-in-production-0123456789"}
    assert run("import django; django.setup()", tmp_path, DEBUG="1", **env).returncode == 0


@pytest.mark.slow
def test_check_deploy_is_clean_for_a_production_configuration(tmp_path):
    result = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        tmp_path,
        DEBUG="0",
        HTTPS="1",
        ALLOWED_HOSTS="memory.example.com",
        CSRF_TRUSTED_ORIGINS="https://memory.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
    # Without HTTPS=1 (plain-http local use) the same check names what production must turn on.
    local = run(["manage.py", "check", "--deploy"], tmp_path)
    assert "security.W008" in local.stderr + local.stdout  # SECURE_SSL_REDIRECT


def test_no_key_file_is_tracked_by_git():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert not [p for p in tracked if p.endswith(("secret_key", "pii_fingerprint_key"))]
