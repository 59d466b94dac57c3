"""The served OpenAPI document is valid OpenAPI 3.1, and a mature generator (openapi-python-client, pinned in
the dev extra) turns it into a client that covers every operation and talks to the live server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator

pytestmark = pytest.mark.django_db(transaction=True)

VENV_BIN = Path(sys.executable).parent


def served_document(client) -> dict:
    answer = client.get("/api/v1/openapi.json")
    assert answer.status_code == 200
    return answer.json()


def test_the_served_document_is_valid_openapi_3_1(client):
    document = served_document(client)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in OpenAPIV31SpecValidator(document).iter_errors()
    ]
    assert errors == []
    # The user id's example is still there for the docs page, as a Parameter Object's single `example`.
    param = document["paths"]["/api/v1/users/{user_id}/facts"]["get"]["parameters"][0]
    assert param["name"] == "user_id" and param["example"] == "alice" and "examples" not in param


def test_the_validator_refuses_a_list_of_examples_on_a_parameter(client):
    """The shape the document used to have (13 path parameters with `"examples": ["alice"]`) is refused:
    the validation above can fail."""
    document = served_document(client)
    document["paths"]["/api/v1/users/{user_id}/facts"]["get"]["parameters"][0]["examples"] = ["alice"]
    assert list(OpenAPIV31SpecValidator(document).iter_errors())


def _generate(document: dict, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(document))
    out = tmp_path / "generated"
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # its ruff post-hook
    run = subprocess.run(
        [str(VENV_BIN / "openapi-python-client"), "generate", "--path", str(spec), "--output-path", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return run, out / "memory_admin_agent_api_client"


def test_openapi_python_client_generates_every_operation_without_a_warning(client, tmp_path):
    document = served_document(client)
    run, package = _generate(document, tmp_path)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Warning" not in output and "will not be generated" not in output, output
    operations = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    generated = {p.stem for p in (package / "api").rglob("*.py") if p.name != "__init__.py"}
    assert generated == operations
    compiled = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(package)], capture_output=True, text=True, timeout=120
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr


@pytest.mark.slow
def test_the_generated_client_writes_and_reads_a_fact_on_the_live_server(gunicorn_server, tenant, make_key, tmp_path):
    with urllib.request.urlopen(f"{gunicorn_server}/api/v1/openapi.json") as answer:
        document = json.load(answer)
    run, package = _generate(document, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    script = """
import sys
from memory_admin_agent_api_client import AuthenticatedClient
from memory_admin_agent_api_client.api.facts import get_fact, write_fact
from memory_admin_agent_api_client.api.retrieval import search
from memory_admin_agent_api_client.models import FactIn, FactInSource

api = AuthenticatedClient(base_url=sys.argv[1], token=sys.argv[2])
fact = FactIn(content="Dana prefers neovim", source=FactInSource.USER_STATED)
written = write_fact.sync(client=api, user_id="dana", body=fact)
print(written.outcome)
print(get_fact.sync(client=api, fact_id=written.fact.id).content)
print(search.sync(client=api, user_id="dana", q="which editor does Dana use?").hits[0].fact.content)
missing = get_fact.sync_detailed(client=api, fact_id="00000000-0000-4000-8000-000000000000")
print(missing.status_code.value, missing.parsed.code)
"""
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    call = subprocess.run(
        [sys.executable, "-c", script, gunicorn_server, make_key(tenant)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert call.returncode == 0, call.stderr[-3000:]
    assert call.stdout.splitlines() == [
        "created",
        "Dana prefers neovim",
        "Dana prefers neovim",
        "404 not_found",
    ]


def _path_value(param: dict) -> str:
    schema = param["schema"]
    if schema.get("format") == "uuid":
        return "00000000-0000-4000-8000-000000000000"
    if schema.get("type") == "integer":
        return "1"
    return schema.get("example", "x.md" if param["name"] == "path" else "someone")


def test_every_integer_query_parameter_takes_an_integer_as_query_text(client, tenant, make_key):
    """What the document promises of a query parameter holds on the wire, where every value is text: an
    integer parameter given its documented default (or minimum) is never refused as invalid."""
    document = served_document(client)
    key = make_key(tenant, admin=True)
    tried = []
    for path, item in document["paths"].items():
        for method, op in item.items():
            params = op.get("parameters", [])
            integers = [p for p in params if p["in"] == "query" and p["schema"].get("type") == "integer"]
            if method != "get" or not integers:
                continue
            url = path.format(**{p["name"]: _path_value(p) for p in params if p["in"] == "path"})
            required = {p["name"]: "tea" for p in params if p["in"] == "query" and p.get("required")}
            for param in integers:
                value = param["schema"].get("default", param["schema"].get("minimum", 1))
                answer = client.get(url, {**required, param["name"]: str(value)}, HTTP_AUTHORIZATION=f"Bearer {key}")
                tried.append(op["operationId"])
                assert answer.status_code != 422, (op["operationId"], param["name"], answer.json())
    assert "list_entity_reviews" in tried and len(tried) >= 8
