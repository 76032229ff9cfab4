"""One child slot of the fleet: the process in it now, what it last said, and when to restart it."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from enum import StrEnum

from anyio.abc import Process

RESTART_FIRST_S = 0.5
RESTART_CAP_S = 10.0
"""Restart backoff: 0.5 s after a first quick exit, doubling, at most 10 s (well inside a 30 s
systemd watchdog, so one crashing child does not take the whole service down)."""
STABLE_S = 30.0
"""A child that ran this long before it exited starts its backoff over."""
FATAL_EXITS = {2: "usage error", 3: "credentials refused", 4: "permission denied (ACL)"}
"""Exit codes a restart cannot mend (the same command line would fail the same way): the fleet
stops with that code."""


class ChildState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    WAITING = "waiting"
    """Exited; its restart is due after the backoff."""
    DONE = "done"


@dataclass(slots=True)
class Child:
    index: int
    state: ChildState = ChildState.WAITING
    process: Process | None = None
    pid: int | None = None
    spawned_at: float = 0.0
    last_word: float = 0.0
    """When it last spoke (READY, WATCHDOG, STATUS): its beat is alive."""
    quick_exits: int = 0
    restarts: int = 0
    wedged: bool = False
    status: str = field(default="")

    def spawned(self, process: Process, now: float) -> None:
        self.process, self.pid = process, process.pid
        self.state = ChildState.STARTING
        self.spawned_at = self.last_word = now
        self.wedged = False

    def hear(self, lines: list[str], now: float) -> bool:
        """Note a notify message; True when it made the child ready."""
        became_ready = False
        for line in lines:
            if line == "READY=1" and self.state is ChildState.STARTING:
                self.state, became_ready = ChildState.READY, True
            elif line == "STOPPING=1" and self.state is not ChildState.WAITING:
                self.state = ChildState.STOPPING
            elif line.startswith("STATUS="):
                self.status = line.removeprefix("STATUS=")
        self.last_word = now
        return became_ready

    def silent_for(self, now: float, watchdog_s: float) -> float | None:
        """How long a ready child has been silent, when longer than `watchdog_s`; else None."""
        silence = now - self.last_word
        if self.state is ChildState.READY and silence > watchdog_s:
            return silence
        return None

    def exited(self, now: float) -> float:
        """It exited: the backoff before its restart."""
        self.state, self.process = ChildState.WAITING, None
        self.quick_exits = 1 if now - self.spawned_at >= STABLE_S else self.quick_exits + 1
        return min(RESTART_CAP_S, RESTART_FIRST_S * 2.0 ** (self.quick_exits - 1))


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}" + (f" ({FATAL_EXITS[code]})" if code in FATAL_EXITS else "")
