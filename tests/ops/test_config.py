"""One source of truth for configuration (memory_admin/config.py): every variable the code reads is declared
there, README's table is written from it, and a malformed value stops a process at start with one line."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_admin import config

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*(ROOT / "memory_admin").rglob("*.py"), *(ROOT / "extraction").rglob("*.py"), ROOT / "manage.py"]


def _is_os_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os"


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def environment_reads(path: Path) -> list[tuple[int, str | None, str]]:
    """(line, variable name or None when computed, how) for every read of the environment in `path`:
    os.environ.get / os.environ[...] / `in os.environ` / os.getenv, and config.get / config.is_set."""
    reads = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, attr = node.func.value, node.func.attr
            name = _literal(node.args[0]) if node.args else None
            if _is_os_environ(owner) and attr == "get":
                reads.append((node.lineno, name, "os.environ.get"))
            elif getattr(owner, "id", "") == "os" and attr == "getenv":
                reads.append((node.lineno, name, "os.getenv"))
            elif getattr(owner, "id", "") in ("config", "_config") and attr in ("get", "is_set"):
                reads.append((node.lineno, name, f"config.{attr}"))
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value) and isinstance(node.ctx, ast.Load):
            reads.append((node.lineno, _literal(node.slice), "os.environ[]"))
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            reads.append((node.lineno, _literal(node.left), "in os.environ"))
    return reads


def test_the_scan_finds_every_kind_of_read(tmp_path):
    # The scan below is what keeps the declarations complete; it must see each way of reading.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\nfrom memory_admin import config\n"
        "a = os.environ.get('A_VAR', '1')\nb = os.environ['B_VAR']\nc = 'C_VAR' in os.environ\n"
        "d = os.getenv('D_VAR')\ne = config.get('E_VAR')\nf = os.environ.get(name)\n"
        "os.environ['G_VAR'] = '1'\nos.environ.setdefault('H_VAR', '1')\nenv = {**os.environ}\n"
    )
    assert [(name, how) for _, name, how in environment_reads(sample)] == [
        ("A_VAR", "os.environ.get"),
        ("B_VAR", "os.environ[]"),
        ("C_VAR", "in os.environ"),
        ("D_VAR", "os.getenv"),
        ("E_VAR", "config.get"),
        (None, "os.environ.get"),
    ]


def test_every_variable_the_code_reads_is_declared_and_read_through_config():
    undeclared, direct, computed = [], [], []
    for path in SOURCES:
        if path == ROOT / "memory_admin" / "config.py":
            continue
        where = path.relative_to(ROOT)
        for line, name, how in environment_reads(path):
            if name is None:
                if how.startswith("config."):
                    continue  # config.get takes only a declared name (KeyError otherwise)
                computed.append(f"{where}:{line} {how}(<computed name>)")
            elif name not in config.VARIABLES and name not in config.PASSED_THROUGH:
                undeclared.append(f"{where}:{line} {how}({name!r})")
            elif how.startswith(("os.", "in os")) and name not in config.PASSED_THROUGH:
                direct.append(f"{where}:{line} {how}({name!r})")
    assert not undeclared, "declare these in memory_admin/config.py:\n" + "\n".join(undeclared)
    assert not direct, "read these through memory_admin.config.get:\n" + "\n".join(direct)
    assert not computed, "a read the scan cannot name (use config.get with a literal):\n" + "\n".join(computed)


def test_readme_configuration_table_is_the_one_the_declarations_write():
    readme = (ROOT / "README.md").read_text()
    assert config.readme_with_table(readme) == readme, "run `python manage.py config_table`"
    for name in config.VARIABLES:
        assert readme.count(f"\n| `{name}` |") == 1, name


def test_the_table_command_rewrites_a_drifted_readme_and_check_mode_fails_on_it(tmp_path, settings):
    from django.core.management import CommandError, call_command

    drifted = (ROOT / "README.md").read_text().replace("| `WEB_WORKERS` | 2 |", "| `WEB_WORKERS` | 3 |")
    assert drifted != (ROOT / "README.md").read_text()
    (tmp_path / "README.md").write_text(drifted)
    settings.BASE_DIR = tmp_path
    with pytest.raises(CommandError, match="differs"):
        call_command("config_table", "--check")
    call_command("config_table")
    assert (tmp_path / "README.md").read_text() == (ROOT / "README.md").read_text()


# The defaults the code had before the declarations (each reader's own literal), held equal.
FORMER_DEFAULTS = {
    "DEBUG": False,
    "ALLOWED_HOSTS": ["*"],
    "CSRF_TRUSTED_ORIGINS": [],
    "HTTPS": False,
    "DB_CONN_MAX_AGE": 60,
    "PASSWORD_MIN_LENGTH": 12,
    "MAX_FACT_BYTES": 8192,
    "MAX_MESSAGE_BYTES": 65536,
    "MAX_NOTEBOOK_BYTES": 1048576,
    "MAX_SKILL_BYTES": 262144,
    "MAX_METADATA_BYTES": 4096,
    "IMPORT_MAX_ITEMS": 1000,
    "IMPORT_MAX_FILE_ITEMS": 100000,
    "IMPORT_MAX_FILE_BYTES": 67108864,
    "API_RATE_LIMIT": 600,
    "API_RATE_WINDOW_SECONDS": 60,
    "LOGIN_FAILURE_LIMIT": 10,
    "LOGIN_FAILURE_WINDOW_SECONDS": 900,
    "THROTTLE_CLIENT_IP_HEADER": "",
    "FACT_CAP_GRACE_HOURS": 24.0,
    "MARKDOWN_MAX_INPUT_BYTES": 102400,
    "MARKDOWN_MAX_HTML_BYTES": 1048576,
    "SCREENING_BUDGET_SECONDS": 5.0,
    "EMBEDDER": "onnx",
    "GIL_SWITCH_INTERVAL_MS": 1.0,
    "OPENAI_API_KEY": "",
    "OPENAI_BASE_URL": None,
    "OPENAI_MODEL": "gpt-4o-mini",
    "OPENAI_EMBEDDING_MODEL": "text-embedding-3-small",
    "OPENAI_TIMEOUT_SECONDS": 30.0,
    "ENTITY_JUDGE": "rules",
    "ENTITY_NEIGHBOUR_REVIEW": 0.8,
    "ENTITY_NEIGHBOUR_MERGE": 0.9,
    "ACCESS_COUNT_FLUSH_SECONDS": 1.0,
    "CHECKPOINT_KEEP_LAST": 100,
    "CHECKPOINT_MAX_AGE_DAYS": 0.0,
    "ENTITY_DRAW_SEND_EVERY": 0.25,
    "ENTITY_DRAW_LOST_SECONDS": 300.0,
    "CELERY_RESULT_BACKEND": None,
    "CELERY_TASK_ALWAYS_EAGER": False,
    "WORKER_HEARTBEAT_SECONDS": 10.0,
    "HEALTH_STALE_SECONDS": 120.0,
    "HEALTH_STARTUP_GRACE_SECONDS": 60.0,
    "HEALTH_BACKLOG_SECONDS": 60.0,
    "LOG_FORMAT": "json",
    "LOG_LEVEL": "WARNING",
    "METRICS_TOKEN": "",
    "BIND": "127.0.0.1:8000",
    "WEB_WORKERS": 2,
    "WEB_THREADS": 4,
    "ACCESS_LOG": None,
    "UP_RESTART_BACKOFF_SECONDS": 1.0,
    "UP_RESTART_BACKOFF_MAX_SECONDS": 60.0,
    "UP_WEDGED_SECONDS": 120.0,
    "UP_START_GRACE_SECONDS": 120.0,
    "UP_STOP_TIMEOUT_SECONDS": 60.0,
    "BEAT_GIVE_UP_SECONDS": 300.0,
    "EPISODE_SWEEP_SECONDS": 30.0,
    "EXTRACTION_SWEEP_SECONDS": 2.0,
    "ENTITY_SWEEP_SECONDS": 30.0,
    "EXTRACTION_MAX_ATTEMPTS": 3,
    "EXTRACTION_BACKOFF_SECONDS": 2.0,
    "EXTRACTION_BACKOFF_MAX_SECONDS": 30.0,
    "EXTRACTION_LEASE_MARGIN_SECONDS": 30.0,
    "EXTRACTION_REDISPATCH_SECONDS": 15.0,
    "EXTRACTION_ECHO_SIMILARITY": 0.9,
    "EXTRACTION_MAX_INPUT_CHARS": 60000,
    "EMBED_THREADS": 1,
    "EMBED_AHEAD_THREADS": 2,
    "QUERY_EMBED_CACHE": 512,
    "MCP_CALL_TIMEOUT_SECONDS": 30.0,
    "MCP_STATELESS": True,
    "MCP_ALLOWED_HOSTS": [],
    "MCP_ALLOWED_ORIGINS": [],
    "MEMORY_ADMIN_API_KEY": "",
    "OTEL_SDK_DISABLED": False,
}


def test_an_unset_variable_reads_as_the_default_the_code_had_before(monkeypatch):
    for name in config.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert {name: config.get(name) for name in FORMER_DEFAULTS} == FORMER_DEFAULTS
    # Every extraction knob's documented default is the declared one (extraction/conf.py reads through it).
    from extraction import conf

    assert {name: config.get(name) for name in conf.DEFAULTS} == conf.DEFAULTS


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("WEB_WORKERS", " 3 ", 3),
        ("DEBUG", "Yes", True),
        ("DEBUG", "off", False),
        ("LOG_FORMAT", "TEXT", "text"),
        ("LOG_LEVEL", "info", "INFO"),
        ("ALLOWED_HOSTS", "a.example, b.example,", ["a.example", "b.example"]),
        ("GIL_SWITCH_INTERVAL_MS", "0.5", 0.5),
        ("LLM_PRICES", '{"m": [1, 2]}', {"m": [1, 2]}),
        ("WEB_THREADS", "", 4),  # empty is unset
    ],
)
def test_a_well_formed_value_is_parsed_to_its_type(monkeypatch, name, raw, value):
    monkeypatch.setenv(name, raw)
    assert config.get(name) == value


@pytest.mark.parametrize(
    ("name", "raw", "allowed"),
    [
        ("WEB_WORKERS", "abc", "a whole number from 1 to 256"),
        ("WEB_WORKERS", "0", "a whole number from 1 to 256"),
        ("WEB_WORKERS", "１２８", "a whole number from 1 to 256"),
        ("WORKER_CONCURRENCY", "2.5", "a whole number, 1 or more"),
        ("GIL_SWITCH_INTERVAL_MS", "nan", "a number from 0.01 to 100"),
        ("ENTITY_NEIGHBOUR_MERGE", "1.5", "a number from 0 to 1"),
        ("DEBUG", "maybe", "1/true/yes/on or 0/false/no/off"),
        ("EMBEDDER", "gpt", "one of onnx, torch, local, static, openai"),
        ("LLM_PRICES", "[1, 2]", "a JSON object"),
    ],
)
def test_a_malformed_value_is_refused_naming_the_variable_and_what_it_allows(monkeypatch, name, raw, allowed):
    monkeypatch.setenv(name, raw)
    with pytest.raises(config.ConfigError) as caught:
        config.get(name)
    assert str(caught.value) == f"{name}={raw!r}: {allowed}."


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in config.VARIABLES or k == "DATABASE_URL"}
    return subprocess.run(
        argv, cwd=ROOT, env={**clean, "PYTHONPATH": str(ROOT), **env}, capture_output=True, text=True, timeout=120
    )


def test_manage_py_with_a_malformed_variable_stops_with_one_line_per_bad_variable():
    result = run([sys.executable, "manage.py", "check"], WEB_WORKERS="abc", DEBUG="maybe", WEB_THREADS="8")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "memory-admin: configuration error: DEBUG='maybe': 1/true/yes/on or 0/false/no/off.",
        "memory-admin: configuration error: WEB_WORKERS='abc': a whole number from 1 to 256.",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "gunicorn", "-c", "python:memory_admin.gunicorn_conf", "--check-config"],
        [sys.executable, "-m", "celery", "-A", "memory_admin", "inspect", "--help"],
    ],
    ids=["gunicorn", "celery"],
)
def test_the_web_server_and_the_worker_refuse_a_malformed_variable_in_one_line(argv):
    result = run(argv, WEB_WORKERS="abc")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "memory-admin: configuration error: WEB_WORKERS='abc': a whole number from 1 to 256." in result.stderr
    assert run(argv).returncode == 0, "the same command starts with the variable unset"
