"""The upkeep check of one queue (lua/upkeep.lua): reap what lapsed, and say what else is due."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emq_worker.errors import ScriptError
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ReapResult, reap_result, text


@dataclass(frozen=True, slots=True)
class UpkeepDue:
    """What a check found. `held_ms`: another check vouches for the queue this long, and the rest
    is unknown (None). Otherwise the ms until the earliest lease left lapses (`reap_in`: 0 when
    the check's reap batch was full), the earliest scheduled job falls due (`promote_in`) and the
    earliest repeat falls due (`repeat_in`), each None when there is none; how many jobs wait in
    pending; and what the check reaped (`reaped`, as the reap verb reports it)."""

    held_ms: int | None = None
    leased: bool = True
    """With `held_ms`: whether any lease existed on the queue (False: none can lapse before a
    lease taken from now on)."""
    reap_in: int | None = None
    promote_in: int | None = None
    repeat_in: int | None = None
    pending: int = 0
    reaped: ReapResult = field(default_factory=lambda: ReapResult(0, 0, 0, False))

    @property
    def quiet(self) -> bool:
        """Nothing to do now: held by another check, or nothing due and nothing pending."""
        due_now = 0 in (self.reap_in, self.promote_in, self.repeat_in)
        return self.held_ms is not None or not (due_now or self.pending)


async def check_upkeep(
    queue: Queue, window_ms: int, reap_batch: int, max_attempts: int, *, force: bool = False
) -> UpkeepDue:
    """Check `queue`, reaping up to `reap_batch` lapsed leases (dead-lettering those at
    `max_attempts`); a check that finds nothing due vouches for it to the fleet for up to
    `window_ms`. `force` checks even then (a burst worker)."""
    reply = await queue.run(
        "upkeep",
        [queue.keys.prefix, max(1, window_ms), "1" if force else "", reap_batch, max_attempts],
    )
    return upkeep_due(reply)


def upkeep_due(reply: Any) -> UpkeepDue:
    if not isinstance(reply, list) or not reply:
        raise ScriptError(f"unexpected upkeep reply: {reply!r}")
    status = text(reply[0])
    if status == "held" and len(reply) in (2, 3):
        return UpkeepDue(held_ms=int(reply[1]), leased=len(reply) == 2 or int(reply[2]) != 0)
    if status != "due" or len(reply) < 8:
        raise ScriptError(f"unexpected upkeep reply: {reply!r}")
    reap_in, promote_in, repeat_in, pending = (int(value) for value in reply[1:5])
    reaped = reap_result([*reply[5:8], int(reap_in == 0), *reply[8:]])
    known = (_known(reap_in), _known(promote_in), _known(repeat_in))
    return UpkeepDue(None, True, *known, pending, reaped)


def _known(ms: int) -> int | None:
    return None if ms < 0 else ms
