"""OpenTelemetry tracing (the `otel` extra): a PRODUCER span per enqueue call, whose W3C trace
context travels in the job's JSON envelope (`"trace": {"traceparent": ...}`), and a CONSUMER
span per attempt, linked to it, current while the handler runs and open until the attempt's
outcome is written, with an event when the fence refuses one of its writes or its lease is lost.

Without opentelemetry-api nothing is imported and every function here is a no-op; with it but no
tracer provider set by the application, no span is started either. A worker
that predates this field ignores it (the codec reads only `task`, `kwargs` and `options`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import ModuleType
from typing import Any, Final

SYSTEM: Final = "echomq"
TRACER: Final = "emq_worker"
FENCED: Final = "emq.fenced"
"""The span event of a write the fence refused (see `fenced`)."""
LEASE_LOST: Final = "emq.lease_lost"
"""The span event of a lease the worker gave up (see `lease_lost`)."""


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


class _Tracers:
    """The tracer spans start from, looked up again only when the API's global provider
    changes: its getter reads the environment on every call, and an SDK provider's `get_tracer`
    builds a new tracer each time (together some microseconds a job)."""

    __slots__ = ("provider", "tracer")

    def __init__(self) -> None:
        self.provider: Any = _UNSEEN
        """The global provider the tracer was looked up for."""
        self.tracer: Any = None
        """None while no application has set a provider: the API's proxy records nothing, and
        skipping it spares each enqueue and attempt its no-op span work."""

    def update(self, trace: ModuleType, provider: Any) -> Any:
        if self.provider is _UNSEEN:
            trace.get_tracer_provider()  # once: it loads one OTEL_PYTHON_TRACER_PROVIDER names
            provider = getattr(trace, "_TRACER_PROVIDER", None)
        recording = provider is not None and not isinstance(provider, trace.NoOpTracerProvider)
        self.tracer = provider.get_tracer(TRACER) if recording else None
        self.provider = provider
        return self.tracer


_UNSEEN: Final = object()
_TRACERS = _Tracers()


def _by_global() -> Any:
    """The tracer, or None while tracing is off (the API absent, or no provider set)."""
    if _otel is None:
        return None
    trace = _otel[0]
    # The API's global, read directly: the hot path of an untraced job is this comparison.
    provider = trace._TRACER_PROVIDER
    if provider is _TRACERS.provider:
        return _TRACERS.tracer
    return _TRACERS.update(trace, provider)


def _by_getter() -> Any:
    """`_by_global` for an API without the `_TRACER_PROVIDER` global: its getter each time."""
    if _otel is None:
        return None
    trace = _otel[0]
    provider = trace.get_tracer_provider()
    if provider is _TRACERS.provider:
        return _TRACERS.tracer
    recording = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    _TRACERS.tracer = provider.get_tracer(TRACER) if recording else None
    _TRACERS.provider = provider
    return _TRACERS.tracer


_tracer: Final = (
    _by_getter if _otel is not None and not hasattr(_otel[0], "_TRACER_PROVIDER") else _by_global
)
_NO_CARRIER: Final = nullcontext(None)
_NOTHING: Final = nullcontext()


def active() -> bool:
    """Whether spans are started: the API is installed and an application set a provider."""
    return _tracer() is not None


def send_span(queue: str, count: int) -> AbstractContextManager[dict[str, str] | None]:
    """A PRODUCER span around one enqueue call of `count` jobs on `queue`, which yields the
    carrier (`traceparent`, and `tracestate` when set) each JSON envelope of the call takes,
    or None (a shared no-op context while tracing is off)."""
    tracer = _tracer()
    if tracer is None or _otel is None:
        return _NO_CARRIER
    return _sending(_otel, tracer, queue, count)


@contextmanager
def _sending(
    otel: tuple[ModuleType, ModuleType], tracer: Any, queue: str, count: int
) -> Iterator[dict[str, str] | None]:
    trace, propagate = otel
    attributes: dict[str, str | int] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with tracer.start_as_current_span(
        f"send {queue}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield carrier or None


def start_attempt(
    queue: str,
    task: str,
    job_id: str,
    attempt: int,
    carrier: Mapping[str, str] | None,
    *,
    parented: bool = False,
) -> Any:
    """A started CONSUMER span for one attempt of a job, linked to the span that enqueued it
    (when its envelope carries one), or a child of that span when `parented` (one trace from the
    web request to every attempt), or None when tracing is off. It is not current yet
    (`current` makes it so while the handler runs) and stays open until the attempt's outcome
    is written or the job is dropped (`end`), so a fenced write or a lost lease lands on it."""
    tracer = _tracer()
    if tracer is None or _otel is None:
        return None
    trace, propagate = _otel
    links = []
    parent = None
    if carrier:
        sent = propagate.extract(dict(carrier))
        context = trace.get_current_span(sent).get_span_context()
        if context.is_valid and parented:
            parent = sent
        elif context.is_valid:
            links.append(trace.Link(context))
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": job_id,
        "emq.task": task,
        "emq.attempt": attempt,
    }
    return tracer.start_span(
        f"process {queue}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    )


def current(span: Any) -> AbstractContextManager[Any]:
    """Make the attempt's span current (the handler's own spans become its children); it is
    not ended on exit, nor marked by an exception (the job's outcome decides its status)."""
    if span is None or _otel is None:
        return _NOTHING
    using: AbstractContextManager[Any] = _otel[0].use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )
    return using


def end(span: Any) -> None:
    """End the attempt's span: its outcome is written, or the job was dropped."""
    if span is not None:
        span.end()


def failed(span: Any, error: str) -> None:
    """Mark the attempt's span failed with the error the job records."""
    if span is None or _otel is None:
        return
    trace = _otel[0]
    span.set_status(trace.Status(trace.StatusCode.ERROR, error))


def fenced(
    span: Any, job_id: str, token: int | str, write: str, current: str, refusal: str = "stale"
) -> None:
    """Event FENCED on the attempt's span: its `write` (settle, renew, progress, log) was
    refused by the fence; `current` is what the server holds instead (another claim's attempts
    or lock value; '' when the row is gone), `refusal` the script's word (stale, gone, state)."""
    if span is None:
        return
    span.add_event(
        FENCED,
        {
            "messaging.message.id": job_id,
            "emq.token": int(token),
            "emq.write": write,
            "emq.refusal": refusal,
            "emq.current": current,
        },
    )


def lease_lost(span: Any, job_id: str, token: int | str, current: str, reason: str) -> None:
    """Event LEASE_LOST on the attempt's span: the worker gave the job up (`reason`: `renew`,
    the server reported the lease lost, `current` being what it holds instead; `unconfirmed`,
    no renewal confirmed it for a whole lease). Its handler is cancelled, its result unwritten."""
    if span is None:
        return
    span.add_event(
        LEASE_LOST,
        {
            "messaging.message.id": job_id,
            "emq.token": int(token),
            "emq.reason": reason,
            "emq.current": current,
        },
    )
