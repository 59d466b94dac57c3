"""The knowledge-graph layer (SPEC §12): entities, the facts that mention them, and the relations
between them. Relations are never deleted: a correction closes them (`valid_to`, `invalidated_by`)."""

from __future__ import annotations

import re
import unicodedata
import uuid

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import F, Q
from pgvector.django import HnswIndex, VectorField

from memory_admin.models.memory import EMBEDDING_DIM, Fact
from memory_admin.models.tenancy import MemoryUser, Tenant

_EDGE_PUNCTUATION = " \t\"'`.,;:!?()[]{}<>"


def fold_name(name: str) -> str:
    """The lookup form of a name: NFKC, case-folded, one space between words, no edge punctuation."""
    text = unicodedata.normalize("NFKC", name).casefold()
    return re.sub(r"\s+", " ", text).strip(_EDGE_PUNCTUATION)[:200]


class EntityType(models.TextChoices):
    PERSON = "person"
    COMPANY = "company", "organisation"  # any organisation; the stored value predates the wider label
    PROJECT = "project"
    PLACE = "place"
    TOOL = "tool", "tool or language"
    EVENT = "event"
    OTHER = "other"


class EntityScope(models.TextChoices):
    """Like a fact's scope: a user's entities are theirs, the tenant's (org) entities are shared."""

    ORG = "org"
    USER = "user"


class Entity(models.Model):
    Type = EntityType
    Scope = EntityScope
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="entities")
    memory_user = models.ForeignKey(
        MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="entities"
    )
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.USER)
    name = models.CharField(max_length=200)
    type = models.CharField(max_length=16, choices=Type.choices, default=Type.OTHER)
    # Every name the entity goes by, as written, and the same names folded (case, spaces) for lookups.
    aliases = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    alias_keys = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    summary = models.TextField(blank=True, default="")
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    # `manage.py reembed`'s shadow column: another engine's vector of the name and type, and the hash
    # of the text it was computed from (a rename meanwhile makes it stale), swapped in at the end.
    embedding_next = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    embedding_next_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when an operator (or resolution) merged this entity into another: kept, so the merge can be
    # undone; removed with its survivor (an erase), as nothing is left to undo then.
    merged_into = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="merged_from")

    class Meta:
        verbose_name_plural = "entities"
        indexes = [
            GinIndex(fields=["alias_keys"], name="entity_alias_keys_gin"),
            models.Index(fields=["tenant", "memory_user", "-last_seen"], name="entity_owner_seen"),
            # Search recognises the entities a query means by embedding (retrieval/candidates.py): the tenant's
            # (org) entities can be many; a user's own few are read exactly through entity_owner_seen.
            HnswIndex(
                fields=["embedding"],
                name="entity_org_embedding_hnsw",
                condition=Q(memory_user__isnull=True, merged_into__isnull=True),
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(scope="org") & Q(memory_user__isnull=True))
                | (Q(scope="user") & Q(memory_user__isnull=False)),
                name="entity_scope_shape",
            ),
            models.CheckConstraint(condition=Q(type__in=EntityType.values), name="entity_type_valid"),
            models.CheckConstraint(condition=~Q(name=""), name="entity_name_not_empty"),
            models.CheckConstraint(condition=Q(last_seen__gte=F("first_seen")), name="entity_seen_order"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.type})"


class MentionRole(models.TextChoices):
    SUBJECT = "subject"
    OBJECT = "object"
    MENTIONED = "mentioned"


