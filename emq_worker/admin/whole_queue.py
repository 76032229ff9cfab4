"""Whole-queue verbs: drain (delete the waiting jobs) and obliterate (delete the queue).

Both match EchoMQ's verbs of the same name (obliterate refuses unless the queue is paused, and
with active jobs unless forced; drain leaves active jobs alone) and also delete the keys emq-worker
adds, which EchoMQ's versions do not know by name. Each runs its script in batches, so no single
call holds the server for long however big the queue.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from redis.exceptions import NoPermissionError

from emq_worker.admin.verbs import AdminError
from emq_worker.errors import StateError
from emq_worker.protocol.keys import QUEUES_KEY
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.valkey.scan import BoundedScan

BATCH = 1000
"""Jobs per script call: a few ms of server time each."""
SWEEP_BUDGET = 1_000_000
"""Keys the sweep's SCAN examines at most (the whole server's keyspace, not only the queue's)."""
KEPT = ("worker:", "workers")
"""Key suffixes obliterate leaves: a live worker's presence and its index (they expire, and are
written again by the worker's next beat anyway)."""


class NotPausedError(AdminError):
    def __init__(self, queue: str) -> None:
        super().__init__(f"queue {queue!r} is not paused; run `emq-worker pause {queue}` first")


class ActiveJobsError(AdminError):
    def __init__(self, queue: str, detail: str) -> None:
        super().__init__(
            f"queue {queue!r} has active jobs ({detail}); let them finish, or pass --force "
            "(their workers' settles then answer gone)"
        )


@dataclass(frozen=True, slots=True)
class Obliterated:
    jobs: int
    """Jobs deleted (rows with their subkeys and set members)."""
    keys: int
    """Keys the sweep deleted after the script: claim memos, hand-off lists, results and
    de:<did> keys without a job, rows in no set, grouped lanes."""
    complete: bool
    """False when the sweep's SCAN stopped at its budget: run obliterate again."""


async def drain_queue(queue: Queue, *, scheduled: bool = False, batch: int = BATCH) -> int:
    """Delete the jobs waiting in pending (and schedule, with `scheduled`); the jobs deleted."""
    total, more = 0, True
    while more:
        drained, more = await queue.drain(scheduled=scheduled, batch=batch)
        total += drained
    return total


async def obliterate_queue(queue: Queue, *, force: bool = False, batch: int = BATCH) -> Obliterated:
    """Delete every job and key of a paused queue (StateError becomes NotPausedError or
    ActiveJobsError, naming the queue)."""
    jobs, more = 0, True
    while more:
        try:
            deleted, more = await queue.obliterate(force=force, budget=batch)
        except StateError as exc:
            if exc.detail.startswith("not paused"):
                raise NotPausedError(queue.name) from exc
            raise ActiveJobsError(queue.name, exc.detail.rsplit(" ", 1)[-1] + " active") from exc
        jobs += deleted
    keys, complete = await sweep(queue)
    # A worker still serving it names it again; an ACL without {emq}:queues: it ages out.
    with contextlib.suppress(NoPermissionError):
        await queue.client.zrem(QUEUES_KEY, queue.name)
    return Obliterated(jobs, keys, complete)


async def sweep(queue: Queue) -> tuple[int, bool]:
    """DEL every key left under the queue's prefix but a worker's presence; (deleted, whether
    the SCAN finished within its budget)."""
    prefix = queue.keys.prefix
    scan = BoundedScan(queue.client, prefix + "*", budget=SWEEP_BUDGET)
    deleted = 0
    async for keys in scan.pages():
        doomed = [k for k in map(text, keys) if not k[len(prefix) :].startswith(KEPT)]
        for key in doomed:  # one by one: a cluster client may not DEL keys of one slot together
            deleted += int(await queue.client.delete(key))
    return deleted, scan.complete
