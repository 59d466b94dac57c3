import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
from memory_admin import tracing  # noqa: E402

tracing.init("web")  # off unless OTEL_* asks; before the handler loads the middleware it adds
application = get_wsgi_application()
