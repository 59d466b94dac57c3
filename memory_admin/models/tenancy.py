"""Tenants, their settings, the people and agents who act in them."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

PII_KINDS = ("email", "phone", "national_id")
PII_ACTIONS = ("block", "redact", "flag")


def default_pii_policy() -> dict[str, str]:
    return {kind: "block" for kind in PII_KINDS}


def default_search_weights() -> dict[str, float]:
    return {"vector": 0.4, "keyword": 0.3, "recency": 0.2, "importance": 0.1}


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class TenantSettings(models.Model):
    """Every threshold of SPEC §4-§7 that a tenant may tune."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="settings")
    confidence_threshold = models.FloatField(default=0.7)
    dedup_similarity = models.FloatField(default=0.95)
    contradiction_similarity = models.FloatField(default=0.7)
    auto_resolve_gap = models.FloatField(default=0.2)
    fact_cap = models.PositiveIntegerField(default=100)
    pii_policy = models.JSONField(default=default_pii_policy)
    search_weights = models.JSONField(default=default_search_weights)
    debounce_seconds = models.PositiveIntegerField(default=30)
    min_message_chars = models.PositiveIntegerField(default=20)
    extraction_enabled = models.BooleanField(default=True, help_text="Kill switch for LLM extraction.")
    episode_idle_minutes = models.PositiveIntegerField(default=30)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "tenant settings"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(confidence_threshold__gte=0, confidence_threshold__lte=1),
                name="settings_threshold_0_1",
            ),
            models.CheckConstraint(
                condition=models.Q(dedup_similarity__gt=0, dedup_similarity__lte=1)
                & models.Q(contradiction_similarity__gt=0, contradiction_similarity__lte=1)
                & models.Q(auto_resolve_gap__gte=0, auto_resolve_gap__lte=1),
                name="settings_similarities_0_1",
            ),
            models.CheckConstraint(condition=models.Q(fact_cap__gte=1), name="settings_cap_positive"),
        ]

    def __str__(self) -> str:
        return f"settings of {self.tenant_id}"


class MemoryUser(models.Model):
    """The person an agent remembers things about; `external_id` is the agent's own identifier."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memory_users")
    external_id = models.CharField(max_length=200)
    display_name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "external_id"], name="memory_user_unique_external_id"),
        ]

    def __str__(self) -> str:
        return self.external_id


class Agent(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="agent_unique_name")]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A bearer key of an agent; only its SHA-256 is stored (keys are 256-bit random strings)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    label = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    is_admin = models.BooleanField(default=False)
    # Empty means every memory user of the tenant.
    allowed_user_ids = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Paused: refused with `key_paused` until resumed (revoking is for good). Expired: refused with
    # `key_expired` from `expires_at` on. Read-only: reads only, a write is refused with `read_only_key`.
    paused_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    read_only = models.BooleanField(default=False, db_default=False)

    def __str__(self) -> str:
        return f"{self.prefix}…"

    @property
    def state(self) -> str:
        """active, paused, expired or revoked: what the key's next request meets."""
        from django.utils import timezone

        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "paused" if self.paused_at is not None else "active"


class Membership(models.Model):
    """A dashboard account's role in one tenant; a member is linked to one memory user."""

    class Role(models.TextChoices):
        ADMIN = "admin"
        OPERATOR = "operator"
        AUDITOR = "auditor"
        MEMBER = "member"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique"),
            models.CheckConstraint(
                condition=~models.Q(role="member") | models.Q(memory_user__isnull=False),
                name="membership_member_has_memory_user",
            ),
            models.CheckConstraint(
                condition=models.Q(role__in=["admin", "operator", "auditor", "member"]),
                name="membership_role_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id}:{self.role}"
