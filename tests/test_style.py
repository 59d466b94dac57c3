"""The house checks run with the suite, so CI fails on them: ruff's lint rules (pyproject.toml: the
complexity bound, typed service and selector parameters, the security rules) and `ruff format`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_tree_passes_the_lint_rules():
    result = ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_tree_is_formatted():
    result = ruff("format", "--no-cache", "--check", ".")
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout[-4000:] + result.stderr[-2000:]


def test_the_complexity_bound_is_enforced():
    """The bound is part of the checks above, not a setting that can silently go missing."""
    config = (ROOT / "pyproject.toml").read_text()
    assert '"C90"' in config and "max-complexity = 10" in config
