"""One broken queue rests alone: a worker on queues a and b keeps running b's jobs while a's key
is wrong-typed, logs `queue_failed` for a, and runs a's jobs again (`queue_recovered`) once the
key is fixed. The backoff bookkeeping (queue_health.py) is tested without Redis."""

from __future__ import annotations

import random
from collections.abc import MutableMapping
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from emq_worker import App, JobContext, Producer
from emq_worker.protocol.keys import QueueKeys
from emq_worker.runtime.queue_health import BACKOFF_CAP_S, QueueHealth
from emq_worker.valkey.cluster import ClusterUnavailableError
from emq_worker.valkey.failures import queue_scoped
from tests.support.running import running_worker, worker_settings
from tests.support.wait import until

Log = list[MutableMapping[str, Any]]


def _events(logs: Log, event: str, queue: str) -> Log:
    return [e for e in logs if e["event"] == event and e.get("queue") == queue]


def _app(ran: list[str]) -> App:
    app = App()

    @app.task
    async def work(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    return app


async def test_a_wrong_typed_pending_key_rests_its_queue_alone(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    broken, healthy = f"{queue_name}.a", f"{queue_name}.b"
    ran: list[str] = []
    producer = Producer(client)
    await client.set(QueueKeys.of(broken).pending, "not a sorted set")
    with structlog.testing.capture_logs() as logs:
        async with running_worker(worker_settings((broken, healthy), redis_url), _app(ran)):
            await until(lambda: bool(_events(logs, "queue_failed", broken)), what="queue_failed")
            jobs = [(await producer.enqueue(healthy, "work", {})).job_id for _ in range(5)]
            await until(lambda: set(jobs) <= set(ran), what="b's jobs while a is broken")
            assert await client.type(QueueKeys.of(broken).pending) == b"string"  # still broken
            failed = _events(logs, "queue_failed", broken)
            assert "WRONGTYPE" in failed[0]["error"]
            assert 0 < failed[0]["retry_in_ms"] <= BACKOFF_CAP_S * 1000
            assert not [e for e in logs if e["event"] == "beat_failed"]
            assert not _events(logs, "queue_failed", healthy)

            await client.delete(QueueKeys.of(broken).pending)
            fixed = (await producer.enqueue(broken, "work", {})).job_id
            await until(lambda: fixed in ran, what="a's job after the key was fixed")
            await until(
                lambda: bool(_events(logs, "queue_recovered", broken)), what="queue_recovered"
            )


async def test_a_wrong_typed_wake_key_does_not_stop_the_other_queue(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    broken, healthy = f"{queue_name}.a", f"{queue_name}.b"
    ran: list[str] = []
    producer = Producer(client)
    wake = QueueKeys.of(broken).wake
    await client.set(wake, "not a list")
    with structlog.testing.capture_logs() as logs:
        async with running_worker(worker_settings((broken, healthy), redis_url), _app(ran)):
            await until(lambda: bool(_events(logs, "queue_failed", broken)), what="queue_failed")
            jobs = [(await producer.enqueue(healthy, "work", {})).job_id for _ in range(5)]
            await until(lambda: set(jobs) <= set(ran), what="b's jobs while a's wake is broken")
            assert await client.type(wake) == b"string"
            assert not [e for e in logs if e["event"] == "beat_failed"]

            await client.delete(wake)
            await until(
                lambda: bool(_events(logs, "queue_recovered", broken)), what="queue_recovered"
            )
            later = (await producer.enqueue(broken, "work", {})).job_id
            await until(lambda: later in ran, what="a's job after the wake key was fixed")


def test_a_failing_queue_rests_on_a_capped_growing_backoff() -> None:
    health = QueueHealth(random.Random(7))
    pauses = [health.failed("a", now=0.0) for _ in range(12)]
    assert all(0 < pause <= BACKOFF_CAP_S for pause in pauses)
    assert pauses[0] <= 0.2
    assert pauses[-1] >= BACKOFF_CAP_S / 2
    assert health.failures("a") == 12
    assert health.resting()
    assert not health.ready("a", now=0.0)
    assert health.ready("b", now=0.0)
    assert health.ready("a", now=BACKOFF_CAP_S)
    assert health.succeeded("a")
    assert not health.succeeded("a")
    assert health.ready("a", now=0.0)
    assert health.failures("a") == 0


def test_next_retry_names_only_pauses_still_to_come() -> None:
    health = QueueHealth(random.Random(1))
    assert health.next_retry(now=0.0) is None
    pause_a = health.failed("a", now=0.0)
    pause_b = health.failed("b", now=10.0)
    assert health.next_retry(now=0.0) == pause_a
    # a's pause is over but a is not retried yet: the park must not end at once (a spin)
    assert health.next_retry(now=pause_a) == 10.0 + pause_b
    assert health.next_retry(now=20.0) is None


def test_a_wake_key_streak_keeps_claims_going_and_ends_only_by_the_wake_key() -> None:
    health = QueueHealth(random.Random(3))
    pause = health.failed("a", now=0.0, wake=True)
    assert health.ready("a", now=0.0)  # claims go on
    assert not health.resting()
    assert health.failing("a")
    assert not health.wake_due("a", now=0.0)
    assert health.wake_due("a", now=pause)
    assert not health.succeeded("a")  # a claim that worked says nothing of the wake key
    assert health.succeeded("a", wake=True)
    assert not health.failing("a")


def test_only_a_queues_own_failures_are_isolated() -> None:
    assert queue_scoped(ResponseError("WRONGTYPE Operation against a key holding the wrong kind"))
    assert queue_scoped(ClusterUnavailableError("the node holding {a} is down"))
    assert not queue_scoped(ResponseError("OOM command not allowed when used memory > maxmemory"))
    assert not queue_scoped(ResponseError("READONLY You can't write against a read only replica"))
    assert not queue_scoped(RedisConnectionError("Connection refused"))  # the whole server
