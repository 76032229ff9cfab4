"""CPU pinning: Redis and the bench driver on core 0, the process under test on core 1.

Used only where `taskset` exists and the machine has at least two cores; otherwise nothing is
pinned (and the results say so).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

TASKSET = shutil.which("taskset")


@dataclass(frozen=True, slots=True)
class Cores:
    redis: int | None
    driver: int | None
    worker: int | None
    """The worker under test, and producers when no worker runs (enqueue, pre-fill)."""

    @property
    def enabled(self) -> bool:
        return self.worker is not None


def plan_cores() -> Cores:
    usable = sorted(os.sched_getaffinity(0))
    if TASKSET is None or len(usable) < 2:
        return Cores(None, None, None)
    return Cores(redis=usable[0], driver=usable[0], worker=usable[1])


def pinned(args: list[str], core: int | None) -> list[str]:
    """`args` run under `taskset -c core` when a core is given."""
    if core is None or TASKSET is None:
        return args
    return [TASKSET, "-c", str(core), *args]


def pin_self(core: int | None) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})
