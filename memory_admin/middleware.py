from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import JsonResponse


class DatabaseUnavailableMiddleware:
    """Answer 503 with a stable code when Postgres cannot be reached (SPEC §11)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, OperationalError | InterfaceError) or (
            isinstance(exception, DatabaseError) and "connection" in str(exception).lower()
        ):
            return JsonResponse(
                {"code": "database_unavailable", "detail": "The database cannot be reached; nothing was written."},
                status=503,
            )
        return None


class ContentSecurityPolicyMiddleware:
    """Memory content is untrusted: even if escaping ever failed, the browser runs no inline script.
    The dashboard's own JavaScript (htmx and dashboard.js) is served from /static/."""

    POLICY = (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
    )

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", self.POLICY)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response


class DashboardOnlyMiddleware:
    """The dashboard's own middleware (sessions, CSRF, sign-in, messages, htmx), run for every request
    but the agent API's: `/api/` authenticates each request by its bearer key and reads none of them,
    so an API request skips their work (a session cookie read, a CSRF check ninja does not ask for, ...).

    The chain is built from DASHBOARD_MIDDLEWARE, in that order, like MIDDLEWARE; their `process_view`
    hooks (CSRF's) are run here for dashboard requests, as Django's handler would run them."""

    API_PREFIX = "/api/"

    def __init__(self, get_response):
        from django.conf import settings
        from django.utils.module_loading import import_string

        self.get_response = get_response
        handler, views = get_response, []
        for path in reversed(settings.DASHBOARD_MIDDLEWARE):
            middleware = import_string(path)(handler)
            if hasattr(middleware, "process_view"):
                views.insert(0, middleware.process_view)
            if hasattr(middleware, "process_exception") or hasattr(middleware, "process_template_response"):
                raise ImproperlyConfigured(f"{path}: DashboardOnlyMiddleware runs only process_view hooks.")
            handler = middleware
        self.dashboard = handler
        self.view_hooks = views

    def __call__(self, request):
        if request.path_info.startswith(self.API_PREFIX):
            return self.get_response(request)
        return self.dashboard(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith(self.API_PREFIX):
            return None
        for hook in self.view_hooks:
            response = hook(request, view_func, view_args, view_kwargs)
            if response is not None:
                return response
        return None
