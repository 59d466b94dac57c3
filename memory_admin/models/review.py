"""What people review and audit: contradictions, PII blocks, audit events, extraction batches."""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from memory_admin.models.memory import Fact, NotebookRevision, Thread
from memory_admin.models.tenancy import Agent, MemoryUser, Tenant


class Contradiction(models.Model):
    class Status(models.TextChoices):
        OPEN = "open"
        RESOLVED = "resolved"
        DISMISSED = "dismissed"
        AUTO_RESOLVED = "auto_resolved"

    class Resolution(models.TextChoices):
        KEEP_A = "keep_a"
        KEEP_B = "keep_b"
        BOTH_TRUE = "both_true"
        MERGE = "merge"
        DISMISS = "dismiss"
        AUTO = "auto"

    class Detector(models.TextChoices):
        KEY = "key"
        SEMANTIC = "semantic"
        NOTEBOOK = "notebook"
        SCAN = "scan"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="contradictions")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="contradictions")
    fact_a = models.ForeignKey(Fact, on_delete=models.CASCADE, related_name="contradictions_as_a")
    fact_b = models.ForeignKey(
        Fact, on_delete=models.CASCADE, null=True, blank=True, related_name="contradictions_as_b"
    )
    notebook_revision = models.ForeignKey(
        NotebookRevision, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    notebook_excerpt = models.TextField(blank=True, default="")
    detector = models.CharField(max_length=16, choices=Detector.choices)
    judge = models.CharField(max_length=100, blank=True, default="")
    reason = models.TextField(blank=True)
    similarity = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    resolution = models.CharField(max_length=16, choices=Resolution.choices, blank=True, default="")
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")
    merged_fact = models.ForeignKey(Fact, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "status", "created_at"], name="contradiction_queue")]
        constraints = [
            models.UniqueConstraint(
                fields=["fact_a", "fact_b"], condition=Q(status="open"), name="contradiction_one_open_per_pair"
            ),
            models.CheckConstraint(
                condition=Q(fact_b__isnull=False) | Q(detector="notebook"), name="contradiction_has_other_side"
            ),
            models.CheckConstraint(
                condition=Q(status="open") | Q(resolved_at__isnull=False), name="contradiction_closed_has_time"
            ),
        ]

    def __str__(self) -> str:
        return f"contradiction {self.id} ({self.status})"


class PiiBlock(models.Model):
    """A refused (or redacted, or flagged) write. Keeps kinds, a redacted preview and a keyed
    fingerprint so repeats can be counted; never the raw value."""

    class Action(models.TextChoices):
        BLOCKED = "blocked"
        REDACTED = "redacted"
        FLAGGED = "flagged"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="pii_blocks")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    actor = models.CharField(max_length=200, blank=True)
    route = models.CharField(max_length=32)
    action = models.CharField(max_length=16, choices=Action.choices)
    kinds = ArrayField(models.CharField(max_length=32))
    redacted_preview = models.TextField()
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="pii_block_tenant_created"),
            models.Index(fields=["tenant", "fingerprint"], name="pii_block_fingerprint"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {','.join(self.kinds)}"


class AuditEvent(models.Model):
    """Immutable (a trigger refuses UPDATE and DELETE, except inside an explicit erase)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    actor_type = models.CharField(max_length=16)  # agent, staff, system
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=64)
    outcome = models.CharField(max_length=32, blank=True, default="")
    target_type = models.CharField(max_length=32, blank=True, default="")
    target_id = models.CharField(max_length=64, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="audit_tenant_created"),
            models.Index(fields=["target_type", "target_id"], name="audit_target"),
            models.Index(fields=["tenant", "outcome", "-created_at"], name="audit_tenant_outcome"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.outcome} {self.target_type}:{self.target_id}"


class ExtractionBatch(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="batches")
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="batches")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="batches")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    extractor = models.CharField(max_length=100, blank=True, default="")
    model = models.CharField(max_length=100, blank=True, default="")
    message_count = models.PositiveIntegerField(default=0)
    fact_count = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    lease_until = models.DateTimeField(null=True, blank=True)
    # When run_batch was last sent for it while pending: the sweeper sends it again only once that
    # message is lost, never while it still waits in the queue (extraction/pipeline.py).
    dispatched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The request ids of the messages it holds: the log lines of its run carry them.
    request_ids = ArrayField(models.CharField(max_length=64), default=list, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "status", "-created_at"], name="batch_tenant_status"),
            # /metrics counts open batches at every scrape; the table keeps every done one.
            models.Index(
                fields=["status", "created_at"], name="batch_open", condition=Q(status__in=["pending", "running"])
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.pk} {self.status}"


class LlmCall(models.Model):
    """One call to a model: what it cost, per tenant and per layer (extraction, judge, summary...)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="llm_calls")
    batch = models.ForeignKey(ExtractionBatch, on_delete=models.SET_NULL, null=True, blank=True, related_name="calls")
    layer = models.CharField(max_length=32)
    model = models.CharField(max_length=100)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    ok = models.BooleanField(default=True)
    error = models.CharField(max_length=300, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-created_at"], name="llm_call_tenant_created")]

    def __str__(self) -> str:
        return f"{self.layer} {self.model}"
