"""A job's attempts, put together from what the keyspace keeps of them: the row's error history
(failed attempts: when, and why), the settled log (any outcome: when, how long, which worker),
and, for the attempt running now, its holder's presence entry (who, since when). Past holders
are known only while the settled log still lists their attempt (its last SETTLED_KEPT jobs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis

from emq_worker.dashboard.fleet import Holder, holders
from emq_worker.dashboard.listing import settled_entries
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.servertime import server_ms
from emq_worker.runtime.presence import presence_entries


@dataclass(slots=True)
class Attempt:
    attempt: int
    outcome: str
    """running, completed, retried, dead, or failed (the error history alone: no outcome)."""
    at_ms: int | None = None
    """When it ended; for the running attempt, when it was claimed."""
    worker: str = ""
    ms: float | None = None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def holder_of(client: Redis, queue: str, job_id: str, attempt: int) -> Holder | None:
    now = await server_ms(client, QueueKeys.of(queue).active)
    return holders(await presence_entries(client, [queue]), now).get((job_id, attempt))


async def settled_of(client: Redis, queue: str, job_id: str) -> list[dict[str, Any]]:
    """The settled log's entries of this job, oldest first."""
    entries = await settled_entries(client, QueueKeys.of(queue))
    return [e for e in reversed(entries) if e.get("id") == job_id]


def _number(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def attempts(
    history: list[dict[str, object]],
    settled: list[dict[str, Any]],
    running: tuple[int, Holder | None] | None,
) -> list[Attempt]:
    """Each attempt known, in order; `running` is the current attempt and its holder."""
    found: dict[int, Attempt] = {}
    for entry in history:
        number = _number(entry.get("attempt")) or 0
        at = _number(entry.get("at_ms"))
        found[number] = Attempt(number, "failed", at, error=str(entry.get("error", "")))
    for entry in settled:
        number = _number(entry.get("attempt")) or 0
        known = found.get(number) or Attempt(number, "")
        known.outcome = str(entry.get("outcome", "?"))
        known.at_ms = _number(entry.get("at_ms")) or known.at_ms
        known.worker = str(entry.get("worker", ""))
        ms = entry.get("ms")
        known.ms = float(ms) if isinstance(ms, int | float) else None
        known.error = known.error or str(entry.get("error", ""))
        found[number] = known
    if running is not None:
        number, holder = running
        found[number] = Attempt(
            number,
            "running",
            holder.claimed_ms if holder else None,
            worker=holder.worker if holder else "",
        )
    return [found[n] for n in sorted(found)]
