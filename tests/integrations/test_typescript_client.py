"""The TypeScript client (`clients/typescript`) against the real API under gunicorn on the test database: it
compiles with tsc, its types are the ones openapi-typescript makes from the served document, its README's
examples type-check (the Vercel AI SDK tool against the real `ai` and `zod` types), and its Node test
runner suite passes against the live server. `.ci/bootstrap` installs its devDependencies (`npm ci`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_admin.models import MemoryUser
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_write
from tests.integrations.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PACKAGE = ROOT / "clients" / "typescript"
BIN = PACKAGE / "node_modules" / ".bin"


def npx(tool: str, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    if not (BIN / tool).exists():
        pytest.fail(f"{BIN / tool} is missing: run .ci/bootstrap (npm ci in clients/typescript)")
    return subprocess.run(
        [str(BIN / tool), *args], cwd=PACKAGE, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def built() -> Path:
    """dist/ compiled from the source as it is now (git-ignored)."""
    shutil.rmtree(PACKAGE / "dist", ignore_errors=True)
    run = npx("tsc", "-p", "tsconfig.json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (PACKAGE / "dist" / "index.js").exists() and (PACKAGE / "dist" / "index.d.ts").exists()
    return PACKAGE / "dist"


def test_the_package_is_an_esm_package_with_types_and_no_runtime_dependency():
    manifest = json.loads((PACKAGE / "package.json").read_text())
    assert manifest["type"] == "module"
    assert manifest["exports"]["."] == {"types": "./dist/index.d.ts", "import": "./dist/index.js"}
    assert not manifest.get("dependencies") and not manifest.get("peerDependencies")
    lock = json.loads((PACKAGE / "package-lock.json").read_text())
    assert lock["packages"][""]["devDependencies"] == manifest["devDependencies"]
    # Nothing in the client's source imports a package: the platform's fetch is all it needs.
    imports = {
        spec for path in (PACKAGE / "src").glob("*.ts") for spec in re.findall(r'from\s+"([^"]+)"', path.read_text())
    }
    assert imports and all(spec.startswith("./") for spec in imports), imports


def test_both_clients_raise_the_same_named_error_for_every_stable_code():
    """A code the server answers is one error class in Python and the same-named class in TypeScript, so an
    agent moving between the clients catches the same thing (the write outcomes are WriteRefused's in TS)."""
    from memory_admin_client.errors import BY_CODE, BY_OUTCOME

    block = re.search(r"export const BY_CODE[^{]*\{(.*?)\n\};", (PACKAGE / "src" / "errors.ts").read_text(), re.S)
    typescript = dict(re.findall(r"^\s*([a-z_]+):\s*([A-Za-z]+),", block.group(1), re.M))
    python = {code: cls.__name__ for code, cls in BY_CODE.items() if code not in {*BY_OUTCOME, "write_refused"}}
    assert typescript == python


def test_the_types_are_what_openapi_typescript_makes_of_the_served_document(gunicorn_server, tmp_path):
    with urllib.request.urlopen(f"{gunicorn_server}/api/v1/openapi.json") as answer:
        (tmp_path / "openapi.json").write_bytes(answer.read())
    fresh = tmp_path / "schema.ts"
    run = npx("openapi-typescript", str(tmp_path / "openapi.json"), "--default-non-nullable", "false", "-o", str(fresh))
    assert run.returncode == 0, run.stdout + run.stderr
    committed = PACKAGE / "src" / "schema.ts"
    if os.environ.get("UPDATE_TS_SCHEMA") == "1":
        shutil.copyfile(fresh, committed)
    assert fresh.read_text() == committed.read_text(), (
        "clients/typescript/src/schema.ts differs from the served document: rerun this test with "
        "UPDATE_TS_SCHEMA=1 to regenerate it, then fix what tsc reports"
    )


def test_the_readme_examples_type_check_against_the_client_and_the_ai_sdk(built):
    readme = (PACKAGE / "README.md").read_text()
    blocks = re.findall(r"```ts\n(.*?)```", readme, flags=re.S)
    for example in ("quickstart.ts", "ai-sdk-tool.ts"):
        assert (PACKAGE / "examples" / example).read_text() in blocks, f"README.md does not show examples/{example}"
    assert len((PACKAGE / "examples" / "quickstart.ts").read_text().splitlines()) == 5
    run = npx("tsc", "-p", "tsconfig.examples.json")
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_misuse_of_the_client_does_not_type_check(built, tmp_path):
    """The example check can fail: a wrong field name is a compile error, not a silent `undefined`."""
    (tmp_path / "wrong.mts").write_text(
        'import { MemoryAdmin } from "memory-admin-client";\n'
        "const mem = new MemoryAdmin();\n"
        'await mem.context("dana", { budgetTokens: 800 });\n'
    )
    config = {
        "extends": str(PACKAGE / "tsconfig.examples.json"),
        "compilerOptions": {"rootDir": str(tmp_path), "paths": {"memory-admin-client": [str(built / "index.d.ts")]}},
        "include": [str(tmp_path / "wrong.mts")],
    }
    (tmp_path / "tsconfig.json").write_text(json.dumps(config))
    run = npx("tsc", "-p", str(tmp_path / "tsconfig.json"))
    assert run.returncode != 0 and "'budgetTokens' does not exist" in run.stdout, run.stdout + run.stderr


def _seed_graph(tenant) -> None:
    system = Principal.system(tenant.pk)
    owner, _ = MemoryUser.objects.get_or_create(tenant=tenant, external_id="graph-owner")
    past = datetime(2025, 1, 1, tzinfo=UTC)
    for content, mentions, relations in (
        (
            "Bob Smith works at Initech.",
            [EntityMention("Bob Smith", "person", "subject"), EntityMention("Initech", "company", "object")],
            [RelationDraft("Bob Smith", "works_at", "Initech")],
        ),
        ("Robert Smith lives in Lisbon.", [EntityMention("Robert Smith", "person", "subject")], []),
    ):
        written = fact_write(
            principal=system, memory_user=owner, content=content, source="user_stated", observed_at=past
        )
        fact_entities_link(principal=system, fact=written.fact, mentions=mentions, relations=relations)


def test_the_node_suite_passes_against_the_live_server(built, gunicorn_server, tenant, make_key):
    _seed_graph(tenant)
    env = {
        **os.environ,
        "MEMORY_ADMIN_URL": gunicorn_server,
        "MEMORY_ADMIN_API_KEY": make_key(tenant),
        "MEMORY_ADMIN_ADMIN_KEY": make_key(tenant, admin=True, agent="admin-agent"),
    }
    run = subprocess.run(["node", "--test", "test/"], cwd=PACKAGE, capture_output=True, text=True, timeout=600, env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    counts = {name: int(n) for name, n in re.findall(r"^# (tests|pass|fail|cancelled|skipped) (\d+)$", output, re.M)}
    declared = sum(
        len(re.findall(r"^test\(", path.read_text(), re.M)) for path in (PACKAGE / "test").glob("*.test.mjs")
    )
    assert declared > 0 and counts.get("pass") == declared, (counts, declared, output[-3000:])
    assert counts.get("fail") == 0 and counts.get("cancelled") == 0 and counts.get("skipped") == 0
