"""The project's modules import each other without a cycle.

The graph is built with `ast` from each module's top-level imports (what runs at import; imports inside
functions and under `if TYPE_CHECKING:` are left out). Importing `a.b.c` runs `a` and `a.b` first, so a
package's `__init__` that re-exports counts as an import of what it names. A cycle makes import order
matter: whichever module is imported first sees the other half-initialised."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory_admin", "extraction")


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if "migrations" in parts:
                continue
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: dict) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package, one level up per extra dot
        parts = module.split(".")[: None if is_package else -1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            todo.extend(node.orelse)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            todo.extend(node.body)
            todo.extend(getattr(node, "orelse", []))
            todo.extend(getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return found


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules its top-level imports run."""
    known = _modules(root, packages)

    def owner(name: str) -> str | None:  # `from pkg import name` where name is not a module: pkg
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        edges: set[str] = set()
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            for name in _imported(node, module, path.name == "__init__.py", known):
                target = owner(name) if name.split(".")[0] in packages else None
                if target is None:
                    continue
                parts = target.split(".")
                edges.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
        graph[module] = {t for t in edges if t in known and t != module and not module.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_project_has_no_import_cycle():
    graph = import_graph(ROOT)
    assert "memory_admin.services.guard" in graph["memory_admin.services.facts.write"]  # the graph is read
    assert cycles(graph) == []


def test_a_cycle_through_a_re_exporting_package_is_found(tmp_path):
    package = tmp_path / "memory_admin"
    (package / "services").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "services" / "__init__.py").write_text("from memory_admin.services.write import save\n")
    (package / "services" / "write.py").write_text(
        "from memory_admin import scoring\n\ndef save():\n    from memory_admin import later  # not counted\n"
    )
    (package / "scoring.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from memory_admin import later\n"
        "try:\n    from .services import save\nexcept ImportError:\n    save = None\n"
    )
    (package / "later.py").write_text("import memory_admin.scoring\n")
    graph = import_graph(tmp_path, ("memory_admin",))
    assert cycles(graph) == [["memory_admin.scoring", "memory_admin.services", "memory_admin.services.write"]]


def test_the_moved_paths_are_gone_and_nothing_imports_them():
    """Issue 30 moved search and the context block to `memory_admin.retrieval`, the driver helpers to
    `memory_admin.db` and the embedding engines to `memory_admin.embedding`; the re-exports left at the old
    paths are gone, and no module of the project, its tests or its benchmarks imports those paths."""
    old = {
        "memory_admin.selectors.search",
        "memory_admin.services.context",
        "memory_admin.db_cursors",
        "memory_admin.embeddings",
        "memory_admin.onnx_model",
    }
    assert not [name for name in old if (ROOT / (name.replace(".", "/") + ".py")).exists()]
    found = []
    for folder in ("memory_admin", "extraction", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
                continue  # a local virtualenv (bench/.venv-mem0), caches: not the project's code
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
                else:
                    continue
                if names & old and not _inside_an_import_fallback(node, path):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def _inside_an_import_fallback(node: ast.AST, path: Path) -> bool:
    """An `except ImportError:` branch that loads the old path from a checkout made before the move (a
    benchmark comparing before and after)."""
    tree = ast.parse(path.read_text(), str(path))
    return any(
        isinstance(handler, ast.ExceptHandler)
        and ast.unparse(handler.type or ast.Name("")) == "ImportError"
        and any(inner is node or ast.dump(inner) == ast.dump(node) for inner in ast.walk(handler))
        for handler in ast.walk(tree)
    )


# Issue 30: a project import inside a function only where a framework's load order or a cycle forces it.
MAX_INNER_IMPORTS = 20


def inner_project_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[tuple[Path, int, str]]:
    """(file, line, the line and the one above) of every import of a project module inside a function."""
    found = {}
    for path in _modules(root, packages).values():
        source = path.read_text()
        lines = source.splitlines()
        for function in ast.walk(ast.parse(source)):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                if any(name.split(".")[0] in packages for name in names):
                    said = " ".join(lines[max(0, node.lineno - 2) : node.lineno])
                    found[(path, node.lineno)] = said  # a nested function's import is seen once
    return [(path, line, said) for (path, line), said in sorted(found.items())]


def test_imports_inside_functions_are_few_and_each_says_why():
    inner = inner_project_imports(ROOT)
    listed = "\n".join(f"{path.relative_to(ROOT)}:{line}" for path, line, _ in inner)
    assert len(inner) <= MAX_INNER_IMPORTS, f"{len(inner)} project imports inside functions:\n{listed}"
    unexplained = [f"{path.relative_to(ROOT)}:{line}" for path, line, said in inner if "#" not in said]
    assert not unexplained, f"an import inside a function says why (a comment on it or above): {unexplained}"


def test_the_inner_import_count_sees_an_added_one(tmp_path):
    package = tmp_path / "memory_admin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from memory_admin import b\n    return b\n")
    (package / "b.py").write_text(
        "import os\n\n\ndef g():\n    # Inside: a imports this module.\n    import memory_admin.a\n"
    )
    inner = inner_project_imports(tmp_path, ("memory_admin",))
    assert [(path.name, line) for path, line, _ in inner] == [("a.py", 2), ("b.py", 6)]
    assert ["#" in said for _, _, said in inner] == [False, True]


MAX_MODULE_LINES = 800  # issue 30: a module longer than this is split by topic into a package


def test_no_module_of_the_project_is_over_800_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules(ROOT, PACKAGES).values()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by topic): {long}"
