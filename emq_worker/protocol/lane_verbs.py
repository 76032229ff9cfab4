"""Fair lanes and priorities: the names they take, and the verbs over a queue's lanes.

A job enqueued with a `group` waits in its group's lane (`emq:{q}:g:<group>:pending`, EchoMQ's
grouped keys) instead of `pending`; each claim serves the lanes in rotation, one job per turn,
within each group's concurrency limit (lua/includes/lanes_claim.lua). A `priority` is a job's
score where it waits: lower is claimed first, mint order within a priority.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Final

from emq_worker.errors import ConfigError
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import ArgValue

_GROUP = re.compile(r"[A-Za-z0-9._-]{1,128}")
PRIORITY_MIN: Final = -1_000_000
PRIORITY_MAX: Final = 1_000_000
LANES_SHOWN: Final = 10
"""Lanes `stats` and /metrics list per queue, deepest first: a bounded number of series."""
LANES_SCAN: Final = 1000
"""Group names read from each key that names them (ring, paused, glimit, gactive) per look."""


def validate_group(group: str) -> str:
    """`group` if it can name a lane, else ConfigError naming it. The same alphabet as queue
    names (`:` would blur the key grammar `g:<group>:pending`)."""
    if not isinstance(group, str) or not _GROUP.fullmatch(group):
        raise ConfigError(f"group must match [A-Za-z0-9._-]{{1,128}}; got {group!r}")
    return group


def validate_priority(priority: int) -> int:
    """`priority` if it is an integer in [PRIORITY_MIN, PRIORITY_MAX], else ConfigError."""
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise ConfigError(
            f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX} "
            f"(lower is claimed first); got {priority!r}"
        )
    return priority


@dataclass(frozen=True, slots=True)
class Lane:
    group: str
    waiting: int
    """Jobs in the lane (ready, not leased)."""
    active: int
    """Jobs of the group leased now (gactive)."""
    limit: int
    """The group's concurrency limit (glimit); 0 for none."""
    paused: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LanesView:
    """What a queue's lanes hold: the deepest few, and totals over every group found."""

    groups: int
    """Groups found (in the ring, paused, glimit or gactive)."""
    waiting: int
    """Jobs waiting in their lanes, all groups found."""
    serviceable: int
    """Lanes on the ring (not empty, not paused, below their limit)."""
    complete: bool
    """False when a key named more groups than one look reads (LANES_SCAN each)."""
    deepest: tuple[Lane, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "deepest": [lane.as_dict() for lane in self.deepest]}


NO_LANES = LanesView(0, 0, 0, True, ())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def read_lanes(queue: Queue, top: int = LANES_SHOWN, scan: int = LANES_SCAN) -> LanesView:
    """The deepest `top` lanes of `queue` and the totals (lua/lanes.lua), in one call."""
    reply = await queue.run("lanes", [queue.keys.prefix, top, scan])
    groups, complete, waiting, serviceable = (int(v) for v in reply[:4])
    deepest = tuple(
        Lane(
            _text(reply[i]),
            int(reply[i + 1]),
            int(reply[i + 2]),
            int(reply[i + 3]),
            reply[i + 4] == 1,
        )
        for i in range(4, len(reply), 5)
    )
    return LanesView(groups, waiting, serviceable, complete == 1, deepest)


async def pause_lane(queue: Queue, group: str) -> bool:
    """Take `group`'s lane out of rotation (its running jobs run on); False if it was paused."""
    args = [queue.keys.prefix, validate_group(group)]
    return int(await queue.run("lane_pause", args)) == 1


async def resume_lane(queue: Queue, group: str) -> bool:
    """Return `group`'s lane to rotation; False if it was not paused."""
    args = [queue.keys.prefix, validate_group(group)]
    reply = await queue.run("lane_resume", args)
    return int(reply) == 1


async def limit_lane(queue: Queue, group: str, limit: int | None) -> None:
    """At most `limit` jobs of `group` leased at once (None: no limit)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"a lane's limit must be an integer >= 1 (or None); got {limit!r}")
    args: list[ArgValue] = [queue.keys.prefix, validate_group(group), limit or 0]
    await queue.run("lane_limit", args)
