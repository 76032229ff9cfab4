"""Progress and job logs: a running job reports progress (row field + an event on
`emq:{q}:events`) and appends job log lines (`job:<id>:logs`, the last N kept), both fenced by
its claim, so a stale holder is refused; the log shares the row's fate."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from emq_worker import App, JobContext, Producer
from emq_worker.cli.main import main
from emq_worker.errors import ConfigError, FencedError
from emq_worker.jobs.context import JobServices
from emq_worker.jobs.writes import append_log, read_log, report_progress
from emq_worker.protocol.replies import ClaimedJob
from tests.support.conformance import RECEIPT_MS, Harness, held
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


@pytest.fixture
async def events(client: Redis, queue_name: str) -> AsyncIterator[PubSub]:
    pubsub = client.pubsub()
    await pubsub.subscribe(f"emq:{{{queue_name}}}:events")
    await pubsub.get_message(timeout=5)  # the subscribe confirmation
    yield pubsub
    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py


async def next_event(pubsub: PubSub, kind: str = "progress") -> dict[str, Any]:
    """The next event of `kind` on the channel (lifecycle events of other kinds are skipped)."""
    with anyio.fail_after(10):
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
            if message is not None:
                event: dict[str, Any] = json.loads(message["data"])
                if event.get("event") == kind:
                    return event


async def admin(*args: str) -> Result:
    """`emq-worker <args>` in a thread (the CLI runs its own event loop)."""
    return await anyio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


def context(conf: Harness, job: ClaimedJob, nonce: str | None = None) -> JobContext:
    held = job._replace(nonce=nonce or job.nonce)
    return JobContext(held, "t", JobServices(writer=conf.queue))


async def test_progress_writes_the_row_and_publishes_the_event(
    conf: Harness, events: PubSub
) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    await context(conf, job).progress({"done": 3, "of": 10})
    assert json.loads(await conf.field(job_id, "progress") or b"") == {"done": 3, "of": 10}
    event = await next_event(events)
    at_ms = event.pop("at_ms")
    assert event == {
        "event": "progress",
        "queue": conf.queue.name,
        "job_id": job_id,
        "job": job_id,  # EchoMQ's name for it
        "attempts": 1,
        "progress": {"done": 3, "of": 10},
    }
    (sec, usec) = await conf.client.time()
    assert 0 <= sec * 1000 + usec // 1000 - at_ms < 60_000  # the server's clock, in ms


async def test_a_stale_holder_cannot_report_progress(conf: Harness, events: PubSub) -> None:
    job_id = await conf.enqueue()
    first = await conf.claim_one()
    await conf.fail(first, delay_ms=0)  # back to pending at once
    second = await conf.claim_one()  # attempts 2: the first claim's token is stale
    with pytest.raises(FencedError) as refused:
        await context(conf, first).progress(50)
    assert (refused.value.status, refused.value.detail) == ("stale", "2")
    # Same token, another claim's nonce (a token handed out twice): fenced by the lock.
    with pytest.raises(FencedError, match="stale"):
        await context(conf, second, nonce="0" * 16).progress(50)
    assert await conf.field(job_id, "progress") is None
    await context(conf, second).progress(50)
    assert (await next_event(events))["attempts"] == 2  # only the owner's event was published
    assert await conf.field(job_id, "progress") == b"50"


async def test_a_reaped_or_finished_job_refuses_progress(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one()
    assert (await conf.complete(job)).status == "ok"
    with pytest.raises(FencedError, match="gone"):
        await report_progress(conf.queue, held(job), 1)
    await conf.enqueue()
    job = await conf.claim_one()
    await conf.queue.release([held(job)])  # back to pending, the token still matching
    with pytest.raises(FencedError, match="state 'pending'"):
        await report_progress(conf.queue, held(job), 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "number or a JSON object"),
        ("half", "number or a JSON object"),
        (math.nan, "finite"),
        ({"x": object()}, "not JSON-serialisable"),
        ({"blob": "x" * 5000}, "at most 4096"),
    ],
)
async def test_bad_progress_values_are_refused_naming_them(
    conf: Harness, value: object, message: str
) -> None:
    await conf.enqueue()
    job = await conf.claim_one()
    with pytest.raises(ConfigError, match=message):
        await report_progress(conf.queue, held(job), value)


async def test_job_log_appends_and_keeps_the_last_n(conf: Harness) -> None:
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    ctx = context(conf, job)
    assert await ctx.append_log("line-1") == 1
    assert await ctx.append_log("line-2") == 2
    assert await ctx.append_log("line-3", keep=2) == 2
    assert await read_log(conf.queue, job_id) == ["line-2", "line-3"]


async def test_a_stale_holder_cannot_append_to_the_log(conf: Harness) -> None:
    job_id = await conf.enqueue()
    first = await conf.claim_one()
    await conf.fail(first, delay_ms=0)
    await conf.claim_one()
    with pytest.raises(FencedError, match="stale"):
        await context(conf, first).append_log("late")
    assert await read_log(conf.queue, job_id) == []


async def test_bad_log_lines_are_refused(conf: Harness) -> None:
    await conf.enqueue()
    lease = held(await conf.claim_one())
    with pytest.raises(ConfigError, match="must be a str"):
        await append_log(conf.queue, lease, b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at most 65536 bytes"):
        await append_log(conf.queue, lease, "x" * 70_000)
    with pytest.raises(ConfigError, match="keep must be an integer >= 1"):
        await append_log(conf.queue, lease, "x", keep=0)


async def test_the_log_shares_the_rows_fate(conf: Harness) -> None:
    """Completion deletes it; a dead job keeps it; removing the dead job deletes it."""
    completed_id = await conf.enqueue()
    job = await conf.claim_one()
    await append_log(conf.queue, held(job), "ran")
    assert (await conf.complete(job)).status == "ok"
    assert not await conf.exists(conf.keys.logs(completed_id))

    dead_id = await conf.enqueue()
    job = await conf.claim_one()
    await append_log(conf.queue, held(job), "about to fail")
    await conf.queue.fail(held(job), RECEIPT_MS, delay_ms=0, max_attempts=0, error="boom")
    assert await read_log(conf.queue, dead_id) == ["about to fail"]
    assert await conf.queue.remove(dead_id) is True
    assert not await conf.exists(conf.keys.logs(dead_id))


async def test_a_handler_reports_progress_and_logs_through_a_worker(
    client: Redis, redis_url: str, queue_name: str, events: PubSub
) -> None:
    app = App()
    reported = anyio.Event()
    release = anyio.Event()

    @app.task(max_attempts=1)
    async def crunch(ctx: JobContext, n: int) -> None:
        await ctx.append_log(f"crunching {n}")
        await ctx.progress(50)
        ctx.log.info("half way")  # the structlog logger is still there
        reported.set()
        await release.wait()
        raise RuntimeError("give up")  # dead: the log stays for the operator

    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "crunch", {"n": 7})).job_id
    async with running_worker(worker_settings(queue_name, redis_url), app) as worker:
        with anyio.fail_after(10):
            await reported.wait()
        event = await next_event(events)
        assert (event["event"], event["job_id"], event["progress"]) == ("progress", job_id, 50)
        row = await producer.queue(queue_name).get_job(job_id)
        assert row is not None
        assert row["progress"] == "50"
        release.set()
        await eventually(lambda: _value(worker.counters.dead_lettered == 1), what="dead letter")

    result = await admin("logs", "--queue", queue_name, job_id, "--redis-url", redis_url)
    assert result.exit_code == 0, result.output
    assert result.output == "crunching 7\n"
    as_json = await admin("logs", "-q", queue_name, job_id, "--json", "--redis-url", redis_url)
    assert json.loads(as_json.output)["lines"] == ["crunching 7"]


async def test_the_logs_command_names_an_unknown_job(conf: Harness, redis_url: str) -> None:
    await conf.enqueue()  # the queue exists; the job does not
    missing = conf.mint()
    result = await admin("logs", "--queue", conf.queue.name, missing, "--redis-url", redis_url)
    assert result.exit_code == 1
    assert missing in result.output


async def _value(value: bool) -> bool:
    return value
