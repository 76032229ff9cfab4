"""The handlers' client (`ctx.redis`): the calls concurrent handlers make in one turn of the event
loop go out in a few writes, each caller gets its own reply (an error reply too), a cancelled
caller leaves the shared connection sound, and a blocking command holds up nobody else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker import App, JobContext, Producer
from emq_worker.jobs.producer import JobSpec
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.autopipeline import MAX_BATCHES, AutoPipelined, handler_client
from emq_worker.valkey.connection import connect
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

CALLERS = 200


@pytest.fixture
async def batched(client: Redis) -> AsyncIterator[AutoPipelined]:
    handlers = handler_client(client)
    assert isinstance(handlers, AutoPipelined)
    yield handlers
    await handlers.aclose()


INCR = b"$6\r\nINCRBY\r\n"  # redis-py sends incr() as INCRBY


def count_writes(handlers: AutoPipelined, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records, for every write on the client's connections, how many INCRBY commands it carried."""
    incrs: list[int] = []
    connection_class = handlers.connection_pool.connection_class
    send = connection_class.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        chunks = command if isinstance(command, list) else [command]
        data = b"".join(c if isinstance(c, bytes) else bytes(c) for c in chunks)
        incrs.append(data.upper().count(INCR))
        await send(self, command, check_health)

    monkeypatch.setattr(connection_class, "send_packed_command", counted)
    return incrs


async def test_the_calls_of_concurrent_callers_go_out_in_a_few_writes(
    batched: AutoPipelined, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    incrs = count_writes(batched, monkeypatch)
    key = f"{queue_name}:n"
    replies = await asyncio.gather(*(batched.incr(key) for _ in range(CALLERS)))
    assert sorted(replies) == list(range(1, CALLERS + 1))  # every caller got its own reply
    writes = [n for n in incrs if n]
    assert sum(writes) == CALLERS
    assert len(writes) <= MAX_BATCHES, writes  # not one write (and one round trip) per caller


async def test_a_batch_arms_one_timer_not_one_per_reply(
    batched: AutoPipelined, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's socket timeout still bounds every call, but as one loop timer per batch
    (and the pool's own for borrowing its connection): redis-py's per-reply timeout armed one
    per caller (about 6 us each, half of what a call costs the worker)."""
    assert batched.connection_pool.connection_kwargs["socket_timeout"]  # (a bound to keep)
    key = f"{queue_name}:n"
    for _ in range(3):  # connections made (their handshakes arm timers of their own)
        await asyncio.gather(*(batched.incr(key) for _ in range(CALLERS)))
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counted(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.append(when)
        return call_at(when, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counted)
    replies = await asyncio.gather(*(batched.incr(key) for _ in range(CALLERS)))
    monkeypatch.undo()
    assert sorted(replies) == list(range(3 * CALLERS + 1, 4 * CALLERS + 1))
    assert armed, "no timer bounds the batch's round trip: the socket timeout was dropped"
    assert len(armed) <= 2 * MAX_BATCHES, f"{len(armed)} timers: one per reply, not per batch"


async def test_a_reply_later_than_the_socket_timeout_fails_the_batch(
    redis_url: str, queue_name: str
) -> None:
    """One timer for the batch still ends it: every caller gets redis-py's TimeoutError, and the
    connection (its replies unread) is dropped, not handed to the next batch."""
    client = connect(redis_url, DEFAULT_WIRE_VERSION, socket_timeout_s=0.3)
    handlers = handler_client(client)
    try:
        await handlers.incr(f"{queue_name}:n")  # connected, scripts of the fence run
        await client.client_pause(1500, all=False)
        results = await asyncio.gather(
            *(handlers.incr(f"{queue_name}:n") for _ in range(3)), return_exceptions=True
        )
        assert all(isinstance(result, RedisTimeoutError) for result in results), results
        await client.client_unpause()
        assert await handlers.incr(f"{queue_name}:n") == 2  # a fresh connection, its own reply
    finally:
        await client.client_unpause()
        await handlers.aclose()
        await client.aclose()


async def test_an_error_reply_fails_its_own_caller_only(
    batched: AutoPipelined, queue_name: str
) -> None:
    text_key, number_key = f"{queue_name}:text", f"{queue_name}:number"
    await batched.set(text_key, "not a number")
    results = await asyncio.gather(
        batched.incr(number_key),
        batched.incr(text_key),
        batched.incr(number_key),
        return_exceptions=True,
    )
    assert results[0] == 1
    assert isinstance(results[1], ResponseError)
    assert results[2] == 2


async def test_a_caller_cancelled_mid_call_leaves_the_connections_sound(
    batched: AutoPipelined, queue_name: str
) -> None:
    key = f"{queue_name}:n"

    async def incr() -> None:
        await batched.incr(key)

    for round_ in range(20):
        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(incr)
            await anyio.lowlevel.checkpoint()  # the batch goes out, its replies still unread
            group.cancel_scope.cancel()
        # The cancelled callers' replies are read and dropped by their batch: a later caller on
        # the same connections reads its own reply, not one of theirs.
        assert await batched.incr(f"{queue_name}:fresh:{round_}") == 1
        assert await batched.set(f"{queue_name}:s", str(round_))
        assert await batched.get(f"{queue_name}:s") == str(round_).encode()


async def test_a_blocking_command_holds_up_no_other_caller(
    batched: AutoPipelined, queue_name: str
) -> None:
    list_key = f"{queue_name}:list"

    async def wait_for_item() -> None:
        await batched.blpop([list_key], 30)

    async with anyio.create_task_group() as group:
        group.start_soon(wait_for_item)
        with anyio.fail_after(5):  # well under the BLPOP's 30 s
            for n in range(1, 4):
                assert await batched.incr(f"{queue_name}:n") == n
        await batched.rpush(list_key, "x")  # ends the BLPOP


async def test_handlers_call_valkey_through_ctx_redis(redis_url: str, queue_name: str) -> None:
    app = App()
    key = f"{queue_name}:count"

    @app.task
    async def count(ctx: JobContext) -> None:
        await ctx.redis.incr(key)

    jobs = 300
    async with running_worker(worker_settings(queue_name, redis_url, concurrency=100), app):
        producer = Producer.from_url(redis_url)
        try:
            await producer.enqueue_many(queue_name, [JobSpec("count")] * jobs)
            client = producer.client

            async def counted() -> bool:
                return int(await client.get(key) or 0) == jobs

            await eventually(counted, timeout=30)
        finally:
            await producer.aclose()
