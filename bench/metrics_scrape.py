"""How long the database part of a /metrics scrape takes (review queues, open batches, heartbeat ages),
read at every scrape by whichever web process answers. Reads only: run it on the 1M-fact database.

    MEMORY_ADMIN_DATA_DIR=/work/main/.data .venv/bin/python bench/metrics_scrape.py   # bench_scale
    .venv/bin/python bench/metrics_scrape.py --db memory_admin --runs 20
"""

from __future__ import annotations

import argparse
import statistics
import time

from _harness import database_url, setup_django


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="bench_scale")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    setup_django(database_url(args.db, fresh=False))
    from memory_admin.metrics import DatabaseCollector
    from memory_admin.models import Fact

    collector = DatabaseCollector()
    families = list(collector.collect())  # warm-up: connection, plans
    took = []
    for _ in range(args.runs):
        started = time.perf_counter()
        families = list(collector.collect())
        took.append(1000 * (time.perf_counter() - started))
    samples = sum(len(f.samples) for f in families)
    print(f"{args.db}: {Fact.objects.count()} facts; scrape-time gauges: {len(families)} families, {samples} samples")
    print(
        f"database part of a scrape: median {statistics.median(took):.1f} ms, max {max(took):.1f} ms "
        f"over {args.runs} runs"
    )


if __name__ == "__main__":
    main()
