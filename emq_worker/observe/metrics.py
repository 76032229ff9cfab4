"""In-process counters of what the worker did; logged at exit, read by tests and by /metrics.

Everything here is plain ints, dicts and lists: the job path pays a dict increment and a bisect
per job, never a lock or a prometheus-client object (the collector converts when scraped).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass, field, fields

from emq_worker.observe.history_format import FINE_UPPER_S

DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Upper bounds (seconds, inclusive) of the job duration histogram; a last bucket is +Inf."""


class Durations:
    """A fixed-bucket histogram of handler run times for one (queue, task)."""

    __slots__ = ("buckets", "fine", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)
        """Per bucket, not cumulative; the last one is +Inf."""
        self.sum = 0.0
        self.fine: dict[int, int] = {}
        """The history's finer histogram (ten buckets per decade), by position in
        observe.history.FINE_UPPER_S."""

    def observe(self, seconds: float) -> None:
        self.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.sum += seconds
        fine = bisect_left(FINE_UPPER_S, seconds)
        self.fine[fine] = self.fine.get(fine, 0) + 1

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def cumulative(self) -> list[int]:
        """Running totals per bucket, in DURATION_BUCKETS order then +Inf (== count)."""
        total, out = 0, []
        for n in self.buckets:
            total += n
            out.append(total)
        return out


RECENT_KEPT = 100
"""Settled jobs remembered per queue until the history flush sends them (the newest)."""


Settled = tuple[tuple[str, int], str, str, float | None, float, str]
"""One settled job, as the settled log shows it: ((job id, attempt), task, outcome, run time in
seconds, time.monotonic() when its outcome was written, error). A plain tuple: it is built once
per job."""


@dataclass(slots=True)
class Counters:
    claimed: int = 0
    handed_off: int = 0
    """Of the jobs claimed, those enqueue.lua leased straight to this worker's offer."""
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    fenced: int = 0
    """Writes (renew, complete, fail) refused because another holder owns the job."""
    leases_lost: int = 0
    self_fenced: int = 0
    """Leases this worker gave up itself after renewals failed for a whole lease."""
    reaped: int = 0
    reaped_dead: int = 0
    promoted: int = 0
    phantoms: int = 0
    released: int = 0
    renew_sweeps: int = 0
    renew_failures: int = 0
    by_task: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """Settled jobs per (queue, task, outcome); outcome is completed, retried or dead_lettered."""
    by_queue: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Lease events per (queue, event): claimed, reaped, fenced (once per claim or reap call,
    or per fenced write: never per job on the hot path)."""
    durations: dict[tuple[str, str], Durations] = field(default_factory=dict)
    """Handler run times per (queue, task), of the jobs counted in `by_task`."""
    recent: dict[str, deque[Settled]] = field(default_factory=dict)
    """The last RECENT_KEPT jobs settled per queue, taken by the history flush."""

    def settled(
        self,
        queue: str,
        task: str,
        outcome: str,
        seconds: float | None,
        job: tuple[str, int] = ("", 0),
        error: str = "",
    ) -> None:
        """Count one written outcome for its queue and task, and its handler's run time;
        remember the job (its id and attempt) for the settled log."""
        self.by_task[(queue, task, outcome)] += 1
        if seconds is not None:
            durations = self.durations.get((queue, task))
            if durations is None:
                durations = self.durations[(queue, task)] = Durations()
            durations.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1  # observe(), inlined
            durations.sum += seconds
            fine = bisect_left(FINE_UPPER_S, seconds)
            durations.fine[fine] = durations.fine.get(fine, 0) + 1
        recent = self.recent.get(queue)
        if recent is None:
            recent = self.recent[queue] = deque(maxlen=RECENT_KEPT)
        recent.append((job, task, outcome, seconds, time.monotonic(), error))

    def snapshot(self) -> dict[str, int]:
        """The worker-wide counts (the per-task breakdown is left to /metrics)."""
        return {
            f.name: value for f in fields(self) if isinstance(value := getattr(self, f.name), int)
        }
