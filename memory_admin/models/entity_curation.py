"""Curating the knowledge graph (SPEC §12): the record of each merge of two entities (what moved, so
it can be undone exactly) and the review items of merges resolution was unsure of."""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from memory_admin.models.entities import Entity
from memory_admin.models.tenancy import MemoryUser, Tenant


class EntityMerge(models.Model):
    """`loser` merged into `survivor`: the mentions and relations that moved and the names the
    survivor gained. The loser is kept (`Entity.merged_into`); undoing moves everything back."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    survivor = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="merges_in")
    loser = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="merges_out")
    automatic = models.BooleanField(default=False)
    similarity = models.FloatField(null=True, blank=True)
    judge = models.CharField(max_length=100, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    actor = models.CharField(max_length=200)
    # What moved from the loser to the survivor (FactEntity ids; [relation id, "subject"|"object"]).
    mention_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    relation_sides = models.JSONField(default=list, blank=True)
    # Facts being linked when resolution merged (their mention is made after): moved back on undo.
    pending_fact_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    alias_keys_added = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    name_before = models.CharField(max_length=200)
    type_before = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["survivor", "-created_at"], name="entity_merge_survivor")]
        constraints = [
            models.CheckConstraint(condition=~Q(survivor=models.F("loser")), name="entity_merge_two_entities"),
            models.UniqueConstraint(
                fields=["loser"], condition=Q(undone_at__isnull=True), name="entity_merge_one_live"
            ),
        ]

    def __str__(self) -> str:
        return f"merge {self.loser_id} into {self.survivor_id}"


class EntityMergeReview(models.Model):
    """Resolution was unsure whether `entity` (made for a new mention) is `candidate`: an operator
    decides (accept: merge it into the candidate; reject: keep them apart)."""

    class Status(models.TextChoices):
        OPEN = "open"
        ACCEPTED = "accepted"
        REJECTED = "rejected"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="merge_reviews")
    candidate = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="+")
    similarity = models.FloatField()
    judge = models.CharField(max_length=100, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    merge = models.ForeignKey(EntityMerge, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "status", "created_at"], name="entity_review_queue")]
        constraints = [
            models.UniqueConstraint(fields=["entity", "candidate"], name="entity_review_one_per_pair"),
            models.CheckConstraint(condition=~Q(entity=models.F("candidate")), name="entity_review_two_entities"),
            models.CheckConstraint(
                condition=Q(status="open") | Q(resolved_at__isnull=False), name="entity_review_closed_has_time"
            ),
        ]

    def __str__(self) -> str:
        return f"entity merge review {self.id} ({self.status})"
