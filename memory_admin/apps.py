from django.apps import AppConfig


class MemoryAdminConfig(AppConfig):
    name = "memory_admin"
    verbose_name = "memory-admin"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memory_admin import http_metrics  # inside ready(): once Django's apps are loaded

        http_metrics.connect_celery()
