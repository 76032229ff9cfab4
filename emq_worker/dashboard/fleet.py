"""The workers, from their presence entries (runtime/presence.py): who they are, what they serve
and hold, and when they last beat; and, for the lease timeline, who holds which lease since
when on the server clock.

An entry says how long ago (by the worker's monotonic clock) each held job was claimed, as of
the moment it was written; its PTTL says how long ago that was on the server. So a claim's
server time is `now - (entry's ttl_ms - PTTL) - age`, whatever the worker's wall clock says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from emq_worker.protocol.keys import QUEUES_KEY
from emq_worker.protocol.servertime import server_ms
from emq_worker.runtime.presence import Entry, presence_entries


@dataclass(frozen=True, slots=True)
class Holder:
    worker: str
    claimed_ms: int
    """When the claim was sent, on the server clock (within a round trip)."""


@dataclass(frozen=True, slots=True)
class HeldJob:
    queue: str
    job_id: str
    attempt: int
    claimed_ms: int


@dataclass(slots=True)
class WorkerView:
    id: str
    fields: dict[str, Any]
    beat_age_ms: int
    queues: list[str] = field(default_factory=list)
    held_by_queue: dict[str, int] = field(default_factory=dict)
    jobs: list[HeldJob] = field(default_factory=list)

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.fields,
            "beat_age_ms": self.beat_age_ms,
            "held_by_queue": self.held_by_queue,
            "jobs": [
                {"queue": j.queue, "id": j.job_id, "attempt": j.attempt, "claimed_ms": j.claimed_ms}
                for j in self.jobs
            ],
        }


def _held(entry: Entry, now_ms: int) -> list[HeldJob]:
    held = []
    for item in entry.fields.get("jobs") or []:
        try:
            job_id, attempt, age = str(item[0]), int(item[1]), int(item[2])
        except (TypeError, ValueError, IndexError):
            continue  # not one of ours
        held.append(HeldJob(entry.queue, job_id, attempt, now_ms - entry.age_ms - age))
    return held


def holders(entries: Sequence[Entry], now_ms: int) -> dict[tuple[str, int], Holder]:
    """(job id, attempt) -> who holds it since when, for the jobs the entries list."""
    found = {}
    for entry in entries:
        worker = str(entry.fields.get("id", "?"))
        for job in _held(entry, now_ms):
            found[(job.job_id, job.attempt)] = Holder(worker, job.claimed_ms)
    return found


@dataclass(frozen=True, slots=True)
class Fleet:
    now_ms: int
    workers: list[WorkerView]

    def as_dict(self) -> dict[str, Any]:
        return {"now_ms": self.now_ms, "workers": [w.as_dict() for w in self.workers]}


def merge(entries: Sequence[Entry], now_ms: int) -> list[WorkerView]:
    """One view per worker, whatever the number of queues it announced itself on."""
    views: dict[str, WorkerView] = {}
    for entry in entries:
        worker_id = str(entry.fields.get("id", "?"))
        view = views.get(worker_id)
        if view is None:
            view = views[worker_id] = WorkerView(worker_id, entry.fields, entry.age_ms)
        view.beat_age_ms = min(view.beat_age_ms, entry.age_ms)
        view.queues.append(entry.queue)
        view.held_by_queue[entry.queue] = int(entry.fields.get("held_here", 0) or 0)
        view.jobs += _held(entry, now_ms)
    for view in views.values():
        view.jobs.sort(key=lambda job: job.claimed_ms)
    return sorted(views.values(), key=lambda v: (str(v.get("host", "")), v.id))


async def fleet(client: Redis, queues: Sequence[str]) -> Fleet:
    now = await server_ms(client, QUEUES_KEY)
    entries = await presence_entries(client, queues) if queues else []
    return Fleet(now, merge(entries, now))