class FactEntity(models.Model):
    """A fact mentions an entity, in a role."""

    Role = MentionRole
    fact = models.ForeignKey(Fact, on_delete=models.CASCADE, related_name="mentions")
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="mentions")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MENTIONED)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["entity", "fact"], name="fact_entity_by_entity")]
        constraints = [
            models.UniqueConstraint(fields=["fact", "entity", "role"], name="fact_entity_unique_role"),
            models.CheckConstraint(condition=Q(role__in=MentionRole.values), name="fact_entity_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.fact_id} {self.role} {self.entity_id}"


RELATION_TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"


class RelationEnd(models.TextChoices):
    """Why a relation was closed: its source fact (or document chunk) stopped being true, by one of these
    doors."""

    SUPERSEDED = "superseded"  # a newer version replaced the fact (`invalidated_by` names it) or the chunk
    FORGOTTEN = "forgotten"  # DELETE /facts/{id}
    CAPPED = "capped"  # evicted by the per-user cap
    HARD_TTL = "hard_ttl"  # the daily GC's rules (selectors.lifecycle.GC_RULES keys)
    SOFT_TTL_UNREAD = "soft_ttl_unread"
    LOW_CONFIDENCE = "low_confidence"
    REVIEW_EVICTED = "review_evicted"  # a reviewer confirmed an eviction candidate
    QUARANTINED = "quarantined"  # a release was undone: the fact is back in quarantine
    RETIRED = "retired"  # the chunk's page or file is gone, or its source was deleted


class Relation(models.Model):
    """subject -[type]-> object, drawn from `source_fact` or from a document's `source_chunk` (exactly
    one), true from `valid_from` until closed."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="relations")
    # The owner of the source fact or chunk (null: an org fact, a shared source): what the access check filters on.
    memory_user = models.ForeignKey(
        MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="relations"
    )
    subject = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="relations_out")
    object = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="relations_in")
    type = models.CharField(max_length=40)
    source_fact = models.ForeignKey(Fact, on_delete=models.PROTECT, null=True, blank=True, related_name="relations")
    # A document chunk that states it (knowledge/entities.py). Chunks are retired, never deleted in normal
    # operation; a hard delete (the tenant's, a user's erase) takes the relations they stated with them.
    source_chunk = models.ForeignKey(
        "memory_admin.KnowledgeChunk", on_delete=models.CASCADE, null=True, blank=True, related_name="relations"
    )
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    invalidated_by = models.ForeignKey(
        Fact, on_delete=models.PROTECT, null=True, blank=True, related_name="invalidated_relations"
    )
    # Every fact that states it (`source_fact`, the first, included): while one of them is still
    # true the relation holds, so ending one fact hands the relation to another instead of closing it.
    stated_by = models.ManyToManyField(Fact, related_name="stated_relations", blank=True)
    # The same for document chunks: an active one keeps the relation open as an active fact does.
    stated_by_chunks = models.ManyToManyField(
        "memory_admin.KnowledgeChunk", related_name="stated_relations", blank=True
    )
    # What closed it ("" while open, or when closed by hand); a superseding fact is also `invalidated_by`.
    closed_reason = models.CharField(max_length=20, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["subject", "valid_from"], name="relation_subject"),
            models.Index(fields=["object", "valid_from"], name="relation_object"),
            models.Index(fields=["source_fact"], name="relation_open_by_fact", condition=Q(valid_to__isnull=True)),
            models.Index(fields=["source_chunk"], name="relation_open_by_chunk", condition=Q(valid_to__isnull=True)),
        ]
        constraints = [
            models.CheckConstraint(condition=~Q(subject=F("object")), name="relation_not_to_itself"),
            models.CheckConstraint(
                condition=(Q(source_fact__isnull=False) & Q(source_chunk__isnull=True))
                | (Q(source_fact__isnull=True) & Q(source_chunk__isnull=False)),
                name="relation_one_source",
            ),
            models.CheckConstraint(condition=Q(type__regex=RELATION_TYPE_PATTERN), name="relation_type_shape"),
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gte=F("valid_from")), name="relation_time_order"
            ),
            models.CheckConstraint(
                condition=Q(invalidated_by__isnull=True) | Q(valid_to__isnull=False),
                name="relation_invalidated_is_closed",
            ),
            # Not tied to valid_to: a curator's reopen (services.entity_curation) must never fail on it.
            models.CheckConstraint(
                condition=Q(closed_reason="") | Q(closed_reason__in=RelationEnd.values),
                name="relation_closed_reason_valid",
            ),
            # One open relation per (subject, type, object): a repeat of the same statement is not a new edge.
            models.UniqueConstraint(
                fields=["subject", "type", "object"],
                condition=Q(valid_to__isnull=True),
                name="relation_one_open_per_edge",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject_id} {self.type} {self.object_id}"


class EntityBackfill(models.Model):
    """Where `manage.py entities_backfill` got to: the last fact it went through, in (created_at, id)
    order, per run scope (a tenant's slug, or "*" for every tenant). Ids only, no content."""

    scope = models.CharField(primary_key=True, max_length=80)
    last_created_at = models.DateTimeField(null=True, blank=True)
    last_fact_id = models.UUIDField(null=True, blank=True)
    facts_done = models.BigIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"entities backfill {self.scope}: {self.facts_done} facts"


class EntityDrawing(models.Model):
    """One owner's entity drawing (a memory user's facts, or a tenant's shared facts when memory_user is
    null): `pending_since` is set while a drawing task is queued or running for it, so that a write sends
    none, and cleared when that task has drawn everything due (services/entity_draw.py)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    pending_since = models.DateTimeField(null=True, blank=True)
    # When the pending task was sent, or last reported progress: the sweep sends it again only long after.
    touched_at = models.DateTimeField(null=True, blank=True)
    runs = models.BigIntegerField(default=0)
    facts_drawn = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "memory_user"], nulls_distinct=False, name="entity_drawing_one_per_owner"
            )
        ]

    def __str__(self) -> str:
        return f"entity drawing of {self.tenant_id}/{self.memory_user_id}"
