"""What the beat's components share: one state object and one stop signal.

The supervisor, the drain, the renewal sweep, the settle batcher and the runner each take the
`WorkerState` instead of threading the same six values through their constructors (uvicorn's
`ServerState` and `should_exit` are the model). The stop is requested in one place and read
everywhere; waits that must end at once register a callback.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emq_worker.observe.clock import Clock
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.queue import Queue
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.lease import Lease, LeaseBook, SlotSignal
from emq_worker.runtime.pace import Pace


class StopSignal:
    """Set once by a graceful stop (SIGTERM, `Worker.request_stop`); never cleared."""

    def __init__(self) -> None:
        self.requested = False
        self.hand_back = False
        """Hand held jobs back at once instead of giving them the grace period (an operator's
        `stop`: their jobs run elsewhere now)."""
        self._callbacks: list[Callable[[], None]] = []

    def request(self, *, hand_back: bool = False) -> None:
        if self.requested:
            return
        self.requested = True
        self.hand_back = hand_back
        for callback in self._callbacks:
            callback()

    def on_request(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the stop is requested (at once if it already was)."""
        self._callbacks.append(callback)
        if self.requested:
            callback()


@dataclass(slots=True, eq=False)
class WorkerState:
    settings: WorkerSettings
    queues: dict[str, Queue]
    counters: Counters
    clock: Clock
    rng: random.Random
    stop: StopSignal
    book: LeaseBook = field(default_factory=LeaseBook)
    slots: SlotSignal = field(default_factory=SlotSignal)
    pace: Pace = field(default_factory=Pace)
    handler_client: Any = None
    """The client handlers get as `ctx.redis` (valkey/autopipeline.py); None: none to give."""

    def give_up(self, lease: Lease, *, cancel: bool = True) -> None:
        """The lease is no longer ours: stop its job (its late result is never written), forget
        the lease and free its slot. `cancel=False` from the job's own task, which stops itself."""
        if cancel:
            lease.lose()
        else:
            lease.lost = True
        self.book.discard(lease)
        self.slots.fire()
