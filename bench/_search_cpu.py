"""One tree's search on one user, in-process (run by drawing_lag.py with that tree on PYTHONPATH): p50 of
the server time excluding the embedding, p50 of this thread's CPU per search, and the mean CPU of the
Postgres backend per search (from /proc: CPU time holds steadier than wall time on a busy machine).

    DATABASE_URL=... PYTHONPATH=<tree> python bench/_search_cpu.py <user> <rounds> <questions.json>
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
import django  # noqa: E402

django.setup()
from django.db import connection  # noqa: E402

from memory_admin.models import MemoryUser  # noqa: E402
from memory_admin.retrieval import fact_search  # noqa: E402
from memory_admin.selectors.access import Principal  # noqa: E402


def backend_cpu_ms(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115, PTH123
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") * 1000


def main() -> None:
    user, rounds, questions = sys.argv[1], int(sys.argv[2]), json.loads(open(sys.argv[3]).read())  # noqa: SIM115, PTH123
    memory_user = MemoryUser.objects.get(external_id=user)
    principal = Principal.system(memory_user.tenant_id)
    for q in questions:  # warm: the query embeddings cached, the statement prepared
        fact_search(principal=principal, memory_user=memory_user, query=q, record=False)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    server, cpu = [], []
    pg_before = backend_cpu_ms(pid)
    for _ in range(rounds):
        for q in questions:
            started = time.thread_time()
            result = fact_search(principal=principal, memory_user=memory_user, query=q, record=False)
            cpu.append((time.thread_time() - started) * 1000)
            server.append(result.timings["server_ms_excluding_embed"])
    pg = (backend_cpu_ms(pid) - pg_before) / len(cpu)
    print(json.dumps({"server_ms": statistics.median(server), "cpu_ms": statistics.median(cpu), "pg_cpu_ms": pg}))


if __name__ == "__main__":
    main()
