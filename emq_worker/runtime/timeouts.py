"""Job timeouts: a running handler is stopped once its job's timeout has passed, by one event-loop
timer for every job rather than one each.

`asyncio.timeout` arms and disarms a loop timer per job: about 5 us, a sixth of what the worker
spends on a no-op job. Here a job's deadline goes into a bucket of TICK_S (a set of leases, O(1)
in and out) and one timer waits for the earliest bucket; a job is stopped between its timeout and
one tick after it. Stopping is the runner's other cancellations' way: a flag on the lease, then
its task cancelled (lease.py); the runner tells the three apart.

Buckets emptied by jobs that finished in time are dropped at once; their place in the heap of
bucket times is dropped when the timer reaches it, at most STALE_POPS at a time so that clearing
a long backlog never holds the loop.
"""

from __future__ import annotations

import asyncio
import heapq
import math

from emq_worker.runtime.lease import Lease

TICK_S = 0.01
STALE_POPS = 1_000


class JobTimeouts:
    def __init__(self) -> None:
        self._buckets: dict[int, set[Lease]] = {}
        self._times: list[int] = []
        """A heap of bucket numbers (deadline / TICK_S): every bucket made, some emptied since."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_bucket: int | None = None

    def __len__(self) -> int:
        """Jobs watched now."""
        return sum(len(leases) for leases in self._buckets.values())

    def start(self, lease: Lease, seconds: float) -> int:
        """Watch `lease` until `stop`: past `seconds` from now, `lease.time_out()` stops its job.
        Returns its bucket, for `stop`."""
        loop = asyncio.get_running_loop()
        bucket = math.ceil((loop.time() + seconds) / TICK_S)
        leases = self._buckets.get(bucket)
        if leases is None:
            leases = self._buckets[bucket] = set()
            heapq.heappush(self._times, bucket)
            if self._timer_bucket is None or bucket < self._timer_bucket:
                self._arm(loop, bucket)
        leases.add(lease)
        return bucket

    def stop(self, lease: Lease, bucket: int) -> None:
        """The job ended (or timed out): stop watching it."""
        leases = self._buckets.get(bucket)
        if leases is not None:
            leases.discard(lease)
            if not leases:
                del self._buckets[bucket]

    def _arm(self, loop: asyncio.AbstractEventLoop, bucket: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(bucket * TICK_S, self._fire, loop)
        self._timer_bucket = bucket

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Time out the jobs of every bucket that is due; wait for the next one still watched."""
        self._timer = self._timer_bucket = None
        now = math.floor(loop.time() / TICK_S)
        times = self._times
        popped = 0
        while times and popped < STALE_POPS and (times[0] <= now or times[0] not in self._buckets):
            for lease in self._buckets.pop(heapq.heappop(times), ()):
                lease.time_out()
            popped += 1
        if times:
            # A heap still headed by emptied buckets is cleared on the next pass of the loop.
            self._arm(loop, times[0] if times[0] in self._buckets else now)
