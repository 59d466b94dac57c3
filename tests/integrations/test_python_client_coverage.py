"""Drift: every operation of the agent API has a method in the Python client, and every method the client
has names an operation the API serves. Reads the schema the API serves (`/api/v1/openapi.json`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from memory_admin_client import OPERATIONS

from tests.integrations.conftest import CLIENT_SRC

PACKAGE = CLIENT_SRC / "memory_admin_client"


def _served(client) -> dict[str, tuple[str, str]]:
    schema = client.get("/api/v1/openapi.json").json()
    return {
        op["operationId"]: (method.upper(), path.removeprefix("/api/v1"))
        for path, item in schema["paths"].items()
        for method, op in item.items()
    }


def _called(package: Path) -> set[str]:
    """The operations the client's methods send: the first argument of every `Call(...)` in the
    distribution (the client itself, the LangGraph store and the checkpointer)."""
    return {
        node.args[0].value
        for source in package.glob("*.py")
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Call"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.django_db
def test_every_operation_of_the_api_has_a_client_method(client):
    served = _served(client)
    assert len(served) >= 44
    unmapped = sorted(set(served) - set(OPERATIONS))
    assert not unmapped, f"operations with no client method (add them to _calls.py): {unmapped}"
    unsent = sorted(set(OPERATIONS) - _called(PACKAGE))
    assert not unsent, f"operations the client names but no method sends: {unsent}"
    drifted = {
        name: (OPERATIONS[name], served.get(name)) for name in OPERATIONS if OPERATIONS[name] != served.get(name)
    }
    assert not drifted, drifted
