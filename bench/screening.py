"""Screening cost per shape (tests/security/shapes.py): µs of CPU per KB of text, medians, for each screen
a write runs (the poisoning guard, the secret/PII scan, the normalised form) and their sum.

    PYTHONPATH=. python bench/screening.py                      # sizes 8 KB and 1 MB, every shape
    PYTHONPATH=. python bench/screening.py --sizes 4096,16384   # other sizes
    PYTHONPATH=. python bench/screening.py --tree /tmp/before   # the screens of another checkout
    PYTHONPATH=. python bench/screening.py --only prefix/       # shapes whose name contains this

`--tree` imports `memory_admin` from another checkout (e.g. `git archive <commit> | tar -x -C /tmp/before`)
while the shapes come from this one, so before and after read the same texts. A shape whose screens take
longer than --cap seconds at one size is not run at the larger sizes (a quadratic shape at 1 MB takes
hours); it is printed as `>cap`. Linear screening shows as µs/KB that stays flat as the size grows.
No database is touched.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="8192,1048576")
    parser.add_argument("--tree", default="")
    parser.add_argument("--only", default="")
    parser.add_argument("--cap", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    sys.path.insert(1, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    os.environ.setdefault("DATABASE_URL", "postgresql://nobody:nothing@127.0.0.1:1/none")  # parsed, never used
    import django

    django.setup()
    from django.conf import settings

    settings.SCREENING_BUDGET_SECONDS = 10**6  # the cost is what is measured here, not the refusal
    import memory_admin
    from memory_admin import textnorm
    from memory_admin.services import guard, pii

    print(f"# screens of {Path(memory_admin.__file__).resolve().parent.parent}")

    from tests.security.shapes import shapes

    block_all = {"email": "block", "phone": "block", "national_id": "block"}

    def run_guard(text: str) -> None:
        guard.clear_cache()  # every round evaluates the text afresh
        if guard.verdict(text).flagged:
            guard.screening._first_flagged_line(text)  # noqa: SLF001 - what a refused notebook or skill pays

    screens = {
        "guard": run_guard,
        "pii": lambda text: pii.scan(text, block_all),
        "textnorm": lambda text: (textnorm.screen_form(text), textnorm.fold(text)),
    }
    sizes = [int(s) for s in args.sizes.split(",")]
    header = f"{'shape':<34}" + "".join(f"{name + '@' + _kb(size):>16}" for size in sizes for name in [*screens, "all"])
    print("µs of CPU per KB (median of rounds)")
    print(header)
    worst: dict[int, tuple[float, str]] = {}
    for shape in shapes():
        if args.only and args.only not in shape.name:
            continue
        cells = []
        capped: set[str] = set()
        for size in sizes:
            text = shape.text(size)
            total = 0.0
            for name, fn in screens.items():
                if name in capped:
                    cells.append(f"{'>cap':>16}")
                    total = float("inf")
                    continue
                seconds = _median_cpu(fn, text, args.rounds, args.cap)
                if seconds > args.cap:
                    capped.add(name)
                total += seconds
                cells.append(f"{seconds * 1e6 / (size / 1024):>16.1f}")
            cells.append(f"{total * 1e6 / (size / 1024):>16.1f}")
            if total > worst.get(size, (0.0, ""))[0]:
                worst[size] = (total, shape.name)
        print(f"{shape.name:<34}" + "".join(cells), flush=True)
    for size, (seconds, name) in worst.items():
        print(f"worst shape at {_kb(size)}: {name}, {seconds:.3f} s of CPU for all screens")


def _kb(size: int) -> str:
    return f"{size // (1024 * 1024)}MB" if size >= 1024 * 1024 else f"{size // 1024}KB"


def _median_cpu(fn, text: str, rounds: int, cap: float) -> float:
    """Median CPU seconds of `fn(text)`; a screen refused by the screening budget counts as infinite."""
    from memory_admin.errors import DomainError

    times = []
    for _ in range(rounds):
        started = time.process_time()
        try:
            fn(text)
        except DomainError as exc:  # the screening budget (after) or nothing (before)
            print(f"# {exc.code} after {time.process_time() - started:.1f} s", file=sys.stderr)
            return float("inf")
        times.append(time.process_time() - started)
        if times[-1] > cap / 3:
            break
    return statistics.median(times)


if __name__ == "__main__":
    main()
