"""Request ids (memory_admin/requestlog.py): the message remembers the request that posted it, the batch
the requests whose messages it holds. Two small partial indexes let /metrics read the quarantine queue
and the open batches at every scrape without reading every fact or every done batch. Built
CONCURRENTLY: writes go on."""

import django.contrib.postgres.fields
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memory_admin", "0009_usage_day"),
    ]

    operations = [
        migrations.AddField(
            model_name="extractionbatch",
            name="request_ids",
            field=django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=64), blank=True,
                                                            default=list, size=None),
        ),
        migrations.AddField(
            model_name="message",
            name="request_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        AddIndexConcurrently(
            model_name="fact",
            index=models.Index(condition=models.Q(("status", "quarantined")), fields=["tenant", "created_at"],
                               name="fact_quarantined"),
        ),
        AddIndexConcurrently(
            model_name="extractionbatch",
            index=models.Index(condition=models.Q(("status__in", ["pending", "running"])), fields=["status", "created_at"],
                               name="batch_open"),
        ),
    ]
