"""SAQ's runner, run by the SAQ virtualenv's python: imports only saq and the standard library.

The worker is SAQ's documented `Worker(queue, functions=..., concurrency=C)`, its other settings
at their defaults (dequeue_timeout 0: each of the C slots blocks in BLMOVE on its own connection).
Completions are counted by SAQ's `after_process` hook, which runs once the job is finished.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from saq import Queue, Worker  # type: ignore[import-not-found]

from bench.runners.common import (
    BODY_KEY,
    Body,
    Tally,
    concurrently,
    emit,
    exit_on_crash,
    paced,
    peer_modes,
    run_peer,
)

TALLY = Tally(n=0)


async def noop(ctx: dict[str, Any]) -> None:
    TALLY.start()


async def sleep1ms(ctx: dict[str, Any]) -> None:
    TALLY.start()
    await asyncio.sleep(0.001)


async def incr(ctx: dict[str, Any]) -> None:
    TALLY.start()
    await Body.incr()


async def incr_handler(ctx: dict[str, Any]) -> None:
    """The INCR through the client the framework hands its jobs (ctx["queue"].redis)."""
    TALLY.start()
    await ctx["queue"].redis.incr(BODY_KEY)


async def incr_cpu1ms(ctx: dict[str, Any]) -> None:
    TALLY.start()
    await Body.incr()
    Body.burn_cpu()


async def hold(ctx: dict[str, Any], *, seconds: float) -> None:
    TALLY.start()
    await asyncio.sleep(seconds)


async def probe(ctx: dict[str, Any], *, t: float) -> None:
    TALLY.probe(t)


FUNCTIONS = [noop, sleep1ms, incr, incr_handler, incr_cpu1ms, hold, probe]


async def queue_of(cfg: dict[str, Any]) -> Any:
    queue = Queue.from_url(cfg["url"], name=cfg["queue"])
    await queue.connect()
    return queue


async def enqueue(cfg: dict[str, Any]) -> None:
    """One by one and `width` concurrent (SAQ has no bulk enqueue; its queue also caps
    concurrent operations at max_concurrent_ops, 20 by default)."""
    queue = await queue_of(cfg)

    async def one() -> None:
        await queue.enqueue("noop")

    begun = time.perf_counter()
    for _ in range(cfg["single"]):
        await one()
    single_s = time.perf_counter() - begun
    begun = time.perf_counter()
    await concurrently(cfg["concurrent"], cfg["width"], one)
    emit("done", single_s=single_s, concurrent_s=time.perf_counter() - begun, bulk_s=None)


async def fill(cfg: dict[str, Any]) -> None:
    queue = await queue_of(cfg)
    kwargs = cfg.get("kwargs", {})
    # A held job must outlive SAQ's default 10 s job timeout; 0 means none.
    options = {"timeout": 0} if cfg["task"] == "hold" else {}

    async def one() -> None:
        await queue.enqueue(cfg["task"], **options, **kwargs)

    await concurrently(cfg["n"], cfg["width"], one)
    emit("done")


async def produce(cfg: dict[str, Any]) -> None:
    queue = await queue_of(cfg)

    async def send(t: float) -> None:
        await queue.enqueue("probe", t=t)

    await paced(cfg["n"], cfg["rate"], send)
    emit("done")


async def start_worker(cfg: dict[str, Any], n: int) -> tuple[Any, asyncio.Event, asyncio.Event]:
    """Start SAQ's worker; return it, an event set when n jobs started, one when n finished."""
    all_started, all_done = asyncio.Event(), asyncio.Event()
    TALLY.n = n
    TALLY.on_all_started = all_started.set
    finished = 0

    async def after_process(ctx: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        if finished == n:
            all_done.set()

    worker = Worker(
        await queue_of(cfg),
        functions=FUNCTIONS,
        concurrency=cfg["concurrency"],
        after_process=after_process,
    )
    task = asyncio.get_running_loop().create_task(worker.start())
    task.add_done_callback(exit_on_crash)
    return worker, all_started, all_done


MODES = peer_modes(
    enqueue=enqueue,
    fill=fill,
    produce=produce,
    start_worker=start_worker,
    completed=lambda worker: worker.queue.complete,
    tally=TALLY,
)


def main() -> None:
    run_peer(MODES)


if __name__ == "__main__":
    main()
