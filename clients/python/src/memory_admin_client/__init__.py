"""Typed client for the memory-admin agent API."""

from memory_admin_client._calls import OPERATIONS
from memory_admin_client.client import AsyncMemoryAdmin, MemoryAdmin
from memory_admin_client.errors import (
    AlreadySuperseded,
    BadRequest,
    Blocked,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Invalid,
    MemoryAdminError,
    NotFound,
    RateLimited,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
    VersionConflict,
)
from memory_admin_client.models import (
    BatchItemResult,
    BatchResult,
    Context,
    Fact,
    FactPage,
    History,
    MemoryUser,
    MessagesAccepted,
    Notebook,
    SearchHit,
    SearchResult,
    Skill,
    SkillSummary,
    ThreadClosed,
    UserPage,
    WriteResult,
)

__version__ = "0.1.0"
__all__ = [
    "OPERATIONS", "AsyncMemoryAdmin", "MemoryAdmin",
    "AlreadySuperseded", "BadRequest", "Blocked", "Conflict", "ConnectionFailed", "Forbidden", "Invalid",
    "MemoryAdminError", "NotFound", "RateLimited", "ServerError", "TooLarge", "Unauthorized", "Unavailable",
    "VersionConflict",
    "BatchItemResult", "BatchResult", "Context", "Fact", "FactPage", "History", "MemoryUser", "MessagesAccepted",
    "Notebook",
    "SearchHit", "SearchResult", "Skill", "SkillSummary", "ThreadClosed", "UserPage", "WriteResult",
]
