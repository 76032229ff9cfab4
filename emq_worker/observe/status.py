"""What the beat tells the service manager (systemd STATUS=) and the log about its queues."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from structlog.typing import FilteringBoundLogger

from emq_worker.observe.sdnotify import Notifier

STATUS_EVERY_S = 1.0
"""The most often the beat reports what it holds to the service manager (systemd STATUS=)."""


@dataclass(eq=False)
class BeatStatus:
    """`report()` the held jobs at most every STATUS_EVERY_S; `note_pause()` logs a queue's
    pause and resume once each."""

    notifier: Notifier
    queue_names: Sequence[str]
    concurrency: int
    log: FilteringBoundLogger
    paused_seen: set[str] = field(default_factory=set, init=False)
    _next_status: float = field(default=0.0, init=False)

    def report(self, now: float, held: int, completed: int) -> None:
        """Tell the service manager what is held, at most every STATUS_EVERY_S."""
        if not self.notifier.enabled or now < self._next_status:
            return
        self._next_status = now + STATUS_EVERY_S
        names = ", ".join(self.queue_names)
        text = f"held {held} of {self.concurrency} on {names}; {completed} completed"
        if self.paused_seen:
            text += f"; paused: {', '.join(sorted(self.paused_seen))}"
        self.notifier.status(text)

    def note_pause(self, queue: str, paused: bool) -> None:
        if paused and queue not in self.paused_seen:
            self.paused_seen.add(queue)
            self.log.info("queue_paused", queue=queue)
        elif not paused and queue in self.paused_seen:
            self.paused_seen.discard(queue)
            self.log.info("queue_resumed", queue=queue)
