"""The secret/PII scan's cost by text size (medians, ms): what every write pays before anything else.

    PYTHONPATH=. python bench/pii_scan.py

Text: the README and SPEC repeated (prose, code, numbers, a few e-mail-like and prefix-like strings),
and Cyrillic prose (every character goes through the look-alike fold). No database is touched.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
os.environ.setdefault("DATABASE_URL", "postgresql://nobody:nothing@127.0.0.1:1/none")  # parsed, never used
django.setup()

from memory_admin.services.pii import find  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def median_ms(text: str, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        find(text)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    prose = (ROOT / "README.md").read_text()
    spec = ROOT.parent.parent / "shared" / "SPEC.md"
    if spec.exists():
        prose += spec.read_text()
    cyrillic = "Привет, команда: заметки о встрече в понедельник, всё по плану. "
    print(f"{'size':>9} {'mixed ms':>10} {'cyrillic ms':>12}")
    for size in (200, 1_000, 8_000, 64_000, 1_000_000):
        rounds = 3 if size > 100_000 else 20
        mixed = (prose * (size // len(prose) + 1))[:size]
        cyr = (cyrillic * (size // len(cyrillic) + 1))[:size]
        print(f"{size:>9} {median_ms(mixed, rounds):>10.2f} {median_ms(cyr, rounds):>12.2f}")


if __name__ == "__main__":
    main()
