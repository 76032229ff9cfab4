"""OpenTelemetry's SDK for the tracing tests: one tracer provider for the whole session
(OpenTelemetry refuses to replace it), whose in-memory exporter keeps spans only while a test
records."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()


class WhileRecording(SimpleSpanProcessor):
    """Exports only while a test records: the provider stays set for the rest of the session,
    and later tests' spans are not kept."""

    recording = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.recording:
            super().on_end(span)


PROCESSOR = WhileRecording(EXPORTER)


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """The session's provider set (once), and its exporter cleared and recording meanwhile."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(PROCESSOR)
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    PROCESSOR.recording = True
    try:
        yield EXPORTER
    finally:
        PROCESSOR.recording = False
        EXPORTER.clear()


def of(exporter: InMemorySpanExporter, queue: str, kind: trace.SpanKind) -> list[ReadableSpan]:
    """The finished spans of `kind` on `queue`, in the order they ended."""
    return [
        span
        for span in exporter.get_finished_spans()
        if span.kind is kind and (span.attributes or {}).get("messaging.destination.name") == queue
    ]


def attempt(span: ReadableSpan) -> int:
    value = (span.attributes or {})["emq.attempt"]
    assert isinstance(value, int)
    return value
