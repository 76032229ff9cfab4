"""The worker's own clock. It paces the beat, the renewal tick, timeouts and the self-fence;
lease deadlines never use it (they are scored on the server's TIME)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...


class MonotonicClock:
    def monotonic(self) -> float:
        return time.monotonic()


@dataclass(frozen=True, slots=True)
class TimeAndChance:
    """Where a worker reads the time and draws its jitter (backoffs, the agenda's spread): a
    test passes a fake clock and a seeded Random to make a run repeatable."""

    clock: Clock = field(default_factory=MonotonicClock)
    rng: random.Random = field(default_factory=random.Random)
