"""The one module that talks to an OpenAI-compatible server (chat completions and embeddings).

Every call is recorded as an LlmCall with model, tokens and cost, tagged by tenant and layer.

What the server says is untrusted: its error bodies can quote the request or the API key, its usage
counts can be anything. A call is recorded with the error's class and status only (`AuthenticationError
401`, `malformed: schema: facts must be a list`), never the server's or pydantic's message, and with
its token counts clamped to 0..USAGE_MAX; the row is written before the metrics, so a paid call is
never left unrecorded.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from functools import lru_cache
from typing import Any

from django.conf import settings

from memory_admin import config, metrics, tracing
from memory_admin.models import LlmCall
from memory_admin.services.pii import scrub

# USD per 1M tokens (prompt, completion); unknown models are recorded at zero cost.
PRICES: dict[str, tuple[Decimal, Decimal]] = {
    "gpt-4o-mini": (Decimal("0.15"), Decimal("0.60")),
    "gpt-4o": (Decimal("2.50"), Decimal("10.00")),
    "gpt-4.1-mini": (Decimal("0.40"), Decimal("1.60")),
    "gpt-4.1-nano": (Decimal("0.10"), Decimal("0.40")),
    "gpt-4.1": (Decimal("2.00"), Decimal("8.00")),
    "o4-mini": (Decimal("1.10"), Decimal("4.40")),
    "o3-mini": (Decimal("1.10"), Decimal("4.40")),
    "gpt-3.5-turbo": (Decimal("0.50"), Decimal("1.50")),
    "text-embedding-3-small": (Decimal("0.02"), Decimal("0")),
    "text-embedding-3-large": (Decimal("0.13"), Decimal("0")),
}


@lru_cache(maxsize=1)
def _prices() -> dict[str, tuple[Decimal, Decimal]]:
    """The table above plus LLM_PRICES from the environment, e.g. for a self-hosted model:
    LLM_PRICES='{"llama-3.1-8b": [0.05, 0.08]}' (USD per 1M prompt, completion tokens)."""
    prices = dict(PRICES)
    for name, (prompt, completion) in (config.get("LLM_PRICES") or {}).items():
        prices[name] = (Decimal(str(prompt)), Decimal(str(completion)))
    return prices


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


def price_of(model: str) -> tuple[Decimal, Decimal]:
    """Exact name first, then the longest known prefix: dated snapshots such as
    gpt-4o-mini-2024-07-18 cost what their family costs."""
    prices = _prices()
    if model in prices:
        return prices[model]
    for name in sorted(prices, key=len, reverse=True):
        if model.startswith(name + "-"):
            return prices[name]
    return Decimal(0), Decimal(0)


def cost_of(model: str, prompt_tokens: int, completion_tokens: int) -> Decimal:
    prompt_price, completion_price = price_of(model)
    return (prompt_price * prompt_tokens + completion_price * completion_tokens) / Decimal(1_000_000)


# Token counts of one call past this are the server's error, not usage (no model reads 10M tokens).
USAGE_MAX = 10_000_000


def usage_count(value: Any) -> int:
    """A token count from the server's `usage`, as a number we can store: 0..USAGE_MAX."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    try:
        count = int(value)
    except (OverflowError, ValueError):  # inf, nan
        return USAGE_MAX if value == float("inf") else 0
    return min(max(count, 0), USAGE_MAX)


def call_error(exc: BaseException) -> str:
    """What a failed call records: the exception's class and the HTTP status, never its message."""
    import openai

    if isinstance(exc, MalformedOutput):
        return f"malformed: {exc.reason}"
    if isinstance(exc, openai.APIStatusError):
        return f"{type(exc).__name__} {exc.status_code}"
    return type(exc).__name__


def record_call(
    *,
    tenant_id: int,
    layer: str,
    model: str,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    ok: bool = True,
    error: str = "",
    duration_ms: int = 0,
    batch_id: int | None = None,
):
    prompt_tokens, completion_tokens = usage_count(prompt_tokens), usage_count(completion_tokens)
    cost = cost_of(model, prompt_tokens, completion_tokens)
    # The row first: a failure of the metrics must not leave a paid call unrecorded.
    call = LlmCall.objects.create(
        tenant_id=tenant_id,
        batch_id=batch_id,
        layer=layer,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost,
        ok=ok,
        error=scrub(error)[:300],  # callers pass `call_error`; scrubbed again in case one does not
        duration_ms=duration_ms,
    )
    metrics.llm_call(
        tenant_id=tenant_id,
        layer=layer,
        model=model,
        ok=ok,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost,
    )
    return call


