"""Event-loop lag: how late a short sleep wakes up. A handler that blocks the loop (sync I/O or
CPU work in an `async def`) stalls the renewal sweep, the beat and every other job with it; a lag
near the lease means leases expire under a live worker. The monitor logs `event_loop_blocked`
once per stall and keeps figures for /metrics (sync handlers run in threads and do not count).
"""

from __future__ import annotations

import anyio

from emq_worker.observe.clock import Clock
from emq_worker.observe.log import get_logger

PROBE_EVERY_S = 0.1
WARN_CAP_MS = 500


def warn_after_ms(lease_ms: int) -> int:
    """The lag worth a warning: a quarter of the lease, at most WARN_CAP_MS."""
    return min(WARN_CAP_MS, max(1, lease_ms // 4))


class LoopLag:
    def __init__(self, clock: Clock, warn_ms: int, every_s: float = PROBE_EVERY_S) -> None:
        self.clock = clock
        self.warn_s = warn_ms / 1000
        self.every_s = every_s
        self.last_s = 0.0
        """The lag of the latest probe."""
        self.max_s = 0.0
        self.stalls = 0
        """Probes that woke more than the warning threshold late."""
        self.log = get_logger()

    async def run(self) -> None:
        while True:
            asked = self.clock.monotonic()
            await anyio.sleep(self.every_s)
            self.observe(self.clock.monotonic() - asked - self.every_s)

    def observe(self, lag_s: float) -> None:
        lag_s = max(0.0, lag_s)
        self.last_s = lag_s
        self.max_s = max(self.max_s, lag_s)
        if lag_s >= self.warn_s:
            self.stalls += 1
            self.log.warning(
                "event_loop_blocked",
                lag_ms=int(lag_s * 1000),
                warn_ms=int(self.warn_s * 1000),
                hint="a handler blocks the event loop: make it a sync def (run in a thread) "
                "or await its I/O",
            )
