"""What is remembered: notebooks, facts and their edges, messages, episodes, skills (SPEC §2)."""

from __future__ import annotations

import uuid

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q
from pgvector.django import HnswIndex, VectorField

from memory_admin.models.tenancy import Agent, MemoryUser, Tenant

EMBEDDING_DIM = 384


class Notebook(models.Model):
    """One markdown document per memory user (memory_user null: the tenant's own notebook)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="notebooks")
    memory_user = models.OneToOneField(
        MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="notebook"
    )
    content = models.TextField(blank=True, default="")
    version = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "memory_user"], nulls_distinct=False, name="notebook_one_per_owner"
            ),
        ]

    def __str__(self) -> str:
        return f"notebook {self.tenant_id}/{self.memory_user_id} v{self.version}"


class NotebookRevision(models.Model):
    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    content = models.TextField(blank=True)
    author = models.CharField(max_length=200, blank=True)
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["notebook", "version"], name="notebook_revision_unique_version"),
        ]

    def __str__(self) -> str:
        return f"revision {self.version} of notebook {self.notebook_id}"


class NotebookChunk(models.Model):
    """A statement line of a notebook revision with its embedding: lets the write path find facts
    that disagree with the notebook (which always wins)."""

    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="chunks")
    revision = models.ForeignKey(NotebookRevision, on_delete=models.CASCADE, related_name="chunks")
    text = models.TextField()
    embedding = VectorField(dimensions=EMBEDDING_DIM)
    # Shadow column of `manage.py reembed`: filled while `embedding` keeps serving, then swapped in.
    embedding_next = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)

    def __str__(self) -> str:
        return self.text[:60]


class FactScope(models.TextChoices):
    GLOBAL = "global"
    ORG = "org"
    USER = "user"
    TASK = "task"


class FactCategory(models.TextChoices):
    PREFERENCE = "preference"
    PROJECT = "project"
    TECHNICAL = "technical"
    PERSONAL = "personal"
    OTHER = "other"


class FactKind(models.TextChoices):
    FACT = "fact"
    DECISION = "decision"
    INFERENCE = "inference"
    CORRECTION = "correction"
    PREFERENCE = "preference"
    SKILL = "skill"


class FactSource(models.TextChoices):
    USER_STATED = "user_stated"
    TOOL_VERIFIED = "tool_verified"
    # What an agent deliberately saves (the API's default): it chose to remember it, so it clears the
    # default gate; what it only inferred or extracted is `agent_inferred` and meets the gate.
    AGENT_STATED = "agent_stated"
    AGENT_INFERRED = "agent_inferred"
    RECALLED = "recalled"
    EXTERNAL = "external"
    NOTEBOOK = "notebook"
    USER_CORRECTION = "user_correction"


class FactStatus(models.TextChoices):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    STALE = "stale"
    EVICTED = "evicted"
    QUARANTINED = "quarantined"


class WriteOutcome(models.TextChoices):
    """What the write path did with one fact (SPEC §4): the API's `outcome`, the audit event's outcome of
    a `….write`. In the order the overview stacks them."""

    CREATED = "created"
    UPDATED = "updated"
    DEDUPLICATED = "deduplicated"
    MERGED = "merged"
    SUPERSEDED_EXISTING = "superseded_existing"
    QUEUED_FOR_REVIEW = "queued_for_review"
    OVERRULED = "overruled"
    QUARANTINED = "quarantined"
    REJECTED_LOW_CONFIDENCE = "rejected_low_confidence"
    BLOCKED = "blocked"
    CAPPED = "capped"
    ERROR = "error"  # a fact of a batch that failed midway and left nothing behind

    @property
    def stored(self) -> bool:
        """A new fact row was written (answered 201): it may be active, contested, quarantined, or
        already superseded or evicted on arrival; not so for a refusal or a fold into a standing fact."""
        return self in _STORED_OUTCOMES

    @property
    def refused(self) -> bool:
        """The statement is not served as the writer gave it (held for review, below the gate, beaten by
        the notebook or a surer fact, evicted at once by the cap, blocked, failed): every door reports
        it as an error naming the outcome (MCP: a tool error; the Python client: `WriteRefused`)."""
        return self in _REFUSED_OUTCOMES

    @property
    def audited(self) -> bool:
        """Recorded as the outcome of a write's audit event (an error's writes were rolled back)."""
        return self is not WriteOutcome.ERROR


_REFUSED_OUTCOMES = frozenset(
    {
        WriteOutcome.QUARANTINED,
        WriteOutcome.REJECTED_LOW_CONFIDENCE,
        WriteOutcome.OVERRULED,
        WriteOutcome.CAPPED,
        WriteOutcome.BLOCKED,
        WriteOutcome.ERROR,
    }
)

_STORED_OUTCOMES = frozenset(
    {
        WriteOutcome.CREATED,
        WriteOutcome.UPDATED,
        WriteOutcome.SUPERSEDED_EXISTING,
        WriteOutcome.QUEUED_FOR_REVIEW,
        WriteOutcome.QUARANTINED,
        WriteOutcome.OVERRULED,
        WriteOutcome.CAPPED,
    }
)


class FactQuerySet(models.QuerySet):
    """The filters every reader and writer of facts repeats, by name."""

    def active(self) -> FactQuerySet:
        return self.filter(status=FactStatus.ACTIVE)

    def for_user(self, memory_user: MemoryUser | int) -> FactQuerySet:
        """The facts of one memory user (a user or its id)."""
        if isinstance(memory_user, MemoryUser):
            return self.filter(memory_user=memory_user)
        return self.filter(memory_user_id=memory_user)


class Fact(models.Model):
    # Its vector columns (two embeddings and the tsvector): raw reads of a fact's row that show or compare
    # it (the write path, the cap, search's carried rows) leave them out; parsing 384 floats is costly.
    VECTORS = ("embedding", "embedding_next", "search_vector")
    Scope = FactScope
    Category = FactCategory
    Kind = FactKind
    Source = FactSource
    Status = FactStatus
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="facts")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="facts")
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.USER)
    task_ref = models.CharField(max_length=200, blank=True, default="")
    # NULL, not "": the unique constraint on active keys must ignore key-less facts.
    key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    content = models.TextField()
    content_hash = models.CharField(max_length=64)
    category = models.CharField(max_length=16, choices=Category.choices, default=Category.OTHER)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.FACT)
    confidence = models.FloatField()
    importance = models.FloatField(default=0.5)
    source = models.CharField(max_length=16, choices=Source.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    status_reason = models.CharField(max_length=300, blank=True, default="")
    version = models.PositiveIntegerField(default=1)
    supersedes = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="corrected_by"
    )
    superseded_by = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    superseded_by_notebook = models.ForeignKey(
        NotebookRevision, on_delete=models.PROTECT, null=True, blank=True, related_name="overruled_facts"
    )
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    # Shadow column of `manage.py reembed` and the content_hash it was computed from (content can
    # change in place while a re-embed runs; such a row is embedded again before the swap).
    embedding_next = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    embedding_next_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    search_vector = models.GeneratedField(
        expression=SearchVector("content", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    pinned = models.BooleanField(default=False)
    contested = models.BooleanField(default=False, help_text="Part of an open contradiction.")
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    soft_expires_at = models.DateTimeField(null=True, blank=True)
    hard_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    access_count = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.CharField(max_length=200, blank=True, default="")
    extractor = models.CharField(max_length=100, blank=True, default="")
    message = models.ForeignKey(
        "memory_admin.Message", on_delete=models.SET_NULL, null=True, blank=True, related_name="facts"
    )
    batch = models.ForeignKey(
        "memory_admin.ExtractionBatch", on_delete=models.SET_NULL, null=True, blank=True, related_name="facts"
    )
    # Its entities are still to be drawn (services/entity_draw.py): true for every fact the ORM creates,
    # false once its owner's drawing went through it. Rows loaded in bulk (COPY) get the column's default.
    entities_due = models.BooleanField(default=True, db_default=False)

    objects = FactQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["memory_user", "status", "-created_at"], name="fact_user_status_created"),
            models.Index(fields=["tenant", "status", "-created_at"], name="fact_tenant_status_created"),
            models.Index(fields=["memory_user", "content_hash"], name="fact_user_hash"),
            GinIndex(fields=["search_vector"], name="fact_search_vector_gin"),
            # Pinned facts head every context block; few rows, so a small partial index finds them
            # without scanning a large org scope.
            models.Index(
                fields=["tenant", "memory_user"], name="fact_pinned_active", condition=Q(pinned=True, status="active")
            ),
            # Dashboard at scale: every eviction candidate is contested (selectors.dashboard), and the
            # lifecycle page's TTL rules look only at the few facts that have a TTL.
            models.Index(fields=["tenant"], name="fact_contested_active", condition=Q(contested=True, status="active")),
            models.Index(
                fields=["tenant", "hard_expires_at"], name="fact_hard_ttl", condition=Q(hard_expires_at__isnull=False)
            ),
            # /metrics reads the quarantine queue's depth and age at every scrape (metrics.py).
            models.Index(fields=["tenant", "created_at"], name="fact_quarantined", condition=Q(status="quarantined")),
            models.Index(
                fields=["tenant", "soft_expires_at"], name="fact_soft_ttl", condition=Q(soft_expires_at__isnull=False)
            ),
            # Full-text search over the shared scopes alone: the index over all facts matches a word in
            # every user's facts and then has to be intersected with "memory_user IS NULL". Without a
            # pending list (fastupdate off): every search of the shared scope reads the whole pending
            # list, which grew to 2.3 MB at 1M facts and made the branch 7-17 ms instead of 0.2 ms.
            GinIndex(
                fields=["search_vector"],
                name="fact_shared_search_gin",
                condition=Q(memory_user__isnull=True),
                fastupdate=False,
            ),
            # The facts whose entities are still to be drawn, by owner: few, whatever the table's size.
            models.Index(fields=["tenant", "memory_user"], name="fact_entities_due", condition=Q(entities_due=True)),
            # Shared scopes (org/global) are large: approximate search. A user's own facts are
            # searched exactly, filtered by user first (SPEC §6).
            HnswIndex(
                fields=["embedding"],
                name="fact_shared_embedding_hnsw",
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
                condition=Q(memory_user__isnull=True, status="active"),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "memory_user", "task_ref", "key"],
                condition=Q(status="active", key__isnull=False),
                nulls_distinct=False,
                name="fact_one_active_per_key",
            ),
            models.CheckConstraint(
                condition=~Q(status="superseded")
                | Q(superseded_by__isnull=False)
                | Q(superseded_by_notebook__isnull=False),
                name="fact_superseded_points_to_successor",
            ),
            models.CheckConstraint(
                condition=Q(superseded_by__isnull=True) | ~Q(superseded_by=models.F("id")),
                name="fact_not_superseded_by_itself",
            ),
            models.CheckConstraint(condition=Q(confidence__gte=0, confidence__lte=1), name="fact_confidence_0_1"),
            models.CheckConstraint(condition=Q(importance__gte=0, importance__lte=1), name="fact_importance_0_1"),
            models.CheckConstraint(
                condition=(Q(scope="global") & Q(tenant__isnull=True) & Q(memory_user__isnull=True))
                | (Q(scope="org") & Q(tenant__isnull=False) & Q(memory_user__isnull=True))
                | (Q(scope="user") & Q(tenant__isnull=False) & Q(memory_user__isnull=False) & Q(task_ref=""))
                | (Q(scope="task") & Q(tenant__isnull=False) & Q(memory_user__isnull=False) & ~Q(task_ref="")),
                name="fact_scope_shape",
            ),
            models.CheckConstraint(condition=Q(status__in=FactStatus.values), name="fact_status_valid"),
            models.CheckConstraint(condition=Q(category__in=FactCategory.values), name="fact_category_valid"),
            models.CheckConstraint(condition=Q(kind__in=FactKind.values), name="fact_kind_valid"),
            models.CheckConstraint(condition=Q(source__in=FactSource.values), name="fact_source_valid"),
        ]

    def __str__(self) -> str:
        return self.content[:80]


class EdgeType(models.TextChoices):
    SUPERSEDES = "SUPERSEDES"
    CONTRADICTS = "CONTRADICTS"
    CAUSED_BY = "CAUSED_BY"
    SUPPORTS = "SUPPORTS"
    RELATED_TO = "RELATED_TO"
    PART_OF = "PART_OF"
    TEMPORAL_NEXT = "TEMPORAL_NEXT"


class Edge(models.Model):
    Type = EdgeType
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="edges")
    type = models.CharField(max_length=16, choices=Type.choices)
    src_fact = models.ForeignKey(Fact, on_delete=models.CASCADE, null=True, blank=True, related_name="out_edges")
    src_episode = models.ForeignKey(
        "memory_admin.Episode", on_delete=models.CASCADE, null=True, blank=True, related_name="out_edges"
    )
    dst_fact = models.ForeignKey(Fact, on_delete=models.CASCADE, null=True, blank=True, related_name="in_edges")
    dst_episode = models.ForeignKey(
        "memory_admin.Episode", on_delete=models.CASCADE, null=True, blank=True, related_name="in_edges"
    )
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(src_fact__isnull=False) ^ Q(src_episode__isnull=False))
                & (Q(dst_fact__isnull=False) ^ Q(dst_episode__isnull=False)),
                name="edge_one_source_one_target",
            ),
            models.CheckConstraint(condition=Q(type__in=EdgeType.values), name="edge_type_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.src_fact_id or self.src_episode_id} {self.type} {self.dst_fact_id or self.dst_episode_id}"


class Thread(models.Model):
    """A conversation; its pending-extraction deadline lives here so a restart loses nothing."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="threads")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="threads")
    external_id = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    last_message_at = models.DateTimeField(null=True, blank=True)
    extract_due_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["memory_user", "external_id"], name="thread_unique_per_user"),
        ]
        indexes = [models.Index(fields=["extract_due_at"], name="thread_extract_due")]

    def __str__(self) -> str:
        return self.external_id


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MessageStatus(models.TextChoices):
    PENDING = "pending"
    EXTRACTED = "extracted"
    SKIPPED = "skipped"


