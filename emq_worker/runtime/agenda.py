"""When each queue next needs the supervisor: an upkeep check, a claim, a promote, a repeat scan.

An idle worker spends nothing on a queue per beat. It parks on every wake key at once (each job
our scripts make ready pushes a token), and keeps, per queue, what it learned:
- `check_at`: its next upkeep check (lua/upkeep.lua: what is due, and is anything pending), at
  most one check window after the last, or when the earliest lease it saw lapses;
- `promote_at`, `repeat_at`: when the next scheduled job and the next repeat fall due;
- `claim_at`: when to claim again without being asked: a limit's window reopens;
- `offer_at`: when a standing hand-off offer is renewed before it lapses (lua/offer.lua; a claim
  when it no longer stands);
- `wanted`: the next drain claims it. At start; after a wake token or a hand-off on it; while its
  last claim was full; when a check finds jobs pending or a reap or promote made some ready. A
  claim that comes back short (the queue ran dry) ends it.
A wake token may announce a due time rather than a job (a job scheduled for later, a repeat
registered): a woken queue whose claim takes nothing is promoted and scanned for repeats at once.

The check window is QUIET_BEATS beats, longer when a worker serves more queues than it can check at
CHECKS_PER_BEAT a beat, and at most a third of the lease, so that a lease taken since the last check
is seen before it can lapse (within two windows when the check was another worker's). A queue with
leases is checked every beat, and a lease seen is reaped at its deadline: the window bounds only how
long a quiet queue goes unlooked-at (an EchoMQ producer's job, which pushes no wake token). Burst
mode checks and claims every queue on every pass.

Pure bookkeeping (times are passed in), tested alone.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from emq_worker.protocol.upkeep_check import UpkeepDue

CHECKS_PER_BEAT = 10
"""At most about how many queues an idle worker checks per beat."""
QUIET_BEATS = 10
"""The shortest check window, in beats: an idle queue costs the fleet one full check per window
(four commands), and each other worker a `held` answer (two)."""
QUIET_SLACK_SHARE = 10
"""A lease taken just after a look that found none must be seen this share of the lease (and a
beat) before its deadline, by a check an idle park made late (`quiet_budget_s`)."""
CHECK_JITTER = 0.1
"""A check window is cut by up to this share at random, so that the checks of many queues spread
over the window instead of falling due together."""


def check_window_s(queues: int, beat_s: float, lease_s: float, chosen_s: float = 0.0) -> float:
    """How long a check that found nothing due vouches for a queue: `chosen_s` when the user
    chose it (--check-window-ms), else QUIET_BEATS beats or more; never over a third of the
    lease (a lease taken since the check must be seen before it can lapse)."""
    beats = max(QUIET_BEATS, math.ceil(queues / CHECKS_PER_BEAT))
    return min(chosen_s or beats * beat_s, lease_s / 3)


def quiet_budget_s(lease_s: float, beat_s: float, idle_park_s: float) -> float:
    """How long after a look that found no lease on a queue its next check may come, made late
    by an idle park (which ends for no such check: it waits for the park's end, at most
    `idle_park_s`): a lease taken just after the look is then still seen a beat and a tenth of
    the lease before its deadline, so a dead holder's lease is reaped on time. Not positive when
    the lease is too short for that: checks then end the park on time."""
    return lease_s - beat_s - idle_park_s - lease_s / QUIET_SLACK_SHARE


@dataclass(slots=True)
class QueueTimes:
    check_at: float = 0.0
    check_waits: bool = False
    """The check may wait for the park's end (no lease was seen, and the lease leaves room)."""
    wanted: bool = True
    woken: bool = False
    """A wake token of this queue was popped since its last claim."""
    claim_at: float | None = None
    offer_at: float | None = None
    promote_at: float | None = None
    repeat_at: float | None = None
    scheduled: bool = False
    """The last check or promote saw a scheduled job (burst mode is not idle then)."""


