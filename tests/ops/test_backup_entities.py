"""A backup carries the knowledge graph (SPEC §12, §14): entities, mentions and relations, closed ones
with their times and what closed them, come back from a restore with the rest (real pg_dump/pg_restore)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection

from memory_admin.backup import Db, drop_database, restore_into_new_database, verify_restored
from memory_admin.models import MemoryUser, Relation
from memory_admin.selectors.access import Principal
from memory_admin.services.entities import EntityMention, RelationDraft, fact_entities_link
from memory_admin.services.facts import fact_forget, fact_write
from memory_admin.services.tenants import tenant_create
from tests.ops.test_backup import databases_like, opened_backup_of

pytestmark = pytest.mark.slow


def test_the_graph_survives_backup_and_restore(transactional_db, tmp_path):
    tenant = tenant_create(slug=f"graph-{uuid.uuid4().hex[:6]}")
    system = Principal.system(tenant.pk)
    user = MemoryUser.objects.create(tenant=tenant, external_id="dana")
    fact = fact_write(
        principal=system,
        memory_user=user,
        content="Dana Scully works at Acme Robotics.",
        source="user_stated",
        observed_at=datetime(2025, 1, 1, tzinfo=UTC),
    ).fact
    fact_entities_link(
        principal=system,
        fact=fact,
        mentions=[
            EntityMention("Dana Scully", "person", "subject"),
            EntityMention("Acme Robotics", "company", "object"),
        ],
        relations=[RelationDraft("Dana Scully", "works_at", "Acme Robotics")],
    )
    fact_forget(principal=system, fact_id=fact.pk)
    closed = Relation.objects.get(source_fact=fact)
    test_db = Db.from_django(connection.settings_dict)
    name = f"ma_graph_{uuid.uuid4().hex[:8]}"
    try:
        with opened_backup_of(test_db, tmp_path) as backup:
            counts = backup.manifest["row_counts"]
            assert counts["memory_admin_entity"] >= 2 and counts["memory_admin_relation"] >= 1
            restored = restore_into_new_database(backup, test_db, name)
            verify_restored(backup, restored)  # row counts of every table, the graph's included
        with restored.connect() as conn:
            row = conn.execute(
                "SELECT s.name, r.type, o.name, r.valid_from, r.valid_to, r.closed_reason "
                "FROM memory_admin_relation r JOIN memory_admin_entity s ON s.id = r.subject_id "
                "JOIN memory_admin_entity o ON o.id = r.object_id WHERE r.id = %s",
                [closed.pk],
            ).fetchone()
            mentions = conn.execute(
                "SELECT count(*) FROM memory_admin_factentity WHERE fact_id = %s", [fact.pk]
            ).fetchone()[0]
        assert row == ("Dana Scully", "works_at", "Acme Robotics", closed.valid_from, closed.valid_to, "forgotten")
        assert mentions == 2
    finally:
        for leftover in databases_like(test_db, name):
            drop_database(test_db, leftover)
