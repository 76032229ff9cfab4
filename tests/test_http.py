"""The optional HTTP endpoint: /metrics, /healthz, /readyz and the `health` command."""

from __future__ import annotations

import asyncio
import math
import re
import socket
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer, Worker, WorkerSettings
from emq_worker.cli.main import main
from emq_worker.errors import ConfigError
from emq_worker.observe.exposition import DURATION_LE, BeatNotifier
from emq_worker.observe.http import BEATS_FRESH, beat_stale, fetch
from emq_worker.observe.metrics import DURATION_BUCKETS, Durations
from emq_worker.observe.sdnotify import Notifier
from emq_worker.runtime.queue_health import BACKOFF_CAP_S
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

HOST = "127.0.0.1"


def http_settings(queue: str, url: str, **overrides: Any) -> WorkerSettings:
    return worker_settings(queue, url, http=f"{HOST}:0", **overrides)


def port_of(worker: Worker) -> int:
    assert worker.http is not None
    assert worker.http.port is not None
    return worker.http.port


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample in a /metrics body, keyed by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metrics_count_jobs_and_read_queue_depths(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()

    @app.task
    async def noop(ctx: JobContext) -> None:
        return None

    @app.task(max_attempts=1)
    async def broken(ctx: JobContext) -> None:
        raise RuntimeError("broken")

    producer = Producer(client)
    for _ in range(3):
        await producer.enqueue(queue_name, "noop")
    await producer.enqueue(queue_name, "broken")
    await producer.enqueue(queue_name, "noop", delay_ms=60_000)
    async with running_worker(http_settings(queue_name, redis_url), app) as worker:
        await eventually(
            lambda: _now(worker.counters.completed == 3 and worker.counters.dead_lettered == 1),
            what="three completions and one dead letter",
        )
        status, body = await fetch(HOST, port_of(worker), "/metrics")
    assert status == 200
    got = samples(body)
    assert got[("emq_jobs_claimed_total", ())] == 4
    assert got[("emq_jobs_handed_off_total", ())] == 0  # all four waited in pending
    assert got[("emq_queue_events_total", (("event", "claimed"), ("queue", queue_name)))] == 4
    assert got[("emq_jobs_completed_total", ())] == 3
    assert got[("emq_jobs_failed_total", ())] == 0
    assert got[("emq_jobs_dead_lettered_total", (("via", "settle"),))] == 1
    assert got[("emq_jobs_in_flight", ())] == 0
    assert math.isfinite(got[("emq_beat_lag_seconds", ())])
    assert got[("emq_beat_lag_seconds", ())] >= 0
    depth = {
        state: got[("emq_queue_depth", (("queue", queue_name), ("state", state)))]
        for state in ("pending", "active", "scheduled", "dead")
    }
    assert depth == {"pending": 0, "active": 0, "scheduled": 1, "dead": 1}


async def test_jobs_are_counted_and_timed_per_queue_and_task(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()

    @app.task
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(0.02)

    @app.task(max_attempts=2)
    async def broken(ctx: JobContext) -> None:
        raise RuntimeError("broken")

    producer = Producer(client)
    for _ in range(3):
        await producer.enqueue(queue_name, "slow")
    await producer.enqueue(queue_name, "broken")
    async with running_worker(http_settings(queue_name, redis_url), app) as worker:
        await eventually(
            lambda: _now(worker.counters.completed == 3 and worker.counters.dead_lettered == 1),
            what="three completions and one dead letter",
        )
        status, body = await fetch(HOST, port_of(worker), "/metrics")
    assert status == 200
    got = samples(body)
    jobs = {
        (dict(labels)["task"], dict(labels)["outcome"]): value
        for (name, labels), value in got.items()
        if name == "emq_jobs_total" and dict(labels)["queue"] == queue_name
    }
    assert jobs == {
        ("slow", "completed"): 3,
        ("broken", "retried"): 1,
        ("broken", "dead_lettered"): 1,
    }
    runs = {"slow": 3, "broken": 2}  # every handler run whose outcome was written
    for task, count in runs.items():
        labels = (("queue", queue_name), ("task", task))
        assert got[("emq_job_duration_seconds_count", labels)] == count
        assert got[("emq_job_duration_seconds_sum", labels)] > 0
        buckets = [
            got[("emq_job_duration_seconds_bucket", (("le", le), *labels))] for le in DURATION_LE
        ]
        assert buckets == sorted(buckets), "buckets are cumulative"
        assert buckets[-1] == count  # +Inf holds every run
    slow_labels = (("queue", queue_name), ("task", "slow"))
    assert (
        got[("emq_job_duration_seconds_bucket", (("le", "0.01"), *slow_labels))] == 0
    )  # ran >= 20 ms
    assert got[("emq_job_duration_seconds_sum", slow_labels)] >= 0.05  # three 20 ms sleeps


def test_a_duration_on_a_bound_falls_in_that_bucket() -> None:
    histogram = Durations()
    for seconds in (0.0, 0.001, 0.0011, 300.0, 301.0):
        histogram.observe(seconds)
    assert histogram.count == 5
    cumulative = dict(zip((*DURATION_BUCKETS, float("inf")), histogram.cumulative(), strict=True))
    assert cumulative[0.001] == 2  # le is inclusive
    assert cumulative[0.005] == 3
    assert cumulative[60.0] == 3
    assert cumulative[300.0] == 4
    assert cumulative[float("inf")] == 5
    assert histogram.sum == 0.0 + 0.001 + 0.0011 + 300.0 + 301.0


async def test_two_workers_keep_their_own_metrics(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()

    @app.task
    async def noop(ctx: JobContext) -> None:
        return None

    await Producer(client).enqueue(queue_name, "noop")
    settings = http_settings(queue_name, redis_url)
    async with running_worker(settings, app) as first, running_worker(settings, app) as second:
        await eventually(
            lambda: _now(first.counters.completed + second.counters.completed == 1),
            what="the job's completion",
        )
        totals = []
        for worker in (first, second):
            _, body = await fetch(HOST, port_of(worker), "/metrics")
            totals.append(samples(body)[("emq_jobs_completed_total", ())])
    assert sorted(totals) == [0, 1]


async def test_readyz_fails_while_draining_and_the_sweep_is_measured(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    started, release = anyio.Event(), anyio.Event()

    @app.task
    async def hold(ctx: JobContext) -> None:
        started.set()
        await release.wait()

    await Producer(client).enqueue(queue_name, "hold")
    # A sweep every 500 ms; the lease is kept through a stall of the loop of up to 0.9 s (at a
    # 300 ms lease a loaded machine's stall self-fenced the job: in flight 0).
    settings = http_settings(queue_name, redis_url, lease_ms=1_500)
    async with running_worker(settings, app) as worker:
        port = port_of(worker)
        assert await fetch(HOST, port, "/readyz") == (200, "ok\n")
        assert await fetch(HOST, port, "/healthz") == (200, "ok\n")
        with anyio.fail_after(10):
            await started.wait()

        async def swept() -> bool:
            _, body = await fetch(HOST, port, "/metrics")
            got = samples(body)
            return got.get(("emq_renew_sweep_leases_count", ()), 0) >= 1

        await eventually(swept, what="a renewal sweep in /metrics")
        _, body = await fetch(HOST, port, "/metrics")
        got = samples(body)
        assert got[("emq_jobs_in_flight", ())] == 1
        assert got[("emq_renew_sweep_leases_sum", ())] >= 1
        assert got[("emq_renew_sweep_seconds_count", ())] >= 1

        worker.request_stop()
        status, reason = await fetch(HOST, port, "/readyz")
        assert (status, reason) == (503, "stopping: draining held jobs\n")
        assert (await fetch(HOST, port, "/healthz"))[0] == 200  # draining is alive
        release.set()


async def test_unknown_paths_and_methods_are_refused(redis_url: str, queue_name: str) -> None:
    async with running_worker(http_settings(queue_name, redis_url), App()) as worker:
        port = port_of(worker)
        assert (await fetch(HOST, port, "/nope"))[0] == 404
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        reply = await reader.read()
        writer.close()
    assert reply.startswith(b"HTTP/1.1 405 ")


def test_beat_is_stale_after_three_beats_and_the_longest_reconnect_pause() -> None:
    assert beat_stale(None, 10.0, 1.0, BACKOFF_CAP_S) == "the beat has not run yet"
    assert beat_stale(10.0, 10.0 + BEATS_FRESH * 1.0 + BACKOFF_CAP_S, 1.0, BACKOFF_CAP_S) is None
    reason = beat_stale(10.0, 18.5, 1.0, BACKOFF_CAP_S)
    assert reason == (
        "the beat last ran 8.5 s ago, more than 3 beats of 1 s plus 5 s of reconnect backoff"
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


async def test_healthz_fails_when_the_beat_stalls(redis_url: str, queue_name: str) -> None:
    async with running_worker(http_settings(queue_name, redis_url), App()) as worker:
        assert worker.http is not None
        beat = worker.http.exposition.collector.beat
        clock = FakeClock()
        stalled = BeatNotifier(Notifier(), clock, beat.beat_s, beat.grace_s)
        stalled.watchdog()
        worker.http.exposition.collector.beat = stalled
        clock.now += 3 * worker.settings.beat_ms / 1000 + BACKOFF_CAP_S + 0.5
        status, reason = await fetch(HOST, port_of(worker), "/healthz")
        worker.http.exposition.collector.beat = beat
    assert status == 503
    assert reason.startswith("the beat last ran 5.8 s ago")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


async def test_health_command_exit_codes(redis_url: str, queue_name: str) -> None:
    async with running_worker(http_settings(queue_name, redis_url), App()) as worker:
        address = f"{HOST}:{port_of(worker)}"
        ok = await anyio.to_thread.run_sync(invoke, "health", "--http", address)
    assert (ok.exit_code, ok.output) == (0, "ok\n")
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        free = probe.getsockname()[1]
    down = await anyio.to_thread.run_sync(invoke, "health", "--http", f"{HOST}:{free}")
    assert down.exit_code == 1
    assert f"cannot reach {HOST}:{free}" in down.output


@pytest.mark.parametrize("command", ["run", "health"])
def test_a_bad_http_address_is_rejected_by_name(command: str) -> None:
    extra = ["--queue", "q", "--app", "nowhere:app"] if command == "run" else []
    result = invoke(command, *extra, "--http", "localhost")
    assert result.exit_code == 2
    assert "--http" in result.output
    assert "must be HOST:PORT" in result.output
    assert "'localhost'" in result.output


@pytest.mark.parametrize("value", ["9464", ":9464", "host:port", "host:70000", "[::1]"])
def test_settings_reject_a_bad_http_address(value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"got {value!r}")):
        WorkerSettings(queues=("q",), http=value)


async def _now(value: bool) -> bool:
    await anyio.lowlevel.checkpoint()
    return value