class MessageManager(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        # The conversation log's reads (extraction, episodes, export) never need a message's vectors:
        # parsing 384 floats per row is costly. Search reads them in its own statement (retrieval/messages.py).
        return super().get_queryset().defer("embedding", "search_vector")


class Message(models.Model):
    Role = MessageRole
    Status = MessageStatus
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="messages")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="messages")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField()
    created_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    skip_reason = models.CharField(max_length=100, blank=True, default="")
    # The X-Request-ID of the request that posted it (memory_admin/requestlog.py); ids only.
    request_id = models.CharField(max_length=64, blank=True, default="", db_default="")
    batch = models.ForeignKey(
        "memory_admin.ExtractionBatch", on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    episode = models.ForeignKey(
        "memory_admin.Episode", on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    # Episodic memory (retrieval/messages.py): the content as stored (screened) is searchable once the
    # worker embedded it (extraction.index_messages). `search_due` marks what the worker has still to
    # look at; a message it will never index (a placeholder, erased) is left without an embedding.
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    search_vector = models.GeneratedField(
        expression=SearchVector("content", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    search_due = models.BooleanField(default=True, db_default=True)

    objects = MessageManager()

    class Meta:
        indexes = [
            models.Index(fields=["thread", "status", "id"], name="message_thread_status"),
            # The worker's queue of messages to index: few rows, whatever the table's size.
            models.Index(fields=["id"], name="message_search_due", condition=Q(search_due=True)),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(role__in=MessageRole.values), name="message_role_valid"),
            models.CheckConstraint(condition=Q(status__in=MessageStatus.values), name="message_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class Episode(models.Model):
    class Outcome(models.TextChoices):
        SUCCESS = "success"
        FAILURE = "failure"
        UNKNOWN = "unknown"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="episodes")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="episodes")
    thread = models.ForeignKey(Thread, on_delete=models.SET_NULL, null=True, blank=True, related_name="episodes")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    summary = models.TextField(blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.UNKNOWN)
    summarizer = models.CharField(max_length=100, blank=True)
    facts = models.ManyToManyField(Fact, blank=True, related_name="episodes")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["memory_user", "-started_at"], name="episode_user_started")]
        constraints = [
            models.CheckConstraint(condition=Q(ended_at__gte=models.F("started_at")), name="episode_time_order"),
        ]

    def __str__(self) -> str:
        return f"episode {self.started_at:%Y-%m-%d} {self.outcome}"


class Skill(models.Model):
    """Path-routed markdown (`deploy/kubernetes.md`); memory_user null means tenant scope."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="skills")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="skills")
    path = models.CharField(max_length=300)
    content = models.TextField()
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "memory_user", "path"], nulls_distinct=False, name="skill_unique_path"
            ),
        ]

    def __str__(self) -> str:
        return self.path


class SkillRevision(models.Model):
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    content = models.TextField()
    author = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        constraints = [models.UniqueConstraint(fields=["skill", "version"], name="skill_revision_unique")]

    def __str__(self) -> str:
        return f"{self.skill_id} v{self.version}"
