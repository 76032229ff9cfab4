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

Closing (at the worker's stop) leaves no line open: it waits, at most CLOSE_WAIT_S, for the sends
in flight to end (a cluster client still reading its slot map opens its connections when that
read answers, after a close that came before), closes every line whatever another's close
raised, and dials nothing after.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from emq_worker.observe.log import get_logger
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.failures import describe

MOST_LINES = 8
"""Renewals in flight at once, at most: with re-sends every quarter interval and each line's
socket timeout one lease (3 intervals), a cut of half a lease keeps about 8 busy."""

WARM_LINES = 4
"""Lines the sends rotate over (see above): one interval of re-sends (RESEND_SHARE) goes on
connected lines."""

CONNECT_TIMEOUT_FLOOR_S = 0.1

CLOSE_WAIT_S = 1.0
"""How long closing waits for the sends in flight to end (a stuck one does not hold up the stop
longer: its line is closed under it), and then, at most, for the lines to close."""

CLOSE_TRIES = 3
"""Closes of one line's client before giving up on it: redis-py abandons a close at the first
connection whose close is not seen within the connect timeout (a line's is short, and a stall of
the loop that long ends it), leaving that client's other connections open; another try closes
them."""


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
        close_wait_s: float = CLOSE_WAIT_S,
    ) -> None:
        self._dial = dial
        self._scripts = scripts
        self._most = most
        self._warm = min(warm, most)
        self._close_wait_s = close_wait_s
        self._lines: list[RenewalLine] = []
        self._takes = itertools.count()
        self._closed = False
        self._all_idle: anyio.Event | None = None
        """Set when the last send in flight ends, while closing waits for that."""

    def __len__(self) -> int:
        return len(self._lines)

    @contextmanager
    def idle(self) -> Iterator[RenewalLine | None]:
        """The line idle longest, held for the block (a new one while fewer than `warm` exist,
        or when all are busy and fewer than `most` exist); None when all `most` are busy, or
        once closed (a send started as the worker stops dials nothing)."""
        if self._closed:
            yield None
            return
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
            if self._all_idle is not None and not any(other.busy for other in self._lines):
                self._all_idle.set()

    async def aclose(self) -> None:
        """Close every line, once the sends in flight ended or CLOSE_WAIT_S passed; the closes
        too are given CLOSE_WAIT_S at most (a stop is never held up by a line)."""
        self._closed = True
        if any(line.busy for line in self._lines):
            self._all_idle = anyio.Event()
            with anyio.move_on_after(self._close_wait_s):
                await self._all_idle.wait()
        lines, self._lines = self._lines, []
        with anyio.move_on_after(self._close_wait_s) as bound:
            async with anyio.create_task_group() as group:
                for line in lines:
                    group.start_soon(_close, line.client)
        if bound.cancelled_caught:
            get_logger().warning("renewal_lines_close_timed_out", lines=len(lines))


async def _close(client: Redis) -> None:
    """Close `client`, trying again while a close fails (CLOSE_TRIES says why)."""
    error: Exception | None = None
    for _ in range(CLOSE_TRIES):
        try:
            await client.aclose()
        except (RedisError, OSError) as exc:
            error = exc
        else:
            return
    if error is not None:
        get_logger().warning("renewal_line_close_failed", error=describe(error))


def _taken(line: RenewalLine) -> int:
    return line.taken