def chat_json(
    *, tenant_id: int, layer: str, system: str, user: str, batch_id: int | None = None, model: str | None = None
) -> dict[str, Any]:
    """One chat completion asking for a JSON object; records the call (failed ones too)."""
    data, _ = complete_json(tenant_id=tenant_id, layer=layer, system=system, user=user, batch_id=batch_id, model=model)
    return data


def complete_json(
    *,
    tenant_id: int,
    layer: str,
    system: str,
    user: str,
    batch_id: int | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
) -> tuple[dict[str, Any], Any]:
    """Like `chat_json`, and also returns the recorded LlmCall (tokens, cost) of a successful call.

    Raises the SDK's own exceptions (timeouts, 429, 5xx...) or MalformedOutput; `classify()` tells
    the caller which of them are worth a retry. The SDK's built-in retries are off: callers own retries
    so that every attempt is recorded and bounded.
    """
    model = model or settings.OPENAI_MODEL
    started = time.monotonic()
    extra: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}
    try:
        with tracing.llm_span(tenant_id=tenant_id, layer=layer, model=model):
            response = client().chat.completions.create(
                model=model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                response_format={"type": "json_object"},
                temperature=0,
                **extra,
            )
            tracing.llm_usage(response)
    except Exception as exc:
        record_call(
            tenant_id=tenant_id,
            layer=layer,
            model=model,
            ok=False,
            error=call_error(exc),
            duration_ms=int((time.monotonic() - started) * 1000),
            batch_id=batch_id,
        )
        raise
    usage = response.usage
    text = (response.choices[0].message.content or "") if response.choices else ""
    try:
        data = json.loads(text)
        error = None if isinstance(data, dict) else MalformedOutput("not a JSON object")
    except ValueError:  # its message quotes nothing, but says nothing a person needs either
        data, error = None, MalformedOutput("not JSON")
    call = record_call(
        tenant_id=tenant_id,
        layer=layer,
        model=model,
        prompt_tokens=getattr(usage, "prompt_tokens", 0),
        completion_tokens=getattr(usage, "completion_tokens", 0),
        ok=error is None,
        error=call_error(error) if error else "",
        duration_ms=int((time.monotonic() - started) * 1000),
        batch_id=batch_id,
    )
    if error is not None:
        raise error
    return data, call


def classify(exc: BaseException) -> tuple[bool, str, float | None]:
    """(retryable, a reason a person can read, seconds the server asked us to wait) for an LLM failure.

    The reason is ours (a class and a status), never the server's message. Timeouts, connection
    errors, 429 and 5xx are transient; malformed output is worth another try
    (temperature 0 is not fully deterministic across servers). Other 4xx (bad key, unknown model,
    request too large) will fail the same way again, so they are not retried.
    """
    import openai

    if isinstance(exc, MalformedOutput):
        return True, f"the model returned malformed output ({exc.reason})", None
    if isinstance(exc, openai.APITimeoutError):
        return True, f"the model did not answer within {settings.OPENAI_TIMEOUT_SECONDS:g} s (timeout)", None
    if isinstance(exc, openai.APIConnectionError):
        return True, f"cannot reach the model server ({type(exc).__name__})", None
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = None
        try:
            retry_after = float(exc.response.headers.get("retry-after", ""))
        except (TypeError, ValueError):
            retry_after = None
        if status == 429:
            return True, "rate limited by the model server (429)", retry_after
        if status >= 500:
            return True, f"the model server failed ({status})", retry_after
        # Its body is the server's text (a 401 can quote the key): the status says what to fix.
        return False, f"the model server refused the request ({status})", None
    return False, f"{type(exc).__name__} (message withheld)", None


class MalformedOutput(ValueError):
    """The model answered, but not with the JSON object the schema asks for. `reason` is ours, never
    the model's text: `not JSON`, `schema: facts must be a list`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def embed_texts(texts: list[str], *, dimensions: int) -> list[list[float]]:
    out: list[list[float]] = []
    for start in range(0, len(texts), 256):
        chunk = texts[start : start + 256]
        response = client(2).embeddings.create(
            model=settings.OPENAI_EMBEDDING_MODEL, input=chunk, dimensions=dimensions
        )
        out.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
    return out
