"""Broker deliveries per second: one real Celery worker, N empty tasks, the product's own broker settings.

    python bench/broker.py                     # the default (embedded Postgres) broker, 3 runs
    python bench/broker.py --tasks 2000 --runs 5 --concurrency 2
    CELERY_BROKER_URL=redis://127.0.0.1:6379/0 python bench/broker.py

Each run: a fresh database `bench_broker`; N empty tasks published while no worker runs (so the
publisher's speed is not what is measured); then `celery worker` starts (the product's app and
settings, prefork pool unless --pool, --concurrency as given) and each task appends the time it ran to a file.
Deliveries/s = (N - 1) / (last run - first run): the steady rate at which the broker hands one worker
work, without the worker's start-up. The drain time (worker ready → last task run) is printed too.
Prints one line per run and the median.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _harness import PYTHON, ROOT, database_url, django_env  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")

# The worker imports this module (`celery -A bench.broker`): the product's app plus one empty task.
from memory_admin.celery import app  # noqa: E402

STAMPS = os.environ.get("BENCH_BROKER_STAMPS", "")


@app.task(name="bench.noop", ignore_result=True)
def noop() -> None:
    if STAMPS:
        with open(STAMPS, "a") as out:
            out.write(f"{time.time()}\n")


def one_run(n: int, concurrency: int, queue: str | None, pool: str) -> tuple[float, float]:
    url = os.environ.get("BENCH_BROKER_DATABASE_URL") or database_url("bench_broker", fresh=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    stamps = tmp / "stamps"
    env = django_env(
        url,
        BENCH_BROKER_STAMPS=str(stamps),
        MEMORY_ADMIN_DATA_DIR=str(tmp),
        EMBEDDER="openai",  # no model to load: the worker's start-up is not measured anyway
        WORKER_HEARTBEAT_SECONDS="0",
        LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    env.pop("TEST_DB_NAME", None)
    publish = (
        "import django, os, sys; django.setup()\n"
        "from bench.broker import app\n"
        "n, queue = int(sys.argv[1]), sys.argv[2] or None\n"
        "with app.producer_or_acquire() as producer:\n"
        "    for _ in range(n):\n"
        "        app.send_task('bench.noop', producer=producer, queue=queue)\n"
    )
    subprocess.run([PYTHON, "-c", publish, str(n), queue or ""], cwd=ROOT, env=env, check=True)
    log = open(tmp / "worker.log", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "bench.broker",
            "worker",
            "--loglevel=WARNING",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started = time.time()
    try:
        deadline = time.monotonic() + 60 + n  # the stock transport manages ~2 a second
        while time.monotonic() < deadline:
            done = stamps.read_text().split() if stamps.exists() else []
            if len(done) >= n:
                break
            if worker.poll() is not None:
                raise RuntimeError("worker died:\n" + (tmp / "worker.log").read_text()[-3000:])
            time.sleep(0.2)
        else:
            raise RuntimeError(f"only {len(done)} of {n} tasks ran in time")
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        log.close()
    times = sorted(float(t) for t in done)
    rate = (len(times) - 1) / (times[-1] - times[0])
    return rate, times[-1] - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--queue", default=None, help="publish to this queue (default: the task's route)")
    parser.add_argument("--pool", default="prefork", help="the worker's pool (prefork as deployed; solo: no IPC)")
    args = parser.parse_args()
    import django
    from django.conf import settings

    django.setup()
    broker = settings.CELERY_BROKER_URL.split("://")[0]
    rates, drains = [], []
    for run in range(args.runs):
        rate, drain = one_run(args.tasks, args.concurrency, args.queue, args.pool)
        rates.append(rate)
        drains.append(drain)
        print(f"run {run + 1}: {rate:8.1f} deliveries/s, drained {drain:6.1f} s after the worker start")
    print(
        f"broker {broker}, 1 worker, {args.pool} pool, concurrency {args.concurrency}, {args.tasks} empty tasks: "
        f"median {statistics.median(rates):.1f} deliveries/s, median drain {statistics.median(drains):.1f} s "
        "(worker start included)"
    )


if __name__ == "__main__":
    main()
