"""In-process counters of what the worker did; logged at exit and read by tests."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class Counters:
    claimed: int = 0
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    fenced: int = 0
    """Writes (renew, complete, fail) refused because another holder owns the job."""
    leases_lost: int = 0
    self_fenced: int = 0
    """Leases this worker gave up itself after renewals failed for a whole lease."""
    reaped: int = 0
    reaped_dead: int = 0
    promoted: int = 0
    phantoms: int = 0
    released: int = 0
    renew_sweeps: int = 0
    renew_failures: int = 0

    def snapshot(self) -> dict[str, int]:
        return asdict(self)
