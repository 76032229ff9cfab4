"""Geometry of the timeline lanes: server-clock times mapped to percentages of a lane.

The window is centred on the server's now: as far into the past as the furthest deadline lies in
the future, so a lease's bar runs from when it was first seen to its deadline, and renewals show
as ticks where the deadline was seen to move.
"""

from __future__ import annotations

from dataclasses import dataclass

from emq_worker.dashboard.timeline import EndedLease, Lease, Timeline

MIN_HALF_WINDOW_MS = 5_000
ENDED_SHOWN = 12


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


def _lane(lease: Lease, status: str, now_ms: int, scale: _Scale, *, ended: bool) -> Lane:
    start = scale.x(lease.first_seen_ms)
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
        ended=ended,
    )


def _ended_lane(end: EndedLease, now_ms: int, scale: _Scale) -> Lane:
    return _lane(end.lease, end.ended, now_ms, scale, ended=True)


def lanes(timeline: Timeline) -> Lanes:
    now = timeline.now_ms
    furthest = max((lease.deadline_ms - now for lease in timeline.leases), default=0)
    half = max(MIN_HALF_WINDOW_MS, int(furthest * 1.1))
    scale = _Scale(now - half, now + half)
    return Lanes(
        now_ms=now,
        held=timeline.held,
        start_ms=now - half,
        end_ms=now + half,
        live=[
            _lane(lease, lease.status(now), now, scale, ended=False) for lease in timeline.leases
        ],
        ended=[_ended_lane(end, now, scale) for end in timeline.ended[:ENDED_SHOWN]],
    )
