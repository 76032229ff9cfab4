"""The history format: what workers did, per queue, in minute and hour buckets on the server.

Shared by the writer (the beat's flush, `runtime/history_flush.py`, through `lua/history.lua`)
and the readers (the dashboard). A bucket is a hash whose fields are counts added with HINCRBY, so
the flushes of any number of workers add up, and so do buckets (a day is the sum of its hours):

- `completed`, `retried`, `dead`, `reaped`, `claims`: jobs counted in that minute or hour;
- `dur_sum_us`, `dur_count`: the handlers' run time, summed in microseconds, and how many;
- `dur:<i>`: a histogram of those run times, bucket `i` holding the runs of more than
  10^((i-1)/10) ms and at most 10^(i/10) ms (ten buckets per decade: a percentile read from it is
  within 26 % of the true value); `i` is clamped to [-30, 80] (1 us to about 28 hours).

The hour buckets also hold the same fields per task, as `t:<task>:<field>`.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
MINUTES_KEPT_MS = 24 * HOUR_MS
"""A minute bucket lives this long after its minute ended (24 h at 1-minute resolution)."""
HOURS_KEPT_MS = 14 * 24 * HOUR_MS
"""An hour bucket lives this long after its hour ended (14 days at 1-hour resolution)."""
SETTLED_KEPT = 1000
"""Entries the settled log keeps (the newest)."""
SETTLED_KEEP_MS = 24 * HOUR_MS
"""The settled log expires this long after its last write."""

COUNTS = ("completed", "retried", "dead", "reaped", "claims")
DURATION_SUM = "dur_sum_us"
DURATION_COUNT = "dur_count"
DURATION_BUCKET = "dur:"
TASK_PREFIX = "t:"
MIN_BUCKET = -30
MAX_BUCKET = 80
FINE_UPPER_S = (*(10 ** (i / 10) / 1000 for i in range(MIN_BUCKET, MAX_BUCKET)), math.inf)
"""The upper bound (seconds) of each bucket from MIN_BUCKET on; the last takes any longer run.
`bisect_left(FINE_UPPER_S, s)` is the bucket's position: its index minus MIN_BUCKET (the job
path keeps positions, one bisect and no call; the flush names the buckets)."""
_TASK_FIELD = re.compile(
    r"t:(?P<task>.+):(?P<field>completed|retried|dead|reaped|claims|dur_sum_us|dur_count|dur:-?\d+)"
)


def duration_bucket(seconds: float) -> int:
    """The histogram bucket of a run of `seconds` (see the module docstring)."""
    return MIN_BUCKET + bisect_left(FINE_UPPER_S, seconds)


def bucket_upper_ms(index: int) -> float:
    return float(10 ** (index / 10))


def percentile(histogram: Mapping[int, int], fraction: float) -> float | None:
    """The run time (ms) under which `fraction` of the runs fall, interpolated geometrically
    inside its bucket; None for an empty histogram."""
    total = sum(histogram.values())
    if total <= 0:
        return None
    rank = fraction * total
    seen = 0
    for index in sorted(histogram):
        count = histogram[index]
        if count <= 0:
            continue
        if seen + count >= rank:
            within = (rank - seen) / count
            low, high = math.log10(bucket_upper_ms(index - 1)), math.log10(bucket_upper_ms(index))
            return float(round(10 ** (low + within * (high - low)), 3))
        seen += count
    return bucket_upper_ms(max(histogram))


@dataclass(slots=True)
class Stats:
    """The counts and run times of one bucket (or of several added up)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    dur_sum_us: int = 0
    dur_count: int = 0
    histogram: dict[int, int] = field(default_factory=dict)

    def add_field(self, name: str, value: int) -> None:
        if name in self.counts:
            self.counts[name] += value
        elif name == DURATION_SUM:
            self.dur_sum_us += value
        elif name == DURATION_COUNT:
            self.dur_count += value
        elif name.startswith(DURATION_BUCKET):
            index = int(name[len(DURATION_BUCKET) :])
            self.histogram[index] = self.histogram.get(index, 0) + value

    def add(self, other: Stats) -> None:
        for name, value in other.counts.items():
            self.counts[name] += value
        self.dur_sum_us += other.dur_sum_us
        self.dur_count += other.dur_count
        for index, count in other.histogram.items():
            self.histogram[index] = self.histogram.get(index, 0) + count

    @property
    def settled(self) -> int:
        return self.counts["completed"] + self.counts["retried"] + self.counts["dead"]

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts (retried or dead) over settled ones; None when none settled."""
        settled = self.settled
        failed = self.counts["retried"] + self.counts["dead"]
        return None if settled == 0 else round(failed / settled, 4)

    @property
    def mean_ms(self) -> float | None:
        return None if self.dur_count == 0 else round(self.dur_sum_us / self.dur_count / 1000, 3)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.counts,
            "failure_rate": self.failure_rate,
            "duration_count": self.dur_count,
            "mean_ms": self.mean_ms,
            "p50_ms": percentile(self.histogram, 0.5),
            "p95_ms": percentile(self.histogram, 0.95),
        }


def _number(value: bytes | str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0  # not one of ours: ignored rather than fatal to a page


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def parse_bucket(raw: Mapping[bytes | str, bytes | str]) -> tuple[Stats, dict[str, Stats]]:
    """A bucket's HGETALL as the queue's stats and each task's (hour buckets only)."""
    queue, tasks = Stats(), dict[str, Stats]()
    for key, value in raw.items():
        name = _text(key)
        if not name.startswith(TASK_PREFIX):
            queue.add_field(name, _number(value))
            continue
        found = _TASK_FIELD.fullmatch(name)
        if found is not None:
            task = tasks.get(found["task"])
            if task is None:
                task = tasks[found["task"]] = Stats()
            task.add_field(found["field"], _number(value))
    return queue, tasks


def total(stats: Iterable[Stats]) -> Stats:
    out = Stats()
    for one in stats:
        out.add(one)
    return out


def bucket_starts(now_ms: int, width_ms: int, count: int) -> list[int]:
    """The starts of the `count` buckets of `width_ms` ending with the one holding `now_ms`,
    oldest first."""
    last = now_ms - now_ms % width_ms
    return [last - width_ms * n for n in range(count - 1, -1, -1)]
