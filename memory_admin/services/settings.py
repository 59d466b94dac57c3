from __future__ import annotations

from memory_admin.models import TenantSettings


def tenant_settings(tenant_id: int) -> TenantSettings:
    settings, _ = TenantSettings.objects.get_or_create(tenant_id=tenant_id)
    return settings