class Agenda:
    def __init__(
        self,
        names: Iterable[str],
        window_s: float,
        beat_s: float,
        rng: random.Random,
        quiet_budget_s: float = 0.0,
    ) -> None:
        self.window_s = window_s
        self.beat_s = beat_s
        self.quiet_budget_s = quiet_budget_s
        """See `quiet_budget_s()`; 0: every check ends the park on time."""
        self.grid_s = min(beat_s, window_s * CHECK_JITTER)
        """The tick idle chores are aligned to: a beat, or a tenth of a short window."""
        self.rng = rng
        self._times = {name: QueueTimes() for name in names}
        self._woken_dry: list[str] = []

    def __getitem__(self, name: str) -> QueueTimes:
        return self._times[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._times)

    def window(self) -> float:
        """The window of the next check: the check window, cut by up to CHECK_JITTER."""
        return self.window_s * self.rng.uniform(1 - CHECK_JITTER, 1)

    def checked(
        self, name: str, due: UpkeepDue, now: float, window_s: float, busy: bool = False
    ) -> None:
        """Record a check made with `window_s`: when to check again, what falls due when,
        whether to claim. A check held by another worker's is made again a beat after that one
        lapses: its maker checks again first (when it lapses), so each queue costs the fleet
        about one full check per window, and if its maker is gone, a beat later. A note made over
        leases lapses no later than the earliest of them, so a lease whose holder died is reaped
        within a beat of its deadline even when the holder made the note. A
        queue with leases (`busy`: this worker holds some; or the check saw some) is checked at
        least once per beat, as the reaper always ran: a stalled server's lapsed leases are then
        reaped by the check already queued when it resumes, before their holders renew them."""
        times = self._times[name]
        busy = busy or due.reap_in is not None
        if due.held_ms is not None:
            again = due.held_ms / 1000 + min(window_s, self.beat_s)
            # No lease to lapse: look again as late as a lease taken from now on allows, not a
            # beat after each note the maker makes (the other workers of a fleet paid that).
            waits = not due.leased and again <= self.quiet_budget_s
            again = self.quiet_budget_s if waits else again
        else:
            waits = False  # the window is the longest a queue nothing wakes goes unlooked-at
            again = window_s if due.reap_in is None else min(window_s, due.reap_in / 1000)
            times.promote_at = _at(now, due.promote_in)
            times.repeat_at = _at(now, due.repeat_in)
            times.scheduled = due.promote_in is not None
            times.wanted = times.wanted or due.pending > 0
        # A quiet queue's check waits for the next tick of the grid: the checks of many queues
        # fall due together, one park for all (never before its own note lapses: that would be
        # held). Not a held check: it stands in for a maker that may be gone.
        times.check_waits = waits and not busy
        if busy:
            times.check_at = now + min(again, self.beat_s)
        elif due.held_ms is not None:
            times.check_at = now + again
        else:
            times.check_at = self.align(now + again, up=True)

    def check_due(self, name: str, now: float) -> bool:
        return now >= self._times[name].check_at

    def align(self, at: float, *, up: bool) -> float:
        """`at` moved to a tick of the grid (`grid_s` apart), later (`up`) or earlier: the
        times an idle worker wakes for fall together."""
        ticks = at / self.grid_s  # a time on a tick stays there, whatever the float error
        return (math.ceil(ticks - 1e-6) if up else math.floor(ticks + 1e-6)) * self.grid_s

    def reaped(self, name: str, returned: int, more: bool, now: float) -> None:
        """A check reaped: jobs it returned are claimed; `more`: its batch was full, so check (and
        reap) again on the next pass."""
        times = self._times[name]
        if more:
            times.check_at = now
        times.wanted = times.wanted or returned > 0

    def promoted(self, name: str, promoted: int, next_due_ms: int | None, now: float) -> None:
        times = self._times[name]
        times.promote_at = _at(now, next_due_ms)
        times.scheduled = next_due_ms is not None
        times.wanted = times.wanted or promoted > 0

    def repeats_fired(self, name: str, next_in_ms: int | None, now: float) -> None:
        self._times[name].repeat_at = _at(now, next_in_ms)

    def _renewal(self, renew_at: float | None) -> float | None:
        """An offer's renewal, at the grid's tick before `renew_at` (earlier is harmless)."""
        return None if renew_at is None else self.align(renew_at, up=False)

    def woken(self, name: str) -> None:
        times = self._times[name]
        times.wanted = times.woken = True

    def want(self, name: str) -> None:
        self._times[name].wanted = True

    def wants_claim(self, name: str, now: float) -> bool:
        """Whether the drain claims `name` now (a `claim_at` that has come makes it wanted)."""
        times = self._times[name]
        if times.claim_at is not None and now >= times.claim_at:
            times.wanted, times.claim_at = True, None
        return times.wanted

    def claimed(self, name: str, leased: int, dry: bool, renew_at: float | None) -> None:
        """A claim leased `leased` jobs; `dry`: it came back short. `renew_at`: when a hand-off
        offer it left must be renewed."""
        times = self._times[name]
        if times.woken and leased == 0:
            self._woken_dry.append(name)
        times.woken = False
        if dry:
            times.wanted = False
        times.claim_at, times.offer_at = None, self._renewal(renew_at)

    def offer_due(self, name: str, now: float) -> bool:
        """Whether the standing offer on `name` is to be renewed now (a claim due anyway renews
        it by itself)."""
        times = self._times[name]
        return times.offer_at is not None and now >= times.offer_at and not times.wanted

    def offer_kept(self, name: str, renew_at: float | None) -> None:
        """An offer renewed: renew it again at `renew_at`; None (it no longer stood): claim."""
        times = self._times[name]
        times.offer_at = self._renewal(renew_at)
        if renew_at is None:
            times.wanted = True

    def held_back(self, name: str, until: float) -> None:
        """A limit refused the claim: claim again no sooner than `until`."""
        times = self._times[name]
        times.wanted, times.claim_at = False, until

    def woken_dry(self) -> list[str]:
        """The queues a wake token woke whose claim took nothing, since the last call."""
        names, self._woken_dry = self._woken_dry, []
        return names

    def eager(self, now: float) -> None:
        """Burst mode: check and claim every queue on this pass."""
        for times in self._times.values():
            times.check_at, times.wanted, times.check_waits = now, True, False

    def next_time(self, now: float) -> float | None:
        """The soonest future time anything falls due (a time already past is being handled,
        or waits on something else: it must not end a park at once, which would spin)."""
        soonest: float | None = None
        for times in self._times.values():
            for at in (
                None if times.check_waits else times.check_at,
                times.claim_at,
                times.offer_at,
                times.promote_at,
                times.repeat_at,
            ):
                if at is not None and at > now and (soonest is None or at < soonest):
                    soonest = at
        return soonest

    def scheduled(self) -> bool:
        return any(times.scheduled for times in self._times.values())

    def holding(self) -> bool:
        """Some queue waits for a time to claim again (a limit's window; an offer's renewal)."""
        return any(
            times.claim_at is not None or times.offer_at is not None
            for times in self._times.values()
        )


def _at(now: float, in_ms: int | None) -> float | None:
    return None if in_ms is None else now + in_ms / 1000
