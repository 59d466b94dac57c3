"""Model instances from raw rows (memory_admin.db.hydrate) are the ORM's own instances: the same values,
deferred columns and state, built by Model.from_db (so init signals run), and they save as updates."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.signals import post_init

from memory_admin.db.hydrate import hydrate
from memory_admin.models import Fact

pytestmark = pytest.mark.django_db


def write(api, user, content):
    r = api.post(f"users/{user}/facts", {"content": content, "source": "user_stated"})
    assert r.status_code in (200, 201), r.content
    return r.json()["fact"]["id"]


def test_facts_from_raw_rows_are_the_orms_instances(api):
    fact_id = write(api, "lea", "Lea grows tomatoes on her balcony")
    qs = Fact.objects.filter(pk=fact_id).defer("embedding", "embedding_next", "search_vector")
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        row = cursor.fetchone()
    orm = qs.get()
    # The columns in any order: a statement need not select them in the model's order.
    for order in (list(range(len(names))), list(reversed(range(len(names))))):
        built = hydrate(Fact, [names[i] for i in order], [[row[i] for i in order]])[0]
        deferred = {"embedding", "embedding_next", "search_vector"}
        assert built.get_deferred_fields() == orm.get_deferred_fields() == deferred
        assert {n: getattr(built, n) for n in names} == {n: getattr(orm, n) for n in names}
        assert isinstance(built.metadata, dict) and (built._state.adding, built._state.db) == (False, "default")
    assert built.memory_user.external_id == "lea"  # relations load as usual
    assert len(built.embedding) == 384  # a deferred column loads on access
    built.importance = 0.9
    built.save(update_fields=["importance"])
    assert Fact.objects.get(pk=fact_id).importance == 0.9 and Fact.objects.count() == 1


def test_a_receiver_of_init_signals_sees_every_hydrated_instance(api):
    fact_id = write(api, "ned", "Ned bakes sourdough bread")
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.content)

    post_init.connect(receiver, sender=Fact)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT content, id FROM memory_admin_fact WHERE id = %s", [fact_id])
            built = hydrate(Fact, ["content", "id"], cursor.fetchall())
    finally:
        post_init.disconnect(receiver, sender=Fact)
    assert seen == ["Ned bakes sourdough bread"] and str(built[0].pk) == fact_id


def test_a_column_the_model_does_not_have_is_refused():
    with pytest.raises(ValueError, match="no column nope"):
        hydrate(Fact, ["id", "nope"], [])
