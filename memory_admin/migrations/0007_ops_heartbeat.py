"""The ops_heartbeat table: when the extraction sweep and a worker last ran (health readiness)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("memory_admin", "0006_throttle_window"),
    ]

    operations = [
        migrations.CreateModel(
            name="Heartbeat",
            fields=[
                ("name", models.CharField(max_length=40, primary_key=True, serialize=False)),
                ("last_at", models.DateTimeField()),
                ("detail", models.CharField(blank=True, default="", max_length=200)),
            ],
            options={"db_table": "ops_heartbeat"},
        ),
    ]
