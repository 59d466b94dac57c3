"""What a LangGraph agent keeps here besides its memory: the items of its store (keyed values, searched by
meaning) and the checkpoints of its threads (execution state it resumes from), each owned by a memory user.

Store items are not facts: a `put` under a key is read back by that key whatever else holds the same text,
so they skip the fact write path's dedup, confidence gate, contradiction check and cap (they keep its
secret/PII scan and its guard against instructions). Checkpoints are opaque serialised state: the server
orders, filters and prunes them by id and metadata, never reads inside.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from pgvector.django import VectorField

from memory_admin.models.memory import EMBEDDING_DIM, Thread
from memory_admin.models.tenancy import MemoryUser, Tenant

NAMESPACE_LABEL_MAX = 200


class StoreItem(models.Model):
    """One value of a LangGraph store under (namespace, key), owned by the memory user the client's
    namespace mapping names. Expires at `expires_at` (a TTL in minutes, refreshed on read if asked)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="store_items")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="store_items")
    # Labels compare byte-wise ("C"), as LangGraph's namespaces (Python tuples of str) sort.
    namespace = ArrayField(models.CharField(max_length=NAMESPACE_LABEL_MAX, db_collation="C"))
    key = models.CharField(max_length=500, db_collation="C")
    value = models.JSONField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    ttl_minutes = models.FloatField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "memory_user", "namespace", "key"], name="store_item_unique_key"),
        ]
        indexes = [
            models.Index(fields=["tenant", "namespace"], name="store_item_namespace"),
            models.Index(fields=["expires_at"], name="store_item_expiry", condition=models.Q(expires_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{'/'.join(self.namespace)}:{self.key}"


class StoreVector(models.Model):
    """The embedding of one indexed field (`path`, LangGraph's path syntax) of a store item; a search
    scores an item by its best field, as LangGraph's own stores do."""

    item = models.ForeignKey(StoreItem, on_delete=models.CASCADE, related_name="vectors")
    path = models.CharField(max_length=200)
    embedding = VectorField(dimensions=EMBEDDING_DIM)

    def __str__(self) -> str:
        return f"{self.item_id}:{self.path}"


class Checkpoint(models.Model):
    """A LangGraph checkpoint of a thread (in the namespace `checkpoint_ns`, "" for the root graph): the
    serde's (type, bytes) of the checkpoint and of its metadata, and the metadata as JSON for filtering."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="checkpoints")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="checkpoints")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="checkpoints")
    checkpoint_ns = models.CharField(max_length=500, blank=True, default="", db_collation="C")
    # uuid6 ids: their byte order is their time order (newest last).
    checkpoint_id = models.CharField(max_length=100, db_collation="C")
    parent_checkpoint_id = models.CharField(max_length=100, blank=True, default="")
    type = models.CharField(max_length=50)
    data = models.BinaryField()
    metadata = models.JSONField(default=dict)
    metadata_type = models.CharField(max_length=50)
    metadata_data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["thread", "checkpoint_ns", "checkpoint_id"], name="checkpoint_unique_id"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns}/{self.checkpoint_id}"


class CheckpointWrite(models.Model):
    """A pending write of a task against a checkpoint (`idx` < 0: LangGraph's special channels, which a
    later write of the same task replaces; others are kept as first written). Not a foreign key to the
    checkpoint: LangGraph may send a task's writes while the checkpoint's own put is still on its way."""

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="checkpoint_writes")
    checkpoint_ns = models.CharField(max_length=500, blank=True, default="", db_collation="C")
    checkpoint_id = models.CharField(max_length=100, db_collation="C")
    task_id = models.CharField(max_length=200, db_collation="C")
    task_path = models.CharField(max_length=500, blank=True, default="", db_collation="C")
    idx = models.IntegerField()
    channel = models.CharField(max_length=200)
    type = models.CharField(max_length=50)
    data = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="checkpoint_write_unique_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns}/{self.checkpoint_id}:{self.task_id}:{self.idx}"
