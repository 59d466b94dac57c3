"""The WSGI application: Django's own. Before it is built, the web process's start-up settings: tracing
(off unless OTEL_* asks; before the handler loads the middleware it adds) and the GIL switch interval
(embeddings.use_switch_interval)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
from memory_admin import tracing  # noqa: E402
from memory_admin.embedding import use_switch_interval  # noqa: E402

tracing.init("web")
use_switch_interval()
application = get_wsgi_application()
