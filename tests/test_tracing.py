"""OpenTelemetry (the `otel` extra): a PRODUCER span per enqueue whose W3C trace context rides in
the JSON envelope, and a CONSUMER span per attempt linked to it, recorded by the SDK's in-memory
exporter; an envelope field a worker does not know is ignored; without the API, nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.jobs import codec
from tests.support.running import running_worker, worker_settings
from tests.support.spans import of, recording
from tests.support.wait import eventually


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recording() as exporter:
        yield exporter


app = App()


@app.task(max_attempts=2)
async def charge(ctx: JobContext, amount: int) -> None:
    if amount < 0:
        raise ValueError(f"declined {amount}")
    assert ctx.span is trace.get_current_span()  # the attempt's span is current
    ctx.span.add_event("charged")


async def test_each_attempt_is_a_consumer_span_linked_to_the_enqueue(
    spans: InMemorySpanExporter, client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    good = await producer.enqueue(queue_name, "charge", {"amount": 5})
    bad = await producer.enqueue(queue_name, "charge", {"amount": -1})
    sends = of(spans, queue_name, trace.SpanKind.PRODUCER)
    assert [span.name for span in sends] == [f"send {queue_name}"] * 2
    stored = await producer.queue(queue_name).get_job(good.job_id)
    assert stored is not None
    send = sends[0].get_span_context()
    assert send is not None
    traceparent = f"00-{send.trace_id:032x}-{send.span_id:016x}-{send.trace_flags:02x}"
    assert json.loads(stored["payload"])["trace"] == {"traceparent": traceparent}

    async with running_worker(worker_settings(queue_name, redis_url), app):

        async def three_attempts() -> bool:
            return len(of(spans, queue_name, trace.SpanKind.CONSUMER)) == 3

        await eventually(three_attempts, what="three attempts traced")
    processed = of(spans, queue_name, trace.SpanKind.CONSUMER)
    by_job: dict[str, list[ReadableSpan]] = {}
    for span in processed:
        by_job.setdefault(str((span.attributes or {})["messaging.message.id"]), []).append(span)
    (done,) = by_job[good.job_id]
    assert done.status.status_code is trace.StatusCode.UNSET
    assert [event.name for event in done.events] == ["charged"]
    assert [link.context.span_id for link in done.links] == [send.span_id]
    assert [link.context.trace_id for link in done.links] == [send.trace_id]
    failed = by_job[bad.job_id]
    assert [(s.attributes or {})["emq.attempt"] for s in failed] == [1, 2]
    assert {s.status.status_code for s in failed} == {trace.StatusCode.ERROR}
    assert {s.status.description for s in failed} == {"ValueError: declined -1"}
    bad_send = sends[1].get_span_context()
    assert bad_send is not None
    assert {link.context.span_id for s in failed for link in s.links} == {bad_send.span_id}


def test_an_envelope_field_a_worker_does_not_know_is_ignored() -> None:
    traced = b'{"task":"charge","kwargs":{"a":1},"trace":{"traceparent":"00-ab-cd-01"},"x":2}'
    assert codec.decode_job(traced) == ("charge", {"a": 1}, None)
    assert codec.decode_message(traced).trace == {"traceparent": "00-ab-cd-01"}
    # A malformed trace never costs the job.
    assert codec.decode_message(b'{"task":"charge","trace":[1]}').trace is None


def test_without_the_api_nothing_is_imported_and_enqueue_spans_are_no_ops() -> None:
    script = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the otel extra were not installed\n"
        "import emq_worker\n"
        "from emq_worker.jobs import codec, tracing\n"
        "assert not tracing.ENABLED\n"
        "with tracing.send_span('q', 1) as carrier:\n"
        "    assert carrier is None\n"
        "span = tracing.start_attempt('q', 't', 'JOB00000000001', 1, {'traceparent': 'x'})\n"
        "assert span is None\n"
        "with tracing.current(span):\n"
        "    tracing.failed(span, 'boom')\n"
        "    tracing.fenced(span, 'JOB00000000001', 1, 'settle', '2')\n"
        "    tracing.lease_lost(span, 'JOB00000000001', 1, '2', 'renew')\n"
        "tracing.end(span)\n"
        "assert b'trace' not in codec.encode('t', {}, None, None)\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry') and sys.modules[m]]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_spans_start_once_an_application_sets_a_provider_not_before() -> None:
    script = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from emq_worker.jobs import tracing\n"
        "assert tracing.ENABLED and not tracing.active()\n"
        "assert tracing._by_getter() is tracing._by_global() is None\n"
        "with tracing.send_span('q', 1) as carrier:\n"
        "    assert carrier is None\n"
        "assert tracing.start_attempt('q', 't', 'JOB00000000001', 1, None) is None\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "assert tracing.active()\n"
        "with tracing.send_span('q', 1) as carrier:\n"
        "    assert carrier is not None and carrier['traceparent'].startswith('00-')\n"
        "span = tracing.start_attempt('q', 't', 'JOB00000000001', 1, carrier)\n"
        "assert span is not None and span.is_recording()\n"
        "with tracing.current(span):\n"
        "    assert trace.get_current_span() is span\n"
        "tracing.end(span)\n"
        "assert not span.is_recording()\n"
        "assert tracing._by_getter() is tracing._by_global() is not None  # (an API sans global)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_tracing_cost_bench_runs_every_mode_as_it_says(repo_root: Path) -> None:
    """`python -m bench.tracing_cost` (figures in docs/explanation/performance.md), tiny: each
    mode really is what its row says (no tracer called without a provider)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.tracing_cost", "--jobs", "200", "--repeat", "1"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ")][2:]
    assert [(row[0], row[1]) for row in rows] == [
        ("| absent (no otel extra)", "no"),
        ("| api, no SDK configured", "no"),
        ("| SDK, sampled out (ALWAYS_OFF)", "yes"),
        ("| SDK, recording (exporter drops)", "yes"),
    ]


async def test_a_parented_app_puts_each_attempt_in_the_enqueuers_trace(
    spans: InMemorySpanExporter, client: Redis, redis_url: str, queue_name: str
) -> None:
    parented = App(trace_parented=True)
    parented.task(max_attempts=2)(charge.fn)
    await Producer(client).enqueue(queue_name, "charge", {"amount": -1})
    (send,) = of(spans, queue_name, trace.SpanKind.PRODUCER)
    sent = send.get_span_context()
    assert sent is not None
    async with running_worker(worker_settings(queue_name, redis_url), parented):

        async def two_attempts() -> bool:
            return len(of(spans, queue_name, trace.SpanKind.CONSUMER)) == 2

        await eventually(two_attempts, what="two attempts traced")
    attempts = of(spans, queue_name, trace.SpanKind.CONSUMER)
    assert [(span.attributes or {})["emq.attempt"] for span in attempts] == [1, 2]
    for span in attempts:
        assert span.parent is not None
        assert (span.parent.trace_id, span.parent.span_id) == (sent.trace_id, sent.span_id)
        context = span.get_span_context()
        assert context is not None
        assert context.trace_id == sent.trace_id
        assert span.links == ()
