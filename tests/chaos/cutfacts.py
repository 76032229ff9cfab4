"""What the namespace partition rows measure, from the server and the handlers' ledger.

- `Deadlines`: the lease deadline per job and attempt (its `active` score, server clock in ms,
  last seen while the job was at that attempt), polled through the unix socket.
- `next_renewal`: the wall time of the holder's next renewal tick, from the instants its
  renewals moved a deadline (a renewal sets the score to server TIME + lease).
- `takeovers`: per job whose handler the holder was running at the cut (it started an attempt
  and had not ended it), when that handler stopped (`stopped` or `done` in the ledger, wall
  clock), when a later attempt started, both against that attempt's deadline; an overlap is a
  start before the stop. A job the holder was not running at the cut (its attempt never
  started, or ended before) is none of these.

The server runs on this host, so its TIME and `time.time()` are one clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from redis.asyncio import Redis

from emq_worker.protocol.keys import QueueKeys
from tests.chaos.ledger import DONE, START, STOPPED, Event
from tests.support.wait import eventually

POLL_S = 0.005


@dataclass(slots=True)
class Deadlines:
    """The last deadline (ms, server clock) seen per (job, attempt) while polling."""

    queue: str
    ids: Sequence[str]
    ms: dict[tuple[str, int], float] = field(default_factory=dict)

    async def sample(self, client: Redis) -> None:
        keys = QueueKeys.of(self.queue)
        async with client.pipeline(transaction=False) as pipe:
            for job in self.ids:
                pipe.zscore(keys.active, job)
                pipe.hget(keys.job(job), "attempts")
            replies = await pipe.execute()
        for job, score, attempts in zip(self.ids, replies[::2], replies[1::2], strict=True):
            if score is not None:
                self.ms[(job, int(attempts or 0))] = float(score)

    async def poll(self, client: Redis) -> None:
        """Sample until cancelled."""
        while True:
            await self.sample(client)
            await anyio.sleep(POLL_S)


async def next_renewal(
    client: Redis, queue: str, jobs: Sequence[str], lease_ms: int, every_ms: int
) -> float:
    """The wall time (s) of the holder's next renewal tick, at least 100 ms ahead, from two
    observed renewals of any of `jobs` (the ticks keep a fixed schedule; a renewal sets a
    deadline to server TIME + lease)."""
    key = QueueKeys.of(queue).active
    renewed: list[float] = []
    last: dict[str, float] = {}

    async def moved_twice() -> bool:
        async with client.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.zscore(key, job)
            scores = await pipe.execute()
        for job, score in zip(jobs, scores, strict=True):
            if score is None:
                continue
            if job in last and score != last[job]:
                at = (float(score) - lease_ms) / 1000
                if not renewed or at - renewed[-1] > every_ms / 2000:
                    renewed.append(at)
            last[job] = float(score)
        return len(renewed) >= 2

    await eventually(moved_twice, timeout=20 * every_ms / 1000, what=f"two renewals in {queue}")
    tick = renewed[-1] + every_ms / 1000
    now = await _server_seconds(client)
    while tick < now + 0.1:
        tick += every_ms / 1000
    return tick


async def _server_seconds(client: Redis) -> float:
    seconds, micros = await client.time()
    return int(seconds) + int(micros) / 1e6


@dataclass(frozen=True, slots=True)
class Takeover:
    """One job the cut-off holder was running at the cut (times in wall seconds)."""

    job: str
    deadline: float | None
    stopped: float | None
    """When the holder's handler stopped (cancelled) or returned; None if it never did."""
    cancelled: bool
    restarted: float | None
    """When another worker started the job again; None if nobody did."""

    @property
    def overlap_ms(self) -> float:
        """How long both ran at once (0 when the holder stopped first)."""
        if self.restarted is None:
            return 0.0
        end = self.stopped if self.stopped is not None else float("inf")
        return max(0.0, (end - self.restarted) * 1000)


def takeovers(
    events: Sequence[Event],
    jobs: Sequence[str],
    holder: int,
    deadlines: dict[tuple[str, int], float],
    cut_at: float,
) -> list[Takeover]:
    """Per job of `jobs` whose handler pid `holder` was still running at `cut_at` (wall
    seconds): its stop and its restart."""
    found = []
    for job in jobs:
        began = [
            e
            for e in events
            if e.job == job and e.pid == holder and e.kind == START and e.wall < cut_at
        ]
        if not began:
            continue  # the holder never ran it before the cut: not held
        attempt = began[-1].attempt
        mine = [e for e in events if e.job == job and e.pid == holder and e.attempt == attempt]
        ends = [e for e in mine if e.kind in (STOPPED, DONE)]
        if ends and ends[0].wall < cut_at:
            continue  # it ended before the cut: not held
        again = [e for e in events if e.job == job and e.kind == START and e.attempt > attempt]
        deadline = deadlines.get((job, attempt))
        found.append(
            Takeover(
                job,
                None if deadline is None else deadline / 1000,
                ends[0].wall if ends else None,
                bool(ends) and ends[0].kind == STOPPED,
                again[0].wall if again else None,
            )
        )
    return found


def _after_ms(times: Sequence[tuple[float | None, float | None]]) -> list[float]:
    return [round((at - base) * 1000, 1) for at, base in times if at is not None and base]


def summarize(found: Sequence[Takeover]) -> dict[str, Any]:
    """The figures of the issue's table for one set of takeovers."""
    overlaps = [t.overlap_ms for t in found if t.overlap_ms > 0]
    gaps = [
        (t.restarted - t.stopped) * 1000
        for t in found
        if t.restarted is not None and t.stopped is not None and t.cancelled
    ]
    return {
        "held_at_cut": len(found),
        "taken_over": sum(1 for t in found if t.restarted is not None),
        "stop_after_deadline_ms": _after_ms(
            [(t.stopped, t.deadline) for t in found if t.cancelled]
        ),
        "restart_after_deadline_ms": _after_ms([(t.restarted, t.deadline) for t in found]),
        "never_stopped": sum(1 for t in found if t.stopped is None),
        "overlapped": len(overlaps),
        "max_overlap_ms": round(max(overlaps, default=0.0), 1),
        "min_gap_ms": round(min(gaps), 1) if gaps else None,
    }
