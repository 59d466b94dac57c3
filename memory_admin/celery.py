"""The Celery application: tasks live in the `extraction` package."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")

app = Celery("memory_admin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["extraction"])
