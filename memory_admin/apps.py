from django.apps import AppConfig


class MemoryAdminConfig(AppConfig):
    name = "memory_admin"
    verbose_name = "memory-admin"
    default_auto_field = "django.db.models.BigAutoField"
