"""arq's runner, run by the arq virtualenv's python: imports only arq and the standard library.

The worker is arq's documented `Worker(functions=..., redis_pool=..., max_jobs=C)`, its other
settings at their defaults (poll_delay 0.5 s, keep_result 1 h). Completions are counted by arq's
`after_job_end` hook, which runs once the job's result has been written.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from arq import Worker, create_pool  # type: ignore[import-not-found]
from arq.connections import RedisSettings  # type: ignore[import-not-found]

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
HOLD_TIMEOUT_S = 3600


async def noop(ctx: dict[str, Any]) -> None:
    TALLY.start()


async def sleep1ms(ctx: dict[str, Any]) -> None:
    TALLY.start()
    await asyncio.sleep(0.001)


async def incr(ctx: dict[str, Any]) -> None:
    TALLY.start()
    await Body.incr()


async def incr_handler(ctx: dict[str, Any]) -> None:
    """The INCR through the client the framework hands its jobs (ctx["redis"])."""
    TALLY.start()
    await ctx["redis"].incr(BODY_KEY)


async def incr_cpu1ms(ctx: dict[str, Any]) -> None:
    TALLY.start()
    await Body.incr()
    Body.burn_cpu()


async def hold(ctx: dict[str, Any], seconds: float) -> None:
    TALLY.start()
    await asyncio.sleep(seconds)


async def probe(ctx: dict[str, Any], t: float) -> None:
    TALLY.probe(t)


FUNCTIONS = [noop, sleep1ms, incr, incr_handler, incr_cpu1ms, hold, probe]


async def pool(cfg: dict[str, Any]) -> Any:
    return await create_pool(RedisSettings.from_dsn(cfg["url"]), default_queue_name=cfg["queue"])


async def enqueue(cfg: dict[str, Any]) -> None:
    """One by one and `width` concurrent (arq has no bulk enqueue)."""
    redis = await pool(cfg)

    async def one() -> None:
        await redis.enqueue_job("noop")

    begun = time.perf_counter()
    for _ in range(cfg["single"]):
        await one()
    single_s = time.perf_counter() - begun
    begun = time.perf_counter()
    await concurrently(cfg["concurrent"], cfg["width"], one)
    emit("done", single_s=single_s, concurrent_s=time.perf_counter() - begun, bulk_s=None)


async def fill(cfg: dict[str, Any]) -> None:
    redis = await pool(cfg)
    args = cfg.get("kwargs", {})

    async def one() -> None:
        await redis.enqueue_job(cfg["task"], **args)

    await concurrently(cfg["n"], cfg["width"], one)
    emit("done")


async def produce(cfg: dict[str, Any]) -> None:
    redis = await pool(cfg)

    async def send(t: float) -> None:
        await redis.enqueue_job("probe", t)

    await paced(cfg["n"], cfg["rate"], send)
    emit("done")


async def start_worker(cfg: dict[str, Any], n: int) -> tuple[Any, asyncio.Event, asyncio.Event]:
    """Start arq's worker; return it, an event set when n jobs started, one when n finished."""
    all_started, all_done = asyncio.Event(), asyncio.Event()
    TALLY.n = n
    TALLY.on_all_started = all_started.set
    finished = 0

    async def after_job_end(ctx: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        if finished == n:
            all_done.set()

    worker = Worker(
        functions=FUNCTIONS,
        queue_name=cfg["queue"],
        redis_pool=await pool(cfg),
        max_jobs=cfg["concurrency"],
        after_job_end=after_job_end,
        handle_signals=False,
        job_timeout=HOLD_TIMEOUT_S if cfg["mode"] == "hold" else 300,
    )
    task = asyncio.get_running_loop().create_task(worker.async_run())
    task.add_done_callback(exit_on_crash)
    return worker, all_started, all_done


MODES = peer_modes(
    enqueue=enqueue,
    fill=fill,
    produce=produce,
    start_worker=start_worker,
    completed=lambda worker: worker.jobs_complete,
    tally=TALLY,
)


def main() -> None:
    run_peer(MODES)


if __name__ == "__main__":
    main()
