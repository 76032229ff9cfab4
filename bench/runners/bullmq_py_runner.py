"""BullMQ's Python port's runner (PyPI `bullmq`), run by its virtualenv's python: imports only
bullmq and the standard library.

The worker is the port's documented `Worker(queue, processor, {"connection": url, "concurrency":
C})`, its other settings at their defaults; jobs are added with `removeOnComplete: {count: 1000}`
and `removeOnFail: {count: 5000}`, as BullMQ's guide recommends (the same as the Node.js runner).
Completions are counted by the worker's `completed` and `failed` events, emitted once the job is
settled. The port hands its processors no Redis client: `incr_handler` is the body's own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bullmq import Queue, Worker  # type: ignore[import-not-found]

from bench.runners.common import (
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
KEEP = {"removeOnComplete": {"count": 1000}, "removeOnFail": {"count": 5000}}
BATCH = 1_000


async def noop(data: dict[str, Any]) -> None:
    TALLY.start()


async def sleep1ms(data: dict[str, Any]) -> None:
    TALLY.start()
    await asyncio.sleep(0.001)


async def incr(data: dict[str, Any]) -> None:
    TALLY.start()
    await Body.incr()


async def incr_handler(data: dict[str, Any]) -> None:
    """The port hands its processors no client: the body's own, as for BullMQ on Node.js."""
    TALLY.start()
    await Body.incr()


async def incr_cpu1ms(data: dict[str, Any]) -> None:
    TALLY.start()
    await Body.incr()
    Body.burn_cpu()


async def hold(data: dict[str, Any]) -> None:
    TALLY.start()
    await asyncio.sleep(data["seconds"])


async def probe(data: dict[str, Any]) -> None:
    TALLY.probe(data["t"])


TASKS = {f.__name__: f for f in (noop, sleep1ms, incr, incr_handler, incr_cpu1ms, hold, probe)}


async def processor(job: Any, token: str) -> None:
    await TASKS[job.name](job.data)


def queue_of(cfg: dict[str, Any]) -> Any:
    return Queue(cfg["queue"], {"connection": cfg["url"], "defaultJobOptions": KEEP})


async def add_bulk(queue: Any, total: int, name: str, data: dict[str, Any]) -> None:
    for start in range(0, total, BATCH):
        count = min(BATCH, total - start)
        await queue.addBulk([{"name": name, "data": data} for _ in range(count)])


async def enqueue(cfg: dict[str, Any]) -> None:
    """One by one, `width` concurrent, and `addBulk` in batches of 1 000."""
    queue = queue_of(cfg)

    async def one() -> None:
        await queue.add("noop", {})

    begun = time.perf_counter()
    for _ in range(cfg["single"]):
        await one()
    single_s = time.perf_counter() - begun
    begun = time.perf_counter()
    await concurrently(cfg["concurrent"], cfg["width"], one)
    concurrent_s = time.perf_counter() - begun
    begun = time.perf_counter()
    await add_bulk(queue, cfg["bulk"], "noop", {})
    emit("done", single_s=single_s, concurrent_s=concurrent_s, bulk_s=time.perf_counter() - begun)


async def fill(cfg: dict[str, Any]) -> None:
    await add_bulk(queue_of(cfg), cfg["n"], cfg["task"], cfg.get("kwargs", {}))
    emit("done")


async def produce(cfg: dict[str, Any]) -> None:
    queue = queue_of(cfg)

    async def send(t: float) -> None:
        await queue.add("probe", {"t": t})

    await paced(cfg["n"], cfg["rate"], send)
    emit("done")


async def start_worker(cfg: dict[str, Any], n: int) -> tuple[Any, asyncio.Event, asyncio.Event]:
    """Start the port's worker; return it, an event set when n jobs started, one when n settled."""
    all_started, all_done = asyncio.Event(), asyncio.Event()
    TALLY.n = n
    TALLY.on_all_started = all_started.set
    options = {"connection": cfg["url"], "concurrency": cfg["concurrency"], "autorun": False}
    worker = Worker(cfg["queue"], processor, options)
    worker.settled = 0

    def counted(*_: Any) -> None:
        worker.settled += 1
        if worker.settled == n:
            all_done.set()

    worker.on("completed", counted)
    worker.on("failed", counted)
    task = asyncio.get_running_loop().create_task(worker.run())
    task.add_done_callback(exit_on_crash)
    return worker, all_started, all_done


MODES = peer_modes(
    enqueue=enqueue,
    fill=fill,
    produce=produce,
    start_worker=start_worker,
    completed=lambda worker: worker.settled,
    tally=TALLY,
)


def main() -> None:
    run_peer(MODES)


if __name__ == "__main__":
    main()
