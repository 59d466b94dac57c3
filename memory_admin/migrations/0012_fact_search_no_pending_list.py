"""Search at scale stays fast as facts are read and written.

- fact_shared_search_gin without a pending list (fastupdate off). With it, rows inserted into the index
  (new shared facts, and every non-HOT update of one) wait in an unsorted list that every full-text
  search of the shared scope reads in full, until a VACUUM or 4 MB; autovacuum on a 1M-row table runs
  rarely, so the list stayed near its limit and the search branch cost 7-17 ms instead of 0.2 ms.
  The index is altered in place (no rebuild); what is pending now is merged once.
- memory_admin_fact with fillfactor 90: room on each page for the access-count UPDATEs (reads bump
  access_count and last_accessed_at, neither indexed) to be HOT updates, which add no entry to any of
  the table's indexes (the HNSW graph, the GIN indexes, the b-trees). Applies to pages written from now
  on; existing full pages gain room as VACUUM frees their dead rows.
"""

from django.contrib.postgres.indexes import GinIndex
from django.db import migrations
from django.db.models import Q


class Migration(migrations.Migration):

    dependencies = [
        ('memory_admin', '0011_imported_item'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name='fact', name='fact_shared_search_gin'),
                migrations.AddIndex(
                    model_name='fact',
                    index=GinIndex(condition=Q(('memory_user__isnull', True)), fastupdate=False,
                                   fields=['search_vector'], name='fact_shared_search_gin'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "ALTER INDEX fact_shared_search_gin SET (fastupdate = off);"
                    " SELECT gin_clean_pending_list('fact_shared_search_gin'::regclass);",
                    reverse_sql="ALTER INDEX fact_shared_search_gin RESET (fastupdate);",
                ),
            ],
        ),
        migrations.RunSQL(
            "ALTER TABLE memory_admin_fact SET (fillfactor = 90);",
            reverse_sql="ALTER TABLE memory_admin_fact RESET (fillfactor);",
        ),
    ]
