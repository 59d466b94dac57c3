from __future__ import annotations

from django.db import transaction

from memory_admin.models import Notebook, Tenant, TenantSettings


@transaction.atomic
def tenant_create(*, slug: str, name: str = "") -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    TenantSettings.objects.get_or_create(tenant=tenant)
    Notebook.objects.get_or_create(tenant=tenant, memory_user=None)
    return tenant
