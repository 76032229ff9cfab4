"""Renewal lines: the worker's own few connections for renewals, apart from the job/settle pool.

Each line is an independent client made by `connection.connect` (so a `redis+cluster://` URL
works too), and carries at most one renewal at a time. A renewal that has not answered is left
to finish or time out on its own (cancelling it would drop its connection); the next send goes
on the line idle longest, dialled with a short connect timeout when none is idle.

WARM_LINES lines are kept connected while leases are held, at no cost in commands: each send
takes the line idle longest, so they carry the ticks in turn. On a silent cut a re-send goes on
one of them, already connected: no dial (its SYN would be lost, and retried only after about
1 s), and the kernel retransmits it without the worker's help (200, 400, 800 ms backoff per
connection), so re-sends written a quarter interval apart on four connections have some
retransmission reach the server within about a quarter interval of the heal, however late the
worker's own loop runs then. When all are busy, a line dialled afresh goes through as soon as
the link is up.

Lines are dialled on first use: a worker that holds nothing opens none and sends nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from redis.asyncio import Redis

from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts

MOST_LINES = 8
"""Renewals in flight at once, at most: with re-sends every quarter interval and each line's
socket timeout one lease (3 intervals), a cut of half a lease keeps about 8 busy."""

WARM_LINES = 4
"""Lines the sends rotate over (see above): one interval of re-sends (RESEND_SHARE) goes on
connected lines."""

CONNECT_TIMEOUT_FLOOR_S = 0.1


def renewal_connect_timeout_s(renew_interval_ms: int) -> float:
    """Half a renewal interval (at least 100 ms): a dial whose SYN was lost is given up well
    before the kernel's 1 s retry, and the next re-send dials afresh."""
    return max(CONNECT_TIMEOUT_FLOOR_S, renew_interval_ms / 2000)


class RenewalLine:
    def __init__(self, client: Redis, scripts: Scripts) -> None:
        self.client = client
        self.busy = False
        self.taken = -1
        """When the line was last taken (a count of takes): the line idle longest goes next."""
        self._scripts = scripts
        self._queues: dict[str, Queue] = {}

    def queue(self, name: str) -> Queue:
        """The queue's verbs on this line's connection."""
        found = self._queues.get(name)
        if found is None:
            found = self._queues[name] = Queue(self.client, self._scripts, name)
        return found


class RenewalLines:
    def __init__(
        self,
        dial: Callable[[], Redis],
        scripts: Scripts,
        most: int = MOST_LINES,
        warm: int = WARM_LINES,
    ) -> None:
        self._dial = dial
        self._scripts = scripts
        self._most = most
        self._warm = min(warm, most)
        self._lines: list[RenewalLine] = []
        self._takes = itertools.count()

    def __len__(self) -> int:
        return len(self._lines)

    @contextmanager
    def idle(self) -> Iterator[RenewalLine | None]:
        """The line idle longest, held for the block (a new one while fewer than `warm` exist,
        or when all are busy and fewer than `most` exist); None when all `most` are busy."""
        line = min((line for line in self._lines if not line.busy), key=_taken, default=None)
        if len(self._lines) < self._most and (line is None or len(self._lines) < self._warm):
            line = RenewalLine(self._dial(), self._scripts)
            self._lines.append(line)
        if line is None:
            yield None
            return
        line.busy = True
        line.taken = next(self._takes)
        try:
            yield line
        finally:
            line.busy = False

    async def aclose(self) -> None:
        for line in self._lines:
            await line.client.aclose()
        self._lines.clear()


def _taken(line: RenewalLine) -> int:
    return line.taken
