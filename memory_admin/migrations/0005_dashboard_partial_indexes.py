"""Small partial indexes for the dashboard at scale: contested active facts (every eviction candidate
is contested; the page no longer scores the whole table) and facts with a hard or soft TTL (the
lifecycle page's first two rules; almost no fact has one). Built CONCURRENTLY: writes go on."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memory_admin", "0004_retrieval_shared_search_gin"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="fact",
            index=models.Index(condition=models.Q(("contested", True), ("status", "active")), fields=["tenant"],
                               name="fact_contested_active"),
        ),
        AddIndexConcurrently(
            model_name="fact",
            index=models.Index(condition=models.Q(("hard_expires_at__isnull", False)),
                               fields=["tenant", "hard_expires_at"], name="fact_hard_ttl"),
        ),
        AddIndexConcurrently(
            model_name="fact",
            index=models.Index(condition=models.Q(("soft_expires_at__isnull", False)),
                               fields=["tenant", "soft_expires_at"], name="fact_soft_ttl"),
        ),
    ]
