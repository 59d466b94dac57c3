"""`agent_stated`: what an agent deliberately saves (the API's default source, prior 0.8)."""

from django.db import migrations, models

SOURCES = [
    "user_stated",
    "tool_verified",
    "agent_stated",
    "agent_inferred",
    "recalled",
    "external",
    "notebook",
    "user_correction",
]


class Migration(migrations.Migration):
    dependencies = [
        ("memory_admin", "0023_entity_drawing"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="fact", name="fact_source_valid"),
        migrations.AlterField(
            model_name="fact",
            name="source",
            field=models.CharField(
                choices=[(s, s.replace("_", " ").title()) for s in SOURCES],
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="fact",
            constraint=models.CheckConstraint(condition=models.Q(source__in=SOURCES), name="fact_source_valid"),
        ),
    ]
