"""OpenTelemetry spans across attempts (the SDK's in-memory exporter): a retried job is two
CONSUMER spans linked to its one PRODUCER span, and a write the fence refuses, or a lease the
server reports lost, is an event on the span of the attempt that lost the job."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.jobs.tracing import FENCED, LEASE_LOST
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.testing import expect_completed, outcome, run_until_idle
from tests.support.running import running_worker, worker_settings
from tests.support.spans import attempt, of, recording
from tests.support.wait import eventually, until


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recording() as exporter:
        yield exporter


def attempt_span(spans: InMemorySpanExporter, queue: str, number: int) -> ReadableSpan | None:
    """The finished CONSUMER span of attempt `number` on `queue`, if any."""
    found = [s for s in of(spans, queue, trace.SpanKind.CONSUMER) if attempt(s) == number]
    assert len(found) <= 1, found
    return found[0] if found else None


async def ended(spans: InMemorySpanExporter, queue: str, number: int) -> ReadableSpan:
    """Attempt `number`'s span, once it has ended (after its settle, or once it was dropped)."""

    async def probe() -> ReadableSpan | None:
        return attempt_span(spans, queue, number)

    span = await eventually(probe, what=f"attempt {number}'s span ended")
    assert span is not None
    return span


def events(span: ReadableSpan, name: str) -> list[dict[str, object]]:
    return [dict(event.attributes or {}) for event in span.events if event.name == name]


async def reclaim(queue: Queue, job_id: JobId) -> ClaimedJob:
    """Another claim takes the job over, through the real scripts: its lease's deadline is put
    in the past (as if its holder had stopped renewing), the reaper returns it to pending, and a
    claim leases it again, bumping its attempts (the fencing token). Repeated while a renewal
    that came in between puts the deadline back."""

    async def taken() -> ClaimedJob | None:
        await queue.client.zadd(queue.keys.active, {job_id: 0})
        await queue.reap(10, 25)
        jobs = (await queue.claim(1, 60_000)).jobs
        return jobs[0] if jobs else None

    claimed = await eventually(taken, what=f"job {job_id} claimed again")
    assert claimed is not None
    return claimed


async def test_a_retried_job_is_two_consumer_spans_both_linked_to_its_enqueue(
    spans: InMemorySpanExporter, client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()

    @app.task(max_attempts=3)
    async def flaky(ctx: JobContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("provider unreachable")
        return "charged"

    producer = Producer(client)
    job = await producer.enqueue(queue_name, "flaky")
    (send,) = of(spans, queue_name, trace.SpanKind.PRODUCER)
    counters = await run_until_idle(app, queue_name, url=redis_url)
    assert (counters.retried, counters.completed) == (1, 1)
    expect_completed(await outcome(producer.queue(queue_name), job.job_id), attempts=2)

    first, second = (attempt_span(spans, queue_name, n) for n in (1, 2))
    assert first is not None
    assert second is not None
    assert len(of(spans, queue_name, trace.SpanKind.CONSUMER)) == 2
    sent = send.get_span_context()
    assert sent is not None
    for span in (first, second):
        assert span.name == f"process {queue_name}"
        assert (span.attributes or {})["messaging.message.id"] == job.job_id
        assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
            (sent.trace_id, sent.span_id)
        ]
        assert span.parent is None  # linked by default, not parented
        assert not events(span, FENCED)
        assert not events(span, LEASE_LOST)
    assert first.status.status_code is trace.StatusCode.ERROR
    assert first.status.description == "ConnectionError: provider unreachable"
    assert second.status.status_code is trace.StatusCode.UNSET


async def test_a_settle_refused_by_the_fence_is_an_event_on_the_stale_attempts_span(
    spans: InMemorySpanExporter, client: Redis, redis_url: str, queue_name: str
) -> None:
    """The holder of attempt 1 does not renew; its lease lapses, the job is claimed again
    (attempt 2), and when the first handler returns its settle is refused: FENCED on its span."""
    started: list[int] = []
    finish = anyio.Event()
    app = App()

    @app.task
    async def slow(ctx: JobContext) -> None:
        started.append(ctx.attempt)
        await finish.wait()

    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "slow")).job_id
    holder = worker_settings(queue_name, redis_url, renew=False, concurrency=1)
    async with running_worker(holder, app) as worker:
        await until(lambda: started == [1], what="attempt 1 running")
        taken = await reclaim(producer.queue(queue_name), job)
        assert int(taken.token) == 2
        finish.set()
        await until(lambda: worker.counters.fenced == 1, what="attempt 1's settle fenced")
        span = await ended(spans, queue_name, 1)
    assert worker.counters.completed == 0
    (fenced,) = events(span, FENCED)
    current = str(fenced.pop("emq.current"))
    assert current.partition(":")[0] == "2", current  # attempt 2's token (and its lock value)
    assert fenced == {
        "messaging.message.id": job,
        "emq.token": 1,
        "emq.write": "settle",
        "emq.refusal": "stale",
    }
    assert not events(span, LEASE_LOST)
    assert await producer.queue(queue_name).state_of(job) == "active"  # attempt 2's, untouched


async def test_a_lease_the_renewal_finds_taken_is_fenced_and_lost_on_the_attempts_span(
    spans: InMemorySpanExporter, client: Redis, redis_url: str, queue_name: str
) -> None:
    """While attempt 1 runs, the job is claimed again (attempt 2): the holder's next renewal is
    refused, so its span gets FENCED (the renew) then LEASE_LOST, and ends when the handler
    stops, with nothing written."""
    events_seen: list[str] = []
    app = App()

    @app.task
    async def long_job(ctx: JobContext) -> None:
        events_seen.append("started")
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            events_seen.append("cancelled")
            raise

    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "long_job")).job_id
    holder = worker_settings(queue_name, redis_url, lease_ms=600, concurrency=1)
    async with running_worker(holder, app) as worker:
        await until(lambda: events_seen == ["started"], what="attempt 1 running")
        await reclaim(producer.queue(queue_name), job)
        span = await ended(spans, queue_name, 1)
    assert events_seen == ["started", "cancelled"]
    assert (worker.counters.leases_lost, worker.counters.completed) == (1, 0)
    assert [event.name for event in span.events] == [FENCED, LEASE_LOST]
    (fenced,) = events(span, FENCED)
    (lost,) = events(span, LEASE_LOST)
    assert str(fenced["emq.current"]).partition(":")[0] == "2"
    assert fenced["emq.write"] == "renew"
    assert lost == {
        "messaging.message.id": job,
        "emq.token": 1,
        "emq.reason": "renew",
        "emq.current": fenced["emq.current"],
    }
    assert span.status.status_code is trace.StatusCode.UNSET
