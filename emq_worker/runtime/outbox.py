"""The beat's sweep of a queue's flow outbox: children of this queue whose parents live in
another queue report there (lua/includes/flows.lua), and the sweep counts them in their parents.

It runs only when promote's reply says the outbox holds entries, so an empty one costs the beat
nothing. Per batch: one read, one `flow_deliver` call per parents' queue (on that queue's slot),
one `flow_ack` call; entries are acknowledged by value after they were delivered, so an entry is
never lost (a sweep that dies between the two delivers it again, counted once by its parent) and
two sweepers never remove what the other has not delivered.
"""

from __future__ import annotations

from typing import Final

from structlog.typing import FilteringBoundLogger

from emq_worker.protocol.flow_wire import OutboxEntry, ack, deliver, parse_entry, read_outbox
from emq_worker.protocol.queue import Queue

SWEEP_BATCH: Final = 100
"""Entries per batch: bounds each call's server time."""
SWEEP_BATCHES: Final = 10
"""Batches per sweep at most; the rest waits for the next beat."""


class OutboxSweep:
    def __init__(self, log: FilteringBoundLogger) -> None:
        self.log = log
        self._parents: dict[str, Queue] = {}

    def _parent_queue(self, child_queue: Queue, name: str) -> Queue:
        if name == child_queue.name:
            return child_queue
        queue = self._parents.get(name)
        if queue is None:
            queue = self._parents[name] = Queue(child_queue.client, child_queue.scripts, name)
        return queue

    async def sweep(self, queue: Queue) -> int:
        """Deliver the entries of `queue`'s outbox; returns how many parents went to pending."""
        released = 0
        for _ in range(SWEEP_BATCHES):
            raws = await read_outbox(queue, SWEEP_BATCH)
            if not raws:
                break
            released += await self._deliver(queue, raws)
            await ack(queue, raws)
            if len(raws) < SWEEP_BATCH:
                break
        return released

    async def _deliver(self, queue: Queue, raws: list[bytes]) -> int:
        by_parents: dict[str, list[OutboxEntry]] = {}
        for raw in raws:
            entry = parse_entry(raw)
            if entry is None:  # it can never be delivered: acknowledged, and said once
                self.log.warning("flow_entry_unreadable", queue=queue.name, entry=repr(raw[:200]))
                continue
            by_parents.setdefault(entry.parent_queue, []).append(entry)
        released = 0
        for name, entries in by_parents.items():
            delivery = await deliver(self._parent_queue(queue, name), entries)
            released += delivery.released
            self.log.info(
                "flow_delivered",
                queue=queue.name,
                parents_queue=name,
                entries=delivery.entries,
                released=delivery.released,
            )
        return released
