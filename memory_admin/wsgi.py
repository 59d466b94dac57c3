import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
from memory_admin import tracing  # noqa: E402

tracing.init("web")  # off unless OTEL_* asks; before the handler loads the middleware it adds
django_application = get_wsgi_application()

from memory_admin.api import embed_ahead_wsgi  # noqa: E402 - after Django is set up
from memory_admin.embedding import use_switch_interval  # noqa: E402

use_switch_interval()


def application(environ, start_response):
    # A search's query embedding starts here, before Django builds its request and runs its middleware
    # (~0.2 ms earlier than SearchAheadMiddleware could; api.embed_ahead_wsgi has the rules).
    embed_ahead_wsgi(environ)
    return django_application(environ, start_response)
