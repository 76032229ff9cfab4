"""Per-queue backoff: a queue whose keys the server refuses rests alone while the others run.

A worker serving several queues must not stop claiming on all of them because one is broken (a
key of the wrong type, or on a cluster the node holding that queue's slot down). `QueueHealth`
tracks, per queue, the failure streak and when the queue may be tried again; the supervisor skips
a resting queue's reap, promote, claim and wake key until then. The curve is the beat's own:
BACKOFF_FIRST_S doubling per failure, capped at BACKOFF_CAP_S, jittered down to half. Pure
bookkeeping: no Redis, no clock of its own (times are passed in), so it is tested alone.

A streak on the wake key alone (`wake=True`: the park's BLPOP was refused, the claims were not)
only keeps the queue out of the park: its jobs are still claimed every pass, woken by the timer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

BACKOFF_FIRST_S = 0.1
BACKOFF_CAP_S = 5.0


def backoff_s(failures: int, rng: random.Random) -> float:
    """The jittered pause after the given number of consecutive failures (1 for the first)."""
    pause = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2 ** min(failures, 10))
    return rng.uniform(pause / 2, pause)


@dataclass(slots=True)
class Streak:
    failures: int
    retry_at: float
    wake: bool


class QueueHealth:
    """Which queues rest after a failure, and until when."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._streaks: dict[str, Streak] = {}

    def failed(self, queue: str, now: float, *, wake: bool = False) -> float:
        """Count one more failure of the queue (of its wake key alone when `wake`); returns the
        pause before it is tried again."""
        streak = self._streaks.get(queue)
        failures = 1 if streak is None else streak.failures + 1
        pause = backoff_s(failures, self.rng)
        self._streaks[queue] = Streak(failures, now + pause, wake)
        return pause

    def succeeded(self, queue: str, *, wake: bool = False) -> bool:
        """End the queue's streak of that kind; True when it had one (the queue recovered). A
        claim that works says nothing of a broken wake key, nor a wake key of the claims."""
        streak = self._streaks.get(queue)
        if streak is None or streak.wake != wake:
            return False
        del self._streaks[queue]
        return True

    def ready(self, queue: str, now: float) -> bool:
        """The queue may be reaped, promoted and claimed: it has no streak, its streak is its
        wake key's alone, or its pause is over."""
        streak = self._streaks.get(queue)
        return streak is None or streak.wake or now >= streak.retry_at

    def failing(self, queue: str) -> bool:
        """The queue's last try failed (whether or not its pause is over)."""
        return queue in self._streaks

    def wake_due(self, queue: str, now: float) -> bool:
        """The queue's wake key failed and its pause is over: check it before parking on it."""
        streak = self._streaks.get(queue)
        return streak is not None and streak.wake and now >= streak.retry_at

    def resting(self) -> bool:
        """Some queue's claims failed and are not yet known to work again."""
        return any(not streak.wake for streak in self._streaks.values())

    def failures(self, queue: str) -> int:
        streak = self._streaks.get(queue)
        return 0 if streak is None else streak.failures

    def next_retry(self, now: float) -> float | None:
        """When the soonest queue still resting after `now` may be tried again, else None (a
        queue whose pause is over but not yet retried must not end a park at once: a spin)."""
        return min((s.retry_at for s in self._streaks.values() if s.retry_at > now), default=None)
