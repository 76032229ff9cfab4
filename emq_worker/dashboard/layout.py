"""Geometry of the timeline lanes: server-clock times mapped to percentages of a lane.

The window reaches as far into the future as the furthest deadline, and as far into the past as
the oldest claim shown (at most PAST_SHARE_MAX times the future): a lease's bar runs from its
claim to its deadline (a claim older than the window starts at its left edge, marked clipped),
and renewals show as ticks where the deadline was seen to move. The ticks stand in the lane's
top band only and the "now" line is drawn last, across the whole lane, so no tick hides it.
"""

from __future__ import annotations

from dataclasses import dataclass

from emq_worker.dashboard.fleet import Holder
from emq_worker.dashboard.listing import JobRow
from emq_worker.dashboard.timeline import EndedLease, Lease, Timeline

MIN_HALF_WINDOW_MS = 5_000
ENDED_SHOWN = 12
PAST_SHARE_MAX = 4
"""The past may take up to 4/5 of the lane."""


@dataclass(frozen=True, slots=True)
class Lane:
    job_id: str
    attempts: int
    status: str
    """held, at-risk, expired, or how an ended lease ended (reaped, completed, ...)."""
    deadline_ms: int
    left_ms: int
    renewals: int
    bar_x: float
    bar_width: float
    deadline_x: float
    ticks: list[float]
    ended: bool
    holder: str
    task: str
    claimed_ms: int
    running_ms: int
    estimated: bool
    """The claim time is an estimate (no holder's entry lists the lease)."""
    clipped: bool
    """The claim lies before the window's left edge."""


@dataclass(frozen=True, slots=True)
class Lanes:
    now_ms: int
    held: int
    start_ms: int
    end_ms: int
    live: list[Lane]
    ended: list[Lane]
    now_x: float = 50.0


class _Scale:
    def __init__(self, start_ms: int, end_ms: int) -> None:
        self.start_ms = start_ms
        self.span = max(end_ms - start_ms, 1)

    def x(self, ms: int) -> float:
        return round(min(max((ms - self.start_ms) * 100 / self.span, 0.0), 100.0), 2)


def _lane(
    lease: Lease, status: str, now_ms: int, scale: _Scale, *, ended: int | None = None
) -> Lane:
    """`ended`: when an ended lease was seen to end (its run is measured up to then)."""
    start = scale.x(lease.start_ms)
    stop = scale.x(lease.deadline_ms)
    return Lane(
        job_id=lease.job_id,
        attempts=lease.attempts,
        status=status,
        deadline_ms=lease.deadline_ms,
        left_ms=lease.deadline_ms - now_ms,
        renewals=len(lease.renewals),
        bar_x=start,
        bar_width=round(max(stop - start, 0.3), 2),
        deadline_x=stop,
        ticks=[scale.x(ms) for ms in lease.renewals],
        ended=ended is not None,
        holder=lease.holder,
        task=lease.task,
        claimed_ms=lease.start_ms,
        running_ms=(now_ms if ended is None else ended) - lease.start_ms,
        estimated=lease.claim_estimated,
        clipped=lease.start_ms < scale.start_ms,
    )


def _ended_lane(end: EndedLease, now_ms: int, scale: _Scale) -> Lane:
    return _lane(end.lease, end.ended, now_ms, scale, ended=end.noticed_ms)


def lanes(timeline: Timeline) -> Lanes:
    now = timeline.now_ms
    furthest = max((lease.deadline_ms - now for lease in timeline.leases), default=0)
    future = max(MIN_HALF_WINDOW_MS, int(furthest * 1.1))
    oldest = max((now - lease.start_ms for lease in timeline.leases), default=0)
    past = min(max(future, int(oldest * 1.05)), PAST_SHARE_MAX * future)
    scale = _Scale(now - past, now + future)
    return Lanes(
        now_ms=now,
        held=timeline.held,
        start_ms=now - past,
        end_ms=now + future,
        live=[_lane(lease, lease.status(now), now, scale) for lease in timeline.leases],
        ended=[_ended_lane(end, now, scale) for end in timeline.ended[:ENDED_SHOWN]],
        now_x=scale.x(now),
    )


@dataclass(frozen=True, slots=True)
class Bar:
    """A lease bar of the active tab: claim to deadline, on a scale shared by the page."""

    holder: str
    running_ms: int
    estimated: bool
    bar_x: float
    bar_width: float
    deadline_x: float
    now_x: float


def active_bars(
    rows: list[JobRow], held: dict[tuple[str, int], Holder], now_ms: int, lease_ms: int
) -> dict[str, Bar]:
    """Each active row's bar; a lease no entry lists is dated its deadline minus `lease_ms`
    (the longest lease the queue's workers announce), and marked estimated."""
    claims: dict[str, tuple[int, str, bool]] = {}
    for row in rows:
        deadline = row.score_ms or now_ms
        holder = held.get((row.id, row.attempts))
        if holder is not None:
            claims[row.id] = (holder.claimed_ms, holder.worker, False)
        else:
            claims[row.id] = (min(deadline - lease_ms, now_ms), "", True)
    if not claims:
        return {}
    start = min(claim for claim, _, _ in claims.values())
    end = max([now_ms, *(row.score_ms or now_ms for row in rows)])
    scale = _Scale(start, end + max((end - start) // 20, 1))
    bars = {}
    for row in rows:
        claim, worker, estimated = claims[row.id]
        x, stop = scale.x(claim), scale.x(row.score_ms or now_ms)
        bars[row.id] = Bar(
            worker,
            now_ms - claim,
            estimated,
            x,
            round(max(stop - x, 0.3), 2),
            stop,
            scale.x(now_ms),
        )
    return bars
