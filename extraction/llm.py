"""The one module that talks to an OpenAI-compatible server (chat completions and embeddings).

Every call is recorded as an LlmCall with model, tokens and cost, tagged by tenant and layer.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from functools import lru_cache
from typing import Any

from django.conf import settings

# USD per 1M tokens (prompt, completion); unknown models are recorded at zero cost.
PRICES: dict[str, tuple[Decimal, Decimal]] = {
    "gpt-4o-mini": (Decimal("0.15"), Decimal("0.60")),
    "gpt-4o": (Decimal("2.50"), Decimal("10.00")),
    "gpt-4.1-mini": (Decimal("0.40"), Decimal("1.60")),
    "gpt-4.1-nano": (Decimal("0.10"), Decimal("0.40")),
    "text-embedding-3-small": (Decimal("0.02"), Decimal("0")),
}


def configured() -> bool:
    return bool(settings.OPENAI_API_KEY)


@lru_cache(maxsize=4)
def client(max_retries: int = 0):
    from openai import OpenAI

    return OpenAI(
        api_key=settings.OPENAI_API_KEY or "unset",
        base_url=settings.OPENAI_BASE_URL,
        timeout=settings.OPENAI_TIMEOUT_SECONDS,
        max_retries=max_retries,
    )


def cost_of(model: str, prompt_tokens: int, completion_tokens: int) -> Decimal:
    prompt_price, completion_price = PRICES.get(model, (Decimal(0), Decimal(0)))
    return (prompt_price * prompt_tokens + completion_price * completion_tokens) / Decimal(1_000_000)


def record_call(*, tenant_id: int, layer: str, model: str, prompt_tokens: int = 0, completion_tokens: int = 0,
                ok: bool = True, error: str = "", duration_ms: int = 0, batch_id: int | None = None):
    from memory_admin.models import LlmCall

    return LlmCall.objects.create(
        tenant_id=tenant_id,
        batch_id=batch_id,
        layer=layer,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost_of(model, prompt_tokens, completion_tokens),
        ok=ok,
        error=error[:300],
        duration_ms=duration_ms,
    )


def chat_json(*, tenant_id: int, layer: str, system: str, user: str, batch_id: int | None = None,
              model: str | None = None) -> dict[str, Any]:
    """One chat completion asking for a JSON object; records the call (failed ones too)."""
    model = model or settings.OPENAI_MODEL
    started = time.monotonic()
    try:
        response = client().chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            response_format={"type": "json_object"},
            temperature=0,
        )
    except Exception as exc:
        record_call(tenant_id=tenant_id, layer=layer, model=model, ok=False, error=f"{type(exc).__name__}: {exc}",
                    duration_ms=int((time.monotonic() - started) * 1000), batch_id=batch_id)
        raise
    usage = response.usage
    text = response.choices[0].message.content or ""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the model did not return a JSON object")
        error = ""
    except ValueError as exc:
        data, error = None, f"malformed JSON: {exc}"
    record_call(tenant_id=tenant_id, layer=layer, model=model,
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                ok=data is not None, error=error, duration_ms=int((time.monotonic() - started) * 1000),
                batch_id=batch_id)
    if data is None:
        raise MalformedOutput(error)
    return data


class MalformedOutput(ValueError):
    """The model answered, but not with the JSON object the schema asks for."""


def embed_texts(texts: list[str], *, dimensions: int) -> list[list[float]]:
    out: list[list[float]] = []
    for start in range(0, len(texts), 256):
        chunk = texts[start : start + 256]
        response = client(2).embeddings.create(
            model=settings.OPENAI_EMBEDDING_MODEL, input=chunk, dimensions=dimensions
        )
        out.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
    return out
