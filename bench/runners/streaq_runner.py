"""streaq's runner, run by the streaq virtualenv's python: imports only streaq (and coredis, its
client) and the standard library (redis-py for the realistic body, as every Python runner).

The worker is streaq's documented `Worker(redis_url=..., queue_name=..., concurrency=C)`, its
other settings at their defaults (pickle, prefetch = C, results kept 5 min), run in the runner's
loop by `run_async()`. Completions are read from the worker's public `counters` (completed +
failed), polled every 0.5 ms as emq-worker's runner polls its own count. `incr_handler` runs its
INCR on `worker.redis`, the coredis client the worker exposes. streaq talks to Redis through
coredis, whose connections write every pending command in one send: round trips are counted
there (one per send), not on redis-py's connection as for the other Python peers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from coredis.connection._statistics import (  # type: ignore[import-not-found]
    ConnectionStatistics,
)
from streaq import Worker  # type: ignore[import-not-found]

from bench.runners.common import (
    BODY_KEY,
    Body,
    Sends,
    Tally,
    concurrently,
    emit,
    exit_on_crash,
    paced,
    peer_modes,
    run_peer,
)

TALLY = Tally(n=0)
COMPLETION_POLL_S = 0.0005
ENQUEUE_BATCH = 1000
WATCHERS: set[asyncio.Task[None]] = set()
"""The completion watcher's task, kept referenced while it runs."""


def count_coredis_sends() -> None:
    """One request per send of a coredis connection's writer (its commands written together)."""
    original = ConnectionStatistics.data_sent

    def counted(self: Any, num_bytes: int) -> None:
        Sends.count += 1
        original(self, num_bytes)

    ConnectionStatistics.data_sent = counted


def worker_of(cfg: dict[str, Any]) -> Any:
    """streaq's worker with the bench's tasks registered under their names."""
    worker = Worker(
        redis_url=cfg["url"],
        queue_name=cfg["queue"],
        concurrency=cfg.get("concurrency", 16),
        handle_signals=False,
    )

    async def noop() -> None:
        TALLY.start()

    async def sleep1ms() -> None:
        TALLY.start()
        await asyncio.sleep(0.001)

    async def incr() -> None:
        TALLY.start()
        await Body.incr()

    async def incr_handler() -> None:
        TALLY.start()
        await worker.redis.incr(BODY_KEY)

    async def incr_cpu1ms() -> None:
        TALLY.start()
        await Body.incr()
        Body.burn_cpu()

    async def hold(seconds: float) -> None:
        TALLY.start()
        await asyncio.sleep(seconds)

    async def probe(t: float) -> None:
        TALLY.probe(t)

    for function in (noop, sleep1ms, incr, incr_handler, incr_cpu1ms, hold, probe):
        worker.task(name=function.__name__)(function)
    return worker


async def enqueue(cfg: dict[str, Any]) -> None:
    """One by one, `width` concurrent, and `enqueue_many` in batches."""
    worker = worker_of(cfg)
    async with worker:

        async def one() -> None:
            await worker.enqueue_unsafe("noop")

        begun = time.perf_counter()
        for _ in range(cfg["single"]):
            await one()
        single_s = time.perf_counter() - begun
        begun = time.perf_counter()
        await concurrently(cfg["concurrent"], cfg["width"], one)
        concurrent_s = time.perf_counter() - begun
        begun = time.perf_counter()
        for start in range(0, cfg["bulk"], cfg["batch"]):
            count = min(cfg["batch"], cfg["bulk"] - start)
            await worker.enqueue_many([worker.enqueue_unsafe("noop") for _ in range(count)])
        bulk_s = time.perf_counter() - begun
    emit("done", single_s=single_s, concurrent_s=concurrent_s, bulk_s=bulk_s)


async def fill(cfg: dict[str, Any]) -> None:
    """Pre-enqueue n jobs with streaq's bulk enqueue (not measured)."""
    worker = worker_of(cfg)
    kwargs = cfg.get("kwargs", {})
    async with worker:
        for start in range(0, cfg["n"], ENQUEUE_BATCH):
            count = min(ENQUEUE_BATCH, cfg["n"] - start)
            tasks = [worker.enqueue_unsafe(cfg["task"], **kwargs) for _ in range(count)]
            await worker.enqueue_many(tasks)
    emit("done")


async def produce(cfg: dict[str, Any]) -> None:
    worker = worker_of(cfg)
    async with worker:

        async def send(t: float) -> None:
            await worker.enqueue_unsafe("probe", t=t)

        await paced(cfg["n"], cfg["rate"], send)
    emit("done")


async def start_worker(cfg: dict[str, Any], n: int) -> tuple[Any, asyncio.Event, asyncio.Event]:
    """Start streaq's worker; return it, an event set when n jobs started, one when n were
    settled."""
    all_started, all_done = asyncio.Event(), asyncio.Event()
    TALLY.n = n
    TALLY.on_all_started = all_started.set
    worker = worker_of(cfg)
    loop = asyncio.get_running_loop()
    task = loop.create_task(worker.run_async())
    task.add_done_callback(exit_on_crash)

    async def watch() -> None:
        # streaq's counters are plain numbers, with no event to wait on.
        while settled(worker) < n:  # noqa: ASYNC110
            await asyncio.sleep(COMPLETION_POLL_S)
        all_done.set()

    WATCHERS.add(loop.create_task(watch()))
    return worker, all_started, all_done


def settled(worker: Any) -> int:
    return int(worker.counters["completed"] + worker.counters["failed"])


def main() -> None:
    count_coredis_sends()
    run_peer(
        peer_modes(
            enqueue=enqueue,
            fill=fill,
            produce=produce,
            start_worker=start_worker,
            completed=settled,
            tally=TALLY,
        )
    )


if __name__ == "__main__":
    main()
