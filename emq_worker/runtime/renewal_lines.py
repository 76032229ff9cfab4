"""Renewal lines: the worker's own few connections for renewals, apart from the job/settle pool.

Each line is an independent client made by `connection.connect` (so a `redis+cluster://` URL
works too), and carries at most one renewal at a time. A renewal that has not answered is left
to finish or time out on its own (cancelling it would drop its connection); the next send goes
on a line with nothing in flight, dialled with a short connect timeout when none is idle. On a
silent cut this is what lets a renewal through as soon as packets flow again: a connection that
is already waiting on a retransmission (200, 400, 800 ms backoff) or on a lost SYN (about 1 s)
would hold it up for longer than the rest of the lease.

Lines are dialled on first use: a worker that holds nothing opens none and sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from redis.asyncio import Redis

from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts

MOST_LINES = 8
"""Renewals in flight at once, at most: with re-sends every quarter interval and each line's
socket timeout one lease (3 intervals), a cut of half a lease keeps about 8 busy."""

CONNECT_TIMEOUT_FLOOR_S = 0.1


def renewal_connect_timeout_s(renew_interval_ms: int) -> float:
    """Half a renewal interval (at least 100 ms): a dial whose SYN was lost is given up well
    before the kernel's 1 s retry, and the next re-send dials afresh."""
    return max(CONNECT_TIMEOUT_FLOOR_S, renew_interval_ms / 2000)


class RenewalLine:
    def __init__(self, client: Redis, scripts: Scripts) -> None:
        self.client = client
        self.busy = False
        self._scripts = scripts
        self._queues: dict[str, Queue] = {}

    def queue(self, name: str) -> Queue:
        """The queue's verbs on this line's connection."""
        found = self._queues.get(name)
        if found is None:
            found = self._queues[name] = Queue(self.client, self._scripts, name)
        return found


class RenewalLines:
    def __init__(self, dial: Callable[[], Redis], scripts: Scripts, most: int = MOST_LINES) -> None:
        self._dial = dial
        self._scripts = scripts
        self._most = most
        self._lines: list[RenewalLine] = []

    def __len__(self) -> int:
        return len(self._lines)

    @contextmanager
    def idle(self) -> Iterator[RenewalLine | None]:
        """A line with nothing in flight, held for the block; None when all `most` are busy."""
        line = next((line for line in self._lines if not line.busy), None)
        if line is None and len(self._lines) < self._most:
            line = RenewalLine(self._dial(), self._scripts)
            self._lines.append(line)
        if line is None:
            yield None
            return
        line.busy = True
        try:
            yield line
        finally:
            line.busy = False

    async def aclose(self) -> None:
        for line in self._lines:
            await line.client.aclose()
        self._lines.clear()
