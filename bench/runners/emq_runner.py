"""emq-worker's runner: producer modes over `Producer`, worker modes over `Worker` (public API).

`python -m bench.runners.emq_runner '{"mode": "drain", "url": ..., "queue": ..., ...}'`
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from bench.apps_emq import make_app
from bench.runners.common import (
    Body,
    Sends,
    Tally,
    concurrently,
    config,
    count_sends,
    emit,
    finish,
    memory_kb,
    paced,
    tune_runtime,
)
from emq_worker import JobSpec, Producer, Worker, WorkerSettings

COMPLETION_POLL_S = 0.0005


def quiet_logs() -> None:
    """Warnings and errors only, as JSON lines: what a user embedding `Worker` configures with
    structlog itself (the worker logs through structlog; the peers log at Python's default,
    warning)."""
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        cache_logger_on_first_use=True,
    )


def worker_settings(cfg: dict[str, Any]) -> WorkerSettings:
    return WorkerSettings(
        queues=(cfg["queue"],),
        redis_url=cfg["url"],
        concurrency=cfg["concurrency"],
        **cfg.get("settings", {}),
    )


async def enqueue(cfg: dict[str, Any]) -> None:
    """One by one, `width` concurrent single enqueues, and enqueue_many in batches."""
    queue, batch = cfg["queue"], cfg["batch"]
    async with Producer.from_url(cfg["url"]) as producer:

        async def one() -> None:
            await producer.enqueue(queue, "noop")

        begun = time.perf_counter()
        for _ in range(cfg["single"]):
            await one()
        single_s = time.perf_counter() - begun

        begun = time.perf_counter()
        await concurrently(cfg["concurrent"], cfg["width"], one)
        concurrent_s = time.perf_counter() - begun

        specs = [JobSpec("noop") for _ in range(batch)]
        begun = time.perf_counter()
        for start in range(0, cfg["bulk"], batch):
            await producer.enqueue_many(queue, specs[: min(batch, cfg["bulk"] - start)])
        bulk_s = time.perf_counter() - begun
    emit("done", single_s=single_s, concurrent_s=concurrent_s, bulk_s=bulk_s)


async def fill(cfg: dict[str, Any]) -> None:
    """Pre-enqueue n jobs of one task, the fastest way emq-worker has (enqueue_many)."""
    spec = JobSpec(cfg["task"], cfg.get("kwargs", {}))
    async with Producer.from_url(cfg["url"]) as producer:
        for start in range(0, cfg["n"], 1000):
            await producer.enqueue_many(cfg["queue"], [spec] * min(1000, cfg["n"] - start))
    emit("done")


async def produce(cfg: dict[str, Any]) -> None:
    """Latency probes, one by one at a fixed rate, each carrying its enqueue time."""
    async with Producer.from_url(cfg["url"]) as producer:

        async def send(t: float) -> None:
            await producer.enqueue(cfg["queue"], "probe", {"t": t})

        await paced(cfg["n"], cfg["rate"], send)
    emit("done")


async def settled(worker: Worker, n: int) -> None:
    """Until the worker has settled n jobs. The public API has no completion event, so this
    polls the worker's own counter every half millisecond, once all n handlers have started."""
    while True:
        if worker.counters.completed >= n:
            return
        await anyio.sleep(COMPLETION_POLL_S)


async def drain(cfg: dict[str, Any]) -> None:
    """Run until the n-th job is settled (the worker's own completion count), then report."""
    tally = Tally(cfg["n"])
    worker = Worker(worker_settings(cfg), make_app(tally))
    all_started = anyio.Event()
    tally.on_all_started = all_started.set
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        await worker.ready.wait()
        emit("ready", **memory_kb())
        await all_started.wait()
        await settled(worker, tally.n)
        fields = tally.latency_fields() if tally.latencies_ms else {}
        emit("done", **tally.done_fields(worker.counters.completed), **fields)
        finish()


async def hold(cfg: dict[str, Any]) -> None:
    """Hold k long jobs; report RSS once all k run, then keep holding until killed."""
    tally = Tally(cfg["k"])
    worker = Worker(worker_settings(cfg), make_app(tally))
    all_started = anyio.Event()
    tally.on_all_started = all_started.set
    async with anyio.create_task_group() as group:
        group.start_soon(report_sends)
        group.start_soon(worker.run)
        await worker.ready.wait()
        emit("ready", **memory_kb())
        await all_started.wait()
        emit("held", **memory_kb())


async def report_sends() -> None:
    """On each SIGUSR1, report the requests sent so far (the driver's window marks)."""
    with anyio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            emit("sends", count=Sends.count, at=time.time())


MODES: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
    "enqueue": enqueue,
    "fill": fill,
    "produce": produce,
    "drain": drain,
    "hold": hold,
}


def main() -> None:
    cfg = config()
    Body.url = cfg["url"]
    quiet_logs()
    tune_runtime()  # as `emq-worker run` does, and as every peer's runner does
    count_sends()
    anyio.run(MODES[cfg["mode"]], cfg, backend_options={"use_uvloop": bool(cfg.get("uvloop"))})
    finish()


if __name__ == "__main__":
    main()
