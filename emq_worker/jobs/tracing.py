"""OpenTelemetry tracing (the `otel` extra): a PRODUCER span per enqueue call, whose W3C trace
context travels in the job's JSON envelope (`"trace": {"traceparent": ...}`), and a CONSUMER
span per attempt, linked to it, current while the handler runs.

Without opentelemetry-api nothing is imported and every function here is a no-op; with it but no
tracer provider set by the application, no span is started either. A worker
that predates this field ignores it (the codec reads only `task`, `kwargs` and `options`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Final

SYSTEM: Final = "echomq"
TRACER: Final = "emq_worker"


def _load() -> tuple[ModuleType, ModuleType] | None:
    try:
        return (
            importlib.import_module("opentelemetry.trace"),
            importlib.import_module("opentelemetry.propagate"),
        )
    except ImportError:
        return None


_otel = _load()
ENABLED: Final = _otel is not None
"""opentelemetry-api is installed."""


def _active() -> tuple[ModuleType, ModuleType] | None:
    """The API, once an application set a tracer provider: until then the API's proxy records
    nothing, and skipping it spares each enqueue and attempt some 20 us of no-op span work."""
    if _otel is None:
        return None
    trace = _otel[0]
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return _otel


@contextmanager
def send_span(queue: str, count: int) -> Iterator[dict[str, str] | None]:
    """A PRODUCER span around one enqueue call of `count` jobs on `queue`; yields the carrier
    (`traceparent`, and `tracestate` when set) each JSON envelope of the call takes, or None."""
    otel = _active()
    if otel is None:
        yield None
        return
    trace, propagate = otel
    attributes: dict[str, str | int] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(
        f"send {queue}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield carrier or None


@contextmanager
def process_span(
    queue: str, task: str, job_id: str, attempt: int, carrier: Mapping[str, str] | None
) -> Iterator[Any]:
    """A CONSUMER span for one attempt of a job, current while its handler runs, linked to the
    span that enqueued it (when its envelope carries one); yields it (None without the API)."""
    otel = _active()
    if otel is None:
        yield None
        return
    trace, propagate = otel
    links = []
    if carrier:
        context = trace.get_current_span(propagate.extract(dict(carrier))).get_span_context()
        if context.is_valid:
            links.append(trace.Link(context))
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": job_id,
        "emq.task": task,
        "emq.attempt": attempt,
    }
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(
        f"process {queue}",
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def failed(span: Any, error: str) -> None:
    """Mark the attempt's span failed with the error the job records."""
    if span is None or _otel is None:
        return
    trace = _otel[0]
    span.set_status(trace.Status(trace.StatusCode.ERROR, error))
