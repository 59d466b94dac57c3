from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory_admin", "0019_entity_org_embedding_hnsw"),
    ]

    operations = [
        migrations.AddField(
            model_name="extractionbatch",
            name="dispatched_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
