"""Run a real in-process Worker on a queue until nothing is pending, held or scheduled."""

from __future__ import annotations

from typing import Any, Final

import anyio

from emq_worker.jobs.tasks import App
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.worker import Worker
from emq_worker.testing.clock import fast_forward
from emq_worker.valkey.connection import connect

DEFAULT_TIMEOUT_S: Final = 10.0
BEAT_MS: Final = 20
"""The test worker's beat (the default is 1 s): its reaper and repeats run this often."""
IDLE_POLL_S: Final = 0.01
"""How often the queue is looked at (and scheduled jobs fast-forwarded)."""


class NotIdleError(AssertionError):
    """`run_until_idle` ran out of time with jobs still pending, held or scheduled."""


async def run_until_idle(
    app: App,
    queue: str,
    *,
    url: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    forward: bool = True,
    **settings: Any,
) -> Counters:
    """Run a Worker serving `queue` with `app` until nothing is pending, held or scheduled on it,
    then stop it, and return its counters (completed, retried, dead_lettered, ...).

    `forward` (default) makes scheduled jobs due at once as they appear (`fast_forward`): a
    delayed job or a retry's backoff runs now instead of after its delay. Without it the worker
    waits for them on the server clock. `settings` go to `WorkerSettings` (e.g. concurrency,
    max_attempts; `beat_ms` is 20 here). Raises NotIdleError, with the queue's counts, when
    `timeout_s` passes first; a handler still running then is cancelled.
    """
    options: dict[str, Any] = {"queues": (queue,), "redis_url": url, "beat_ms": BEAT_MS}
    worker = Worker(WorkerSettings(**(options | settings)), app)
    client = connect(url, DEFAULT_WIRE_VERSION)
    target = Queue(client, Scripts(), queue)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            with anyio.move_on_after(timeout_s) as scope:
                await worker.ready.wait()
                await _until_idle(target, forward)
            # Stopped from outside its task, never by cancelling it: the worker then closes its
            # own connections (a cancelled close left one open, a ResourceWarning at GC).
            if scope.cancelled_caught and worker.ready.is_set():
                worker.force_stop()  # a handler still running is cancelled, its lease left
            else:
                worker.request_stop()
        if scope.cancelled_caught:
            raise NotIdleError(
                f"queue {queue!r} not idle after {timeout_s} s: {await _counts(target)}"
            )
    finally:
        with anyio.CancelScope(shield=True):
            await client.aclose()
    return worker.counters


async def _until_idle(queue: Queue, forward: bool) -> None:
    """Poll the queue's sets, read in one transaction (a job moving between two of them is in
    exactly one), until all three are empty and no lane is in rotation (the ring lists every
    lane with a job a claim could take). The worker's burst mode is not used: its idle check
    does not see a job another client promotes while it looks."""
    keys = queue.keys
    while True:
        async with queue.client.pipeline(transaction=True) as pipe:
            for key in (keys.pending, keys.active, keys.schedule):
                pipe.zcard(key)
            pipe.llen(keys.prefix + "ring")
            pending, held, scheduled, lanes = await pipe.execute()
        if pending + held + scheduled + lanes == 0:
            return
        if scheduled and forward:
            await fast_forward(queue)
        await anyio.sleep(IDLE_POLL_S)


async def _counts(queue: Queue) -> str:
    counts = await queue.counts()
    return (
        f"{counts.pending} pending, {counts.active} held, {counts.scheduled} scheduled, "
        f"{counts.dead} dead"
    )
