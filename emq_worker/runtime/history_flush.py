"""The history flush: every few seconds the beat adds what this worker did per queue (the deltas
of its in-process counters since the last flush) to the queue's minute and hour buckets on the
server, and the jobs it settled lately to the settled log (`lua/history.lua`, format in
`observe/history_format.py`). One script call per queue that did anything, per flush: never a round
trip per job. It also says which queues it serves in `{emq}:queues`, where the dashboard finds
them without a SCAN: at start, then every QUEUES_NAMED_EVERY_S.

A flush that fails is not lost: the counters are cumulative, so the next flush sends the
difference from the last one the server took (the settled jobs of a failed flush are dropped:
they are a sample).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from emq_worker.observe.history_format import (
    DURATION_BUCKET,
    DURATION_COUNT,
    DURATION_SUM,
    HOURS_KEPT_MS,
    MIN_BUCKET,
    MINUTES_KEPT_MS,
    SETTLED_KEEP_MS,
    SETTLED_KEPT,
    TASK_PREFIX,
)
from emq_worker.observe.metrics import Counters, Settled
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.queue_names import name_queues

OUTCOMES = {"completed": "completed", "retried": "retried", "dead_lettered": "dead"}
"""Counters.by_task outcomes, and the history field each is counted in."""
EVENTS = {"claimed": "claims", "reaped": "reaped"}
"""Counters.by_queue events, and the history field each is counted in."""
QUEUES_NAMED_EVERY_S = 3_600.0
"""How often a worker says again that it serves its queues: readers list a queue named within a
day (dashboard/queues.py), so once an hour is plenty, not on every flush."""
ERROR_KEPT = 300
"""Characters of a failure's error the settled log keeps."""


def cumulative(counters: Counters, queue: str) -> tuple[Counter[str], Counter[str]]:
    """Everything this worker counted on `queue` so far: the queue's fields, and the tasks'
    (`t:<task>:<field>`)."""
    fields: Counter[str] = Counter()
    tasks: Counter[str] = Counter()
    for (name, task, outcome), count in counters.by_task.items():
        if name == queue and outcome in OUTCOMES:
            fields[OUTCOMES[outcome]] += count
            tasks[f"{TASK_PREFIX}{task}:{OUTCOMES[outcome]}"] += count
    for (name, event), count in counters.by_queue.items():
        if name == queue and event in EVENTS:
            fields[EVENTS[event]] += count
    for (name, task), durations in counters.durations.items():
        if name != queue:
            continue
        sum_us = round(durations.sum * 1_000_000)
        runs = {f"{DURATION_BUCKET}{MIN_BUCKET + at}": n for at, n in durations.fine.items()}
        for target, prefix in ((fields, ""), (tasks, f"{TASK_PREFIX}{task}:")):
            target[prefix + DURATION_SUM] += sum_us
            target[prefix + DURATION_COUNT] += durations.count
            for bucket, n in runs.items():
                target[prefix + bucket] += n
    return fields, tasks


def _pairs(delta: Iterable[tuple[str, int]]) -> list[str | int]:
    out: list[str | int] = []
    for name, value in delta:
        out += [name, value]
    return out


def settled_entry(settled: Settled, worker: str) -> str:
    (job_id, attempt), task, outcome, seconds, _, error = settled
    entry: dict[str, object] = {
        "id": job_id,
        "attempt": attempt,
        "task": task,
        "outcome": "dead" if outcome == "dead_lettered" else outcome,
        "ms": None if seconds is None else round(seconds * 1000, 3),
        "worker": worker,
    }
    if error:
        entry["error"] = error[:ERROR_KEPT]
    return json.dumps(entry, separators=(",", ":"))


@dataclass(slots=True)
class _Sent:
    fields: Counter[str] = field(default_factory=Counter)
    tasks: Counter[str] = field(default_factory=Counter)


class HistoryRecorder:
    def __init__(self, counters: Counters, worker_id: str, every_ms: int) -> None:
        self.counters = counters
        self.worker_id = worker_id
        self.every_s = every_ms / 1000
        self._sent: dict[str, _Sent] = {}
        self._next = 0.0
        self._next_naming = 0.0

    def due(self, now: float) -> bool:
        return self.every_s > 0 and now >= self._next

    def next_at(self) -> float | None:
        """When the next flush is due (monotonic); None: never."""
        return self._next if self.every_s > 0 else None

    def naming_due(self, now: float) -> bool:
        """Whether to name the queues in `{emq}:queues` again: at start, then once named, every
        QUEUES_NAMED_EVERY_S (`named`)."""
        return now >= self._next_naming

    def named(self, now: float) -> None:
        self._next_naming = now + QUEUES_NAMED_EVERY_S

    async def flush(self, queues: Iterable[Queue], now: float) -> None:
        """Send each queue's news (a RedisError propagates: the next flush sends it again)."""
        self._next = now + self.every_s
        for queue in queues:
            await self.flush_queue(queue)

    async def name_queues(self, queues: list[Queue]) -> None:
        """Say in `{emq}:queues` that these queues are served (a user whose ACL does not
        grant that key gets NOPERM: the caller stops trying)."""
        if queues:
            await name_queues(queues[0].client, [queue.name for queue in queues])

    async def flush_queue(self, queue: Queue) -> None:
        fields, tasks = cumulative(self.counters, queue.name)
        sent = self._sent.setdefault(queue.name, _Sent())
        field_delta = [(k, v - sent.fields[k]) for k, v in fields.items() if v != sent.fields[k]]
        task_delta = [(k, v - sent.tasks[k]) for k, v in tasks.items() if v != sent.tasks[k]]
        recent = self.counters.recent.pop(queue.name, None) or ()
        if not field_delta and not task_delta and not recent:
            return
        now = time.monotonic()
        entries: list[str | int] = []
        for settled in recent:  # LPUSHed oldest first: the newest ends at the head
            entries += [
                max(0, int((now - settled[4]) * 1000)),
                settled_entry(settled, self.worker_id),
            ]
        args: list[str | int] = [
            queue.keys.prefix,
            MINUTES_KEPT_MS,
            HOURS_KEPT_MS,
            SETTLED_KEPT,
            SETTLED_KEEP_MS,
            len(field_delta),
            len(task_delta),
            len(recent),
            *_pairs(field_delta),
            *_pairs(task_delta),
            *entries,
        ]
        await queue.run("history", args)
        sent.fields, sent.tasks = fields, tasks
