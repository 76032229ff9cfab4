"""The worker's own clock. It paces the beat, the renewal tick, timeouts and the self-fence;
lease deadlines never use it (they are scored on the server's TIME)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...


class MonotonicClock:
    def monotonic(self) -> float:
        return time.monotonic()
