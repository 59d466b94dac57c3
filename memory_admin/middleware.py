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
        if not request.path.startswith("/api/v1/docs"):  # ninja's Swagger page loads its own inline script
            response.headers.setdefault("Content-Security-Policy", self.POLICY)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response
