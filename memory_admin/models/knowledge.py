"""Trained knowledge (issue 34): sources an operator points the system at, the documents fetched from
them, and the chunks those documents are digested into.

Chunks live beside facts and are built to be read the same way: a pgvector embedding from the same
embedder and dimension, a generated English tsvector, an HNSW index over the active ones, tenant and
optional memory-user scope, and a status with history (a changed document supersedes its changed chunks,
a removed one retires them; nothing is deleted in normal operation).
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q
from pgvector.django import HnswIndex, VectorField

from memory_admin.models.memory import EMBEDDING_DIM
from memory_admin.models.tenancy import MemoryUser, Tenant


class SourceKind(models.TextChoices):
    FILE = "file"  # an uploaded file (Markdown, plain text, HTML, PDF)
    URL = "url"  # one page
    SITE = "site"  # a same-host crawl from a start page
    FOLDER = "folder"  # a local folder under a staff-configured root (self-hosters)


class SourceStatus(models.TextChoices):
    ACTIVE = "active"
    PAUSED = "paused"
    DELETED = "deleted"


class CrawlState(models.TextChoices):
    IDLE = "idle"  # nothing running; the next crawl is at `next_crawl_at`
    QUEUED = "queued"  # a crawl task was sent
    RUNNING = "running"  # a worker is walking the source, a few pages a task
    FAILED = "failed"  # the last crawl stopped on an error (`last_error`)


class KnowledgeSource(models.Model):
    Kind = SourceKind
    Status = SourceStatus
    State = CrawlState

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="knowledge_sources")
    # NULL: shared by the whole tenant (org scope); else one memory user's own.
    memory_user = models.ForeignKey(
        MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="knowledge_sources"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    name = models.CharField(max_length=200)
    location = models.CharField(max_length=2000, blank=True, default="")  # URL, folder path or file name
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    state = models.CharField(max_length=8, choices=State.choices, default=State.QUEUED)
    refresh_minutes = models.PositiveIntegerField(null=True, blank=True)  # NULL: never refreshed by itself
    max_depth = models.PositiveSmallIntegerField(default=2)
    max_pages = models.PositiveIntegerField(default=50)
    max_bytes = models.PositiveBigIntegerField(default=20 * 1024 * 1024)
    # An uploaded file's bytes, kept so it can be digested again (a new embedder, a crawl retried).
    upload = models.BinaryField(null=True, blank=True, editable=False)
    upload_type = models.CharField(max_length=100, blank=True, default="")
    # The walk in progress (frontier, pages seen, bytes): a crawl is a chain of short tasks.
    crawl_state = models.JSONField(default=dict, blank=True)
    crawl_started_at = models.DateTimeField(null=True, blank=True)
    last_crawled_at = models.DateTimeField(null=True, blank=True)
    next_crawl_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    pages_done = models.PositiveIntegerField(default=0)
    pages_total = models.PositiveIntegerField(default=0)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="ksource_tenant_created"),
            # beat's refresh sweep: the active sources whose next crawl is due.
            models.Index(fields=["next_crawl_at"], name="ksource_due", condition=Q(status="active")),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=SourceKind.values), name="ksource_kind_valid"),
            models.CheckConstraint(condition=Q(status__in=SourceStatus.values), name="ksource_status_valid"),
            models.CheckConstraint(condition=Q(state__in=CrawlState.values), name="ksource_state_valid"),
            models.CheckConstraint(condition=Q(max_pages__gte=1), name="ksource_pages_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class DocumentStatus(models.TextChoices):
    ACTIVE = "active"
    RETIRED = "retired"  # gone from the source (a removed page, a deleted file, the source deleted)
    FAILED = "failed"  # could not be fetched or parsed (`error`)


class KnowledgeDocument(models.Model):
    """One page of a site, one file of a folder, the uploaded file: what a crawl fetches and compares."""

    Status = DocumentStatus

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    source = models.ForeignKey(KnowledgeSource, on_delete=models.CASCADE, related_name="documents")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    locator = models.CharField(max_length=2000)  # URL, path inside the folder, or file name
    title = models.CharField(max_length=500, blank=True, default="")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    version = models.PositiveIntegerField(default=0)  # bumped by every change of its text
    etag = models.CharField(max_length=300, blank=True, default="")
    last_modified = models.CharField(max_length=100, blank=True, default="")
    content_hash = models.CharField(max_length=64, blank=True, default="")
    bytes = models.PositiveBigIntegerField(default=0)
    fetched_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    # The same-host links it held when last read: a page that answers 304 still leads the crawl on.
    links = models.JSONField(default=list, blank=True)
    chunks_blocked = models.PositiveIntegerField(default=0)  # held a secret: refused, a PII block recorded
    chunks_redacted = models.PositiveIntegerField(default=0)
    chunks_quarantined = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "locator"], name="kdocument_one_per_locator"),
            models.CheckConstraint(condition=Q(status__in=DocumentStatus.values), name="kdocument_status_valid"),
        ]

    def __str__(self) -> str:
        return self.locator[:80]


class ChunkStatus(models.TextChoices):
    ACTIVE = "active"
    SUPERSEDED = "superseded"  # its document changed; a newer chunk holds the text now
    RETIRED = "retired"  # its document (or source) is gone
    QUARANTINED = "quarantined"  # read as instructions to a model: held for review, never served


class KnowledgeChunk(models.Model):
    """A section-bounded piece of a document, screened and embedded like a fact."""

    VECTORS = ("embedding", "embedding_next", "search_vector")
    Status = ChunkStatus

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="knowledge_chunks")
    memory_user = models.ForeignKey(
        MemoryUser, on_delete=models.CASCADE, null=True, blank=True, related_name="knowledge_chunks"
    )
    source = models.ForeignKey(KnowledgeSource, on_delete=models.CASCADE, related_name="chunks")
    document = models.ForeignKey(KnowledgeDocument, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()  # its place in the document's current version
    heading_path = ArrayField(models.CharField(max_length=300), default=list, blank=True)
    content = models.TextField()
    content_hash = models.CharField(max_length=64)
    tokens = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    status_reason = models.CharField(max_length=300, blank=True, default="")
    document_version = models.PositiveIntegerField()  # the version of the document it was cut from
    superseded_by = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    redacted_kinds = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    # Shadow column for `manage.py reembed`, as on facts.
    embedding_next = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    search_vector = models.GeneratedField(
        expression=SearchVector("content", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    fetched_at = models.DateTimeField()
    # When its entities were drawn into the graph (knowledge/entities.py); NULL: due, once it is active.
    entities_drawn_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["document", "status", "ordinal"], name="kchunk_document_status"),
            models.Index(
                fields=["source", "created_at"],
                name="kchunk_entities_due",
                condition=Q(status="active", entities_drawn_at__isnull=True),
            ),
            models.Index(fields=["tenant", "memory_user", "status"], name="kchunk_owner_status"),
            models.Index(fields=["tenant", "created_at"], name="kchunk_quarantined", condition=Q(status="quarantined")),
            GinIndex(fields=["search_vector"], name="kchunk_search_gin", condition=Q(status="active")),
            # Chunks are the large shared scope: approximate search, as for the shared facts.
            HnswIndex(
                fields=["embedding"],
                name="kchunk_embedding_hnsw",
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
                condition=Q(status="active"),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=ChunkStatus.values), name="kchunk_status_valid"),
            models.CheckConstraint(
                condition=~Q(status="active") | Q(embedding__isnull=False), name="kchunk_active_is_embedded"
            ),
        ]

    def __str__(self) -> str:
        return self.content[:80]


class KnowledgeSettings(models.Model):
    """A tenant's kill switch for ingestion (no row: enabled)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="knowledge_settings")
    ingestion_enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"knowledge settings of {self.tenant_id}"


class ChunkEntity(models.Model):
    """A document chunk names an entity of the graph, in a role: the drawing's provenance (the chunk, and
    through it the document, its URL or file, section and version)."""

    chunk = models.ForeignKey(KnowledgeChunk, on_delete=models.CASCADE, related_name="mentions")
    entity = models.ForeignKey("memory_admin.Entity", on_delete=models.CASCADE, related_name="chunk_mentions")
    role = models.CharField(max_length=16, default="mentioned")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["entity", "chunk"], name="chunk_entity_by_entity")]
        constraints = [
            models.UniqueConstraint(fields=["chunk", "entity"], name="chunk_entity_unique"),
            models.CheckConstraint(
                condition=Q(role__in=["subject", "object", "mentioned"]), name="chunk_entity_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.chunk_id} {self.role} {self.entity_id}"
