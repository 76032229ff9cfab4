"""taskiq's runner, run by the taskiq virtualenv's python: imports only taskiq, taskiq-redis and the
standard library (redis-py for the realistic body, as every Python runner).

The broker is taskiq-redis's `RedisStreamBroker` with `RedisAsyncResultBackend` (results kept
1 h, as arq keeps its), as taskiq-redis's README sets them up; the worker is taskiq's
documented in-process receiver, `run_receiver_task(broker, max_async_tasks=C)`, its other
settings at their defaults (no prefetch beyond C, a job acked once its result is saved).
Completions are counted by a middleware's `post_save` hook, which runs once the result is
stored, just before the ack. taskiq hands its tasks no Redis client: `incr_handler` is the
body's own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from taskiq import TaskiqMiddleware  # type: ignore[import-not-found]
from taskiq.api import run_receiver_task  # type: ignore[import-not-found]
from taskiq_redis import (  # type: ignore[import-not-found]
    RedisAsyncResultBackend,
    RedisStreamBroker,
)

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
RESULT_TTL_S = 3600


async def noop() -> None:
    TALLY.start()


async def sleep1ms() -> None:
    TALLY.start()
    await asyncio.sleep(0.001)


async def incr() -> None:
    TALLY.start()
    await Body.incr()


async def incr_cpu1ms() -> None:
    TALLY.start()
    await Body.incr()
    Body.burn_cpu()


async def hold(seconds: float) -> None:
    TALLY.start()
    await asyncio.sleep(seconds)


async def probe(t: float) -> None:
    TALLY.probe(t)


FUNCTIONS = {
    "noop": noop,
    "sleep1ms": sleep1ms,
    "incr": incr,
    "incr_handler": incr,  # no client from the framework
    "incr_cpu1ms": incr_cpu1ms,
    "hold": hold,
    "probe": probe,
}


class Completions(TaskiqMiddleware):  # type: ignore[misc]
    """Counts settled jobs; sets `all_done` at the n-th."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.count = 0
        self.all_done = asyncio.Event()

    def post_save(self, message: Any, result: Any) -> None:
        self.count += 1
        if self.count == self.n:
            self.all_done.set()


COMPLETIONS = Completions()


async def broker_of(cfg: dict[str, Any]) -> Any:
    backend = RedisAsyncResultBackend(cfg["url"], result_ex_time=RESULT_TTL_S)
    broker = RedisStreamBroker(cfg["url"], queue_name=cfg["queue"]).with_result_backend(backend)
    broker.add_middlewares(COMPLETIONS)
    for name, function in FUNCTIONS.items():
        broker.register_task(function, task_name=name)
    # Declares the consumer group (at the stream's end): a producer's startup comes before the
    # jobs it enqueues, so a worker started later still reads them.
    await broker.startup()
    return broker


async def enqueue(cfg: dict[str, Any]) -> None:
    """One by one and `width` concurrent (taskiq has no bulk enqueue)."""
    broker = await broker_of(cfg)
    task = broker.find_task("noop")

    async def one() -> None:
        await task.kiq()

    begun = time.perf_counter()
    for _ in range(cfg["single"]):
        await one()
    single_s = time.perf_counter() - begun
    begun = time.perf_counter()
    await concurrently(cfg["concurrent"], cfg["width"], one)
    emit("done", single_s=single_s, concurrent_s=time.perf_counter() - begun, bulk_s=None)


async def fill(cfg: dict[str, Any]) -> None:
    broker = await broker_of(cfg)
    task, kwargs = broker.find_task(cfg["task"]), cfg.get("kwargs", {})

    async def one() -> None:
        await task.kiq(**kwargs)

    await concurrently(cfg["n"], cfg["width"], one)
    emit("done")


async def produce(cfg: dict[str, Any]) -> None:
    broker = await broker_of(cfg)
    task = broker.find_task("probe")

    async def send(t: float) -> None:
        await task.kiq(t=t)

    await paced(cfg["n"], cfg["rate"], send)
    emit("done")


async def start_worker(cfg: dict[str, Any], n: int) -> tuple[Any, asyncio.Event, asyncio.Event]:
    """Start taskiq's receiver; return the middleware, an event set when n jobs started, one
    when n were settled."""
    all_started = asyncio.Event()
    TALLY.n = n
    TALLY.on_all_started = all_started.set
    COMPLETIONS.n = n
    broker = await broker_of(cfg)
    receiver = run_receiver_task(broker, max_async_tasks=cfg["concurrency"])
    task = asyncio.get_running_loop().create_task(receiver)
    task.add_done_callback(exit_on_crash)
    return COMPLETIONS, all_started, COMPLETIONS.all_done


MODES = peer_modes(
    enqueue=enqueue,
    fill=fill,
    produce=produce,
    start_worker=start_worker,
    completed=lambda completions: completions.count,
    tally=TALLY,
)


def main() -> None:
    run_peer(MODES)


if __name__ == "__main__":
    main()
