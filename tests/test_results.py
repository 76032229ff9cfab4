"""Results (opt-in): a task with `result_ttl_ms` has its return value stored, in the same fenced
settle that deletes the row, under `emq:{q}:result:<id>` with that TTL; `Producer.result` waits
for it on the server (a result that arrived first is still seen) and raises typed errors for a
timeout, a dead job, or no result at all."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer, sync_producer
from emq_worker.errors import (
    ConfigError,
    JobFailedError,
    ResultTimeoutError,
    ResultUnavailableError,
)
from emq_worker.protocol.replies import SettleStatus
from emq_worker.protocol.values import Completion, HeldLease
from tests.support.conformance import RECEIPT_MS, Harness, held
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

TTL_MS = 60_000


def results_app() -> App:
    app = App()

    @app.task(result_ttl_ms=TTL_MS)
    async def add(ctx: JobContext, a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @app.task(result_ttl_ms=TTL_MS, max_attempts=1)
    async def explode(ctx: JobContext) -> None:
        raise ValueError("no way")

    @app.task(result_ttl_ms=TTL_MS)
    def not_json(ctx: JobContext) -> object:  # a sync handler, run in a thread
        return object()

    @app.task
    async def quiet(ctx: JobContext) -> int:
        return 42

    return app


async def completed(worker: Any, n: int) -> None:
    async def done() -> bool:
        return bool(worker.counters.completed + worker.counters.dead_lettered >= n)

    await eventually(done, what=f"{n} jobs settled")


async def test_the_return_value_is_stored_with_its_ttl_and_the_row_is_gone(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "add", {"a": 2, "b": 3})).job_id
    async with running_worker(worker_settings(queue_name, redis_url), results_app()) as worker:
        await completed(worker, 1)
    assert await producer.result(job_id, queue=queue_name, timeout=5) == {"sum": 5}
    key = f"emq:{{{queue_name}}}:result:{job_id}"
    assert json.loads(await client.get(key) or b"") == {"value": {"sum": 5}}
    assert 0 < await client.pttl(key) <= TTL_MS
    assert 0 < await client.pttl(key + ":ready") <= TTL_MS
    assert await producer.queue(queue_name).get_job(job_id) is None
    # Read again: a result is not consumed by reading it.
    assert await producer.result(job_id, queue=queue_name, timeout=0) == {"sum": 5}


async def test_waiters_that_start_first_block_on_the_server_and_all_get_it(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "add", {"a": 1, "b": 1})).job_id
    got: list[Any] = []
    both = anyio.Event()

    async def wait() -> None:
        got.append(await producer.result(job_id, queue=queue_name, timeout=30))
        if len(got) == 2:
            both.set()

    async def blocked() -> bool:
        clients = await client.client_list()
        return sum(1 for c in clients if c.get("cmd") == "blmove") >= 2

    async with anyio.create_task_group() as waiters:
        waiters.start_soon(wait)
        waiters.start_soon(wait)
        await eventually(blocked, what="two waiters blocked in BLMOVE")
        assert got == []
        async with running_worker(worker_settings(queue_name, redis_url), results_app()):
            with anyio.fail_after(20):
                await both.wait()
    assert got == [{"sum": 2}, {"sum": 2}]


async def test_a_pending_job_times_out_with_a_typed_error(client: Redis, queue_name: str) -> None:
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "add", {"a": 1, "b": 1})).job_id
    with pytest.raises(ResultTimeoutError, match="it is pending"):
        await producer.result(job_id, queue=queue_name, timeout=0.05)


async def test_a_dead_job_raises_job_failed_with_its_last_error(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "explode")).job_id
    async with anyio.create_task_group() as group:
        caught: list[JobFailedError] = []

        async def wait() -> None:
            with pytest.raises(JobFailedError) as failed:
                await producer.result(job_id, queue=queue_name, timeout=30)
            caught.append(failed.value)

        group.start_soon(wait)
        async with running_worker(worker_settings(queue_name, redis_url), results_app()) as w:
            await completed(w, 1)
    assert caught[0].last_error == "ValueError: no way"
    assert caught[0].job_id == job_id


@pytest.mark.parametrize(
    ("task", "why"),
    [("quiet", "completed without storing one"), ("not_json", "not JSON-serialisable")],
)
async def test_no_stored_result_raises_result_unavailable(
    client: Redis, redis_url: str, queue_name: str, task: str, why: str
) -> None:
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, task)).job_id
    async with running_worker(worker_settings(queue_name, redis_url), results_app()) as worker:
        await completed(worker, 1)
    assert worker.counters.completed == 1  # the work is done either way: never re-run for this
    with pytest.raises(ResultUnavailableError, match=why):
        await producer.result(job_id, queue=queue_name, timeout=1)


async def test_per_enqueue_result_ttl_overrides_the_task(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    kept = (await producer.enqueue(queue_name, "quiet", result_ttl_ms=5_000)).job_id
    dropped = (await producer.enqueue(queue_name, "add", {"a": 1, "b": 2}, result_ttl_ms=0)).job_id
    async with running_worker(worker_settings(queue_name, redis_url), results_app()) as worker:
        await completed(worker, 2)
    assert await producer.result(kept, queue=queue_name, timeout=1) == 42
    assert 0 < await client.pttl(f"emq:{{{queue_name}}}:result:{kept}") <= 5_000
    with pytest.raises(ResultUnavailableError):
        await producer.result(dropped, queue=queue_name, timeout=1)


async def test_a_stale_holder_stores_no_result(client: Redis, queue_name: str) -> None:
    conf = Harness.of(client, queue_name)
    job_id = await conf.enqueue()
    owned = await conf.claim_one()
    # The same token under another claim's nonce: a token handed out twice, fenced by the lock.
    stale = Completion(HeldLease(job_id, owned.token, "0" * 16), b'{"value":"late"}', TTL_MS)
    [result] = await conf.queue.settle([stale], RECEIPT_MS)
    assert result.status is SettleStatus.STALE
    assert not await conf.exists(f"{conf.keys.prefix}result:{job_id}")
    # The owner's completion, batched with a plain one, stores its result.
    plain_id = await conf.enqueue()
    plain = await conf.claim_one()
    owner = Completion(held(owned), b'{"value":"mine"}', TTL_MS)
    results = await conf.queue.settle([Completion(held(plain)), owner], RECEIPT_MS)
    assert [r.status for r in results] == [SettleStatus.OK, SettleStatus.OK]
    assert await conf.producer.result(job_id, queue=queue_name, timeout=0) == "mine"
    assert not await conf.exists(f"{conf.keys.prefix}result:{plain_id}")


async def test_a_result_expires_with_its_ttl(client: Redis, queue_name: str) -> None:
    conf = Harness.of(client, queue_name)
    job_id = await conf.enqueue()
    job = await conf.claim_one()
    await conf.queue.settle([Completion(held(job), b'{"value":1}', 50)], RECEIPT_MS)
    assert await conf.producer.result(job_id, queue=queue_name, timeout=0) == 1

    async def expired() -> bool:
        return not await conf.exists(f"{conf.keys.prefix}result:{job_id}")

    await eventually(expired, what="the result to expire")
    with pytest.raises(ResultUnavailableError, match="expired"):
        await conf.producer.result(job_id, queue=queue_name, timeout=0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p, q: p.result("JOB-nope", queue=q), "JOB"),
        (lambda p, q: p.result("JOB000004a83d2", queue=q, timeout=-1), "timeout must be >= 0"),
    ],
)
async def test_bad_result_arguments_are_refused(
    client: Redis, queue_name: str, call: Callable[[Producer, str], Any], message: str
) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        await call(Producer(client), queue_name)


def test_the_sync_producer_waits_too(redis_url: str, queue_name: str) -> None:
    with sync_producer(redis_url) as producer:
        job = producer.enqueue(queue_name, "add", {"a": 1, "b": 2}, result_ttl_ms=1_000)
        with pytest.raises(ResultTimeoutError, match=job.job_id):
            producer.result(job.job_id, queue=queue_name, timeout=0.05)
