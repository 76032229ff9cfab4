"""Waits that must end when the thing happens, not at the next once-a-second re-check or beat:
a result waiter wakes when its job goes dead, and a newly registered (or resumed) repeat wakes a
parked worker so its first occurrence is minted on time.

Each test makes the old fallback long (a re-check of a minute, a beat of a minute) and waits
with a deadline far below it: without the wake the deadline passes."""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, JobFailedError, Producer
from emq_worker.jobs import repeat, results
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

LONG_S = 60.0
DEADLINE_S = 10.0


async def blocked_on(client: Redis, command: str) -> bool:
    return any(c.get("cmd") == command for c in await client.client_list())


async def test_a_result_waiter_wakes_when_its_job_goes_dead(
    client: Redis, redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RECHECK_S", LONG_S)
    go = anyio.Event()
    app = App()

    @app.task(max_attempts=1, result_ttl_ms=60_000)
    async def doomed(ctx: JobContext) -> None:
        await go.wait()
        raise RuntimeError("no result for you")

    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "doomed")).job_id
    raised: list[BaseException] = []

    async def wait() -> None:
        try:
            await producer.result(job, queue=queue_name, timeout=LONG_S)
        except JobFailedError as exc:
            raised.append(exc)

    async with running_worker(worker_settings(queue_name, redis_url), app):
        with anyio.fail_after(DEADLINE_S):
            async with anyio.create_task_group() as group:
                group.start_soon(wait)
                await eventually(lambda: blocked_on(client, "blmove"), what="the waiter blocked")
                go.set()
    [error] = raised
    assert "no result for you" in str(error)


def minting_app() -> App:
    app = App()

    @app.task
    async def tick(ctx: JobContext) -> None:
        return None

    return app


async def minted(client: Redis, queue: str, name: str) -> int:
    info = await repeat.get_repeat(client, queue, name)
    return 0 if info is None else info.minted


@pytest.mark.parametrize("how", ["register", "resume"])
async def test_a_new_repeat_wakes_a_parked_worker(
    client: Redis, redis_url: str, queue_name: str, how: str
) -> None:
    producer = Producer(client)
    if how == "resume":
        await producer.repeat(queue_name, "r", "tick", every_ms=200)
        await repeat.pause_repeat(client, queue_name, "r")
    settings = worker_settings(queue_name, redis_url, beat_ms=int(LONG_S * 1000))
    async with running_worker(settings, minting_app()):
        await eventually(lambda: blocked_on(client, "blpop"), what="the worker parked")
        if how == "register":
            await producer.repeat(queue_name, "r", "tick", every_ms=200)
        else:
            await repeat.resume_repeat(client, queue_name, "r")

        async def three() -> bool:
            return await minted(client, queue_name, "r") >= 3

        await eventually(three, timeout=DEADLINE_S, what="three occurrences minted")
