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
