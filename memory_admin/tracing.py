"""OpenTelemetry traces across web → Celery → Postgres → model calls. Off by default.

Turned on by the standard variables: `OTEL_TRACES_EXPORTER` (`otlp`, `console`, or both comma-separated;
`none` is off) or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
which implies `otlp`); `OTEL_SDK_DISABLED=true` wins over both. The SDK reads the rest itself:
`OTEL_SERVICE_NAME` (default here `memory-admin`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`. OTLP goes over http/protobuf.

Instrumented: Django (requests), Celery (publish and run, context in the message headers), psycopg
(every statement of Django and of the broker's transport). The OpenAI SDK talks through its own HTTP
library (httpx2), which no instrumentation covers: `llm_span` wraps each model call instead.

Each process sets itself up after it forked: gunicorn workers in `wsgi.py`, Celery pool children in
`worker_process_init`, beat in `beat_init`. The trace context travels in the Celery message's headers,
so a request, the task it sent, the SQL that task ran and its model call share one trace.

Spans name routes, never values: the Django span's URL attributes are replaced by the route pattern,
query strings are dropped, SQL is recorded with its placeholders only (no parameters), model calls
record model, tokens and tenant id, no prompt or answer.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager

from memory_admin import config
from memory_admin.logsafe import mask_path

log = logging.getLogger(__name__)
_initialised = False
_URL_ATTRIBUTES = ("http.target", "http.url", "url.full", "url.path", "url.query")


def exporter_names() -> list[str]:
    if config.get("OTEL_SDK_DISABLED"):
        return []
    raw = config.get("OTEL_TRACES_EXPORTER") or ""
    if not raw and (config.get("OTEL_EXPORTER_OTLP_ENDPOINT") or config.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        raw = "otlp"
    return [name.strip().lower() for name in raw.split(",") if name.strip() and name.strip().lower() != "none"]


def enabled() -> bool:
    return bool(exporter_names())


def enabled_here() -> bool:
    """Whether this process set tracing up (`init`): a request's span exists only then."""
    return _initialised


def init(role: str) -> bool:
    """Set up tracing in this process (once) if the environment asks for it. Returns whether it is on."""
    global _initialised
    if _initialised or not enabled():
        return _initialised
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    attributes = {"memory_admin.role": role}
    named = config.get("OTEL_SERVICE_NAME") or "service.name=" in (config.get("OTEL_RESOURCE_ATTRIBUTES") or "")
    if not named:
        attributes["service.name"] = "memory-admin"
    provider = TracerProvider(resource=Resource.create(attributes))
    for processor in _processors():
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _instrument()
    _initialised = True
    return True


def _processors() -> list:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    out = []
    for name in exporter_names():
        if name == "console":
            # For debugging: written as each span ends, to the real stdout (Celery redirects sys.stdout
            # into its log).
            out.append(_without_bare_sql(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.__stdout__))))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            out.append(_without_bare_sql(BatchSpanProcessor(OTLPSpanExporter())))
        else:
            log.warning("tracing: unknown exporter %r in OTEL_TRACES_EXPORTER ignored (otlp, console)", name)
    return out


def _without_bare_sql(inner):
    """Wraps a span processor: drops SQL spans that belong to no trace. The broker's polling (kombu's
    Postgres transport asks twice a second) would otherwise outnumber every real trace."""
    from opentelemetry.sdk.trace import SpanProcessor

    class WithoutBareSql(SpanProcessor):
        def on_start(self, span, parent_context=None) -> None:
            inner.on_start(span, parent_context=parent_context)

        def _on_ending(self, span) -> None:
            inner._on_ending(span)

        def on_end(self, span) -> None:
            scope = span.instrumentation_scope.name if span.instrumentation_scope else ""
            if span.parent is None and "psycopg" in scope:
                return
            inner.on_end(span)

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return WithoutBareSql()


def _instrument() -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    DjangoInstrumentor().instrument(response_hook=_route_only)
    CeleryInstrumentor().instrument()
    PsycopgInstrumentor().instrument(capture_parameters=False)


def _route_only(span, request, response) -> None:
    """The URL of a request names a user, a thread, a query: keep only the route pattern."""
    if not span.is_recording():
        return
    match = getattr(request, "resolver_match", None)
    route = "/" + match.route if match is not None and match.route else ""
    if not route:
        route = mask_path(request.path.split("?", 1)[0])
    for name in _URL_ATTRIBUTES:
        span.set_attribute(name, route if name != "url.query" else "")
    span.set_attribute("http.route", route)


@contextmanager
def llm_span(*, tenant_id: int, layer: str, model: str):
    """A span around one model call: model, layer, tenant id and (`llm_usage`) tokens; a failure is
    marked with its exception's type only (a provider's message may quote the request)."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    with trace.get_tracer("memory_admin.llm").start_as_current_span(
        f"llm {layer}",
        kind=trace.SpanKind.CLIENT,
        record_exception=False,
        set_status_on_exception=False,
        attributes={
            "gen_ai.system": "openai",
            "gen_ai.request.model": model,
            "memory_admin.layer": layer,
            "memory_admin.tenant_id": tenant_id,
        },
    ) as span:
        try:
            yield span
        except Exception as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def llm_usage(response) -> None:
    """The tokens of a model's answer, on the current span (a no-op when tracing is off)."""
    from opentelemetry import trace

    span = trace.get_current_span()
    usage = getattr(response, "usage", None)
    if span.is_recording() and usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", getattr(usage, "prompt_tokens", 0) or 0)
        span.set_attribute("gen_ai.usage.output_tokens", getattr(usage, "completion_tokens", 0) or 0)


def connect_celery() -> None:
    """Pool children set tracing up after the fork (a span processor's thread does not survive one);
    a worker whose pool does not fork (threads, solo: `manage.py up`'s workers) sets it up itself."""
    from celery.signals import beat_init, worker_init, worker_process_init

    worker_process_init.connect(lambda **_: init("worker"), weak=False)
    worker_init.connect(lambda sender=None, **_: None if _forks(sender) else init("worker"), weak=False)
    beat_init.connect(lambda **_: init("beat"), weak=False)


def _forks(worker) -> bool:
    pool = getattr(worker, "pool_cls", "prefork")
    name = pool if isinstance(pool, str) else f"{getattr(pool, '__module__', '')}.{getattr(pool, '__name__', '')}"
    return "prefork" in name or "processes" in name
