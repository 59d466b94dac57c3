"""What a fact's text must be before anything is stored: its size, its normal form, its hash, and the
screening of the identifiers and metadata stored with it."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

from django.conf import settings

from memory_admin.errors import Invalid, TooLarge
from memory_admin.models import TenantSettings
from memory_admin.selectors.access import Principal
from memory_admin.services.pii import find as find_pii
from memory_admin.services.pii import scan
from memory_admin.services.screening import screen_text

_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower().rstrip(".!?;: ")


def content_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()


def check_fact_size(content: str, metadata: dict | None = None) -> None:
    size = len(content.encode())
    if size > settings.MAX_FACT_BYTES:
        raise TooLarge(
            f"A fact may hold at most {settings.MAX_FACT_BYTES} bytes; this one has {size}.",
            code="content_too_large",
            limit=settings.MAX_FACT_BYTES,
        )
    if not content.strip():
        raise Invalid("A fact needs some content.", code="invalid", field="content")
    if metadata is not None and len(json.dumps(metadata).encode()) > settings.MAX_METADATA_BYTES:
        raise TooLarge(
            f"metadata may hold at most {settings.MAX_METADATA_BYTES} bytes of JSON.",
            code="metadata_too_large",
            limit=settings.MAX_METADATA_BYTES,
        )


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON tree, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _redacted(value: Any, policy: dict[str, str]) -> Any:
    """The JSON tree with every string (keys included) redacted under the policy."""
    if isinstance(value, str):
        return scan(value, policy).content
    if isinstance(value, dict):
        return {_redacted(k, policy): _redacted(v, policy) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, policy) for v in value]
    return value


def screen_key_and_metadata(
    principal: Principal,
    key: str | None,
    metadata: dict[str, Any] | None,
    *,
    route: str,
    memory_user_id: int,
    tenant: TenantSettings,
) -> tuple[str | None, dict[str, Any] | None]:
    """The slot name and the agent's metadata are stored verbatim too: scanned like the content (a
    secret refuses the write), and redacted string by string where the policy says so."""
    # The strings themselves, one a line (not their JSON form, whose escapes would hide a line break).
    text = "\n".join(_strings([key or "", metadata or {}]))
    if not find_pii(text):
        return key, metadata
    if not screen_text(principal, text, route=route, memory_user_id=memory_user_id).redacted:
        return key, metadata
    return _redacted(key, tenant.pii_policy), _redacted(metadata, tenant.pii_policy)
