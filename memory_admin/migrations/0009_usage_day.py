"""The usage_day table: reads (search, context, fact) per tenant and day, for the overview's usage chart."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory_admin', '0008_embedding_shadow_column'),
    ]

    operations = [
        migrations.CreateModel(
            name='UsageDay',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField()),
                ('kind', models.CharField(choices=[('search', 'Search'), ('context', 'Context'), ('fact', 'Fact')], max_length=10)),
                ('count', models.BigIntegerField(default=0)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='memory_admin.tenant')),
            ],
            options={
                'db_table': 'memory_admin_usage_day',
                'constraints': [models.UniqueConstraint(fields=('tenant', 'day', 'kind'), name='usage_day_unique')],
            },
        ),
    ]
