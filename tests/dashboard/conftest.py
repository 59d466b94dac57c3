"""Dashboard fixtures: accounts per role, memory users, facts and review items made directly in the
database (fast: no embedding model), so tests exercise the pages rather than the write path."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from memory_admin.models import Contradiction, Fact, MemoryUser, PiiBlock
from memory_admin.services.facts import content_hash
from memory_admin.services.staff import staff_create

_n = itertools.count(1)
PASSWORD = "correct horse battery"


@pytest.fixture
def memory_user(tenant):
    return MemoryUser.objects.create(tenant=tenant, external_id="alice", display_name="Alice")


@pytest.fixture
def other_user(tenant):
    return MemoryUser.objects.create(tenant=tenant, external_id="bob")


@pytest.fixture
def foreign_user(other_tenant):
    return MemoryUser.objects.create(tenant=other_tenant, external_id="mallory")


@pytest.fixture
def make_staff(db):
    """make_staff(tenant, role, memory_user=None) -> a Client signed in as a new account."""

    def make(tenant, role: str, memory_user: MemoryUser | None = None, username: str | None = None) -> Client:
        username = username or f"{role}-{next(_n)}"
        membership, _ = staff_create(
            tenant_slug=tenant.slug,
            username=username,
            role=role,
            memory_user_external_id=memory_user.external_id if memory_user else None,
            password=PASSWORD,
        )
        client = Client()
        client.force_login(membership.user)
        client.username = username
        return client

    return make


@pytest.fixture
def operator(tenant, make_staff):
    return make_staff(tenant, "operator")


@pytest.fixture
def admin(tenant, make_staff):
    return make_staff(tenant, "admin")


@pytest.fixture
def auditor(tenant, make_staff):
    return make_staff(tenant, "auditor")


@pytest.fixture
def member(tenant, make_staff, memory_user):
    return make_staff(tenant, "member", memory_user)


@pytest.fixture
def make_fact(db):
    def make(memory_user: MemoryUser, content: str, **fields) -> Fact:
        now = timezone.now()
        defaults = dict(
            id=uuid.uuid4(),
            tenant_id=memory_user.tenant_id,
            memory_user=memory_user,
            scope="user",
            content=content,
            content_hash=content_hash(content),
            confidence=0.9,
            source="user_stated",
            valid_from=now,
            category="preference",
            kind="fact",
        )
        defaults.update(fields)
        return Fact.objects.create(**defaults)

    return make


@pytest.fixture
def make_contradiction(make_fact):
    def make(memory_user: MemoryUser, a: str = "Prefers tea", b: str = "Prefers coffee", age_days: int = 0):
        fa = make_fact(memory_user, a, contested=True, confidence=0.8)
        fb = make_fact(memory_user, b, contested=True, confidence=0.7)
        c = Contradiction.objects.create(
            tenant_id=memory_user.tenant_id,
            memory_user=memory_user,
            fact_a=fa,
            fact_b=fb,
            detector="semantic",
            reason="tea vs coffee",
            similarity=0.8,
        )
        if age_days:
            Contradiction.objects.filter(pk=c.pk).update(created_at=timezone.now() - timedelta(days=age_days))
        return c

    return make


@pytest.fixture
def make_block(db):
    def make(tenant, memory_user=None, preview="contact me at [email]", kinds=("email",), fingerprint="fp1"):
        return PiiBlock.objects.create(
            tenant=tenant,
            memory_user=memory_user,
            actor="agent:bot",
            route="fact",
            action="blocked",
            kinds=list(kinds),
            redacted_preview=preview,
            fingerprint=fingerprint,
        )

    return make


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2 at production strength costs ~0.5 s per account on this machine; tests create many.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
