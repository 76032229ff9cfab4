"""Finding a job without being told its queue, and what is left of a completed one.

A job id names no queue, so `inspect`, `logs` and `result` without `--queue` look for the row (or
a stored result) under every queue a bounded scan finds: one holder is the answer; none or
several is an error that says so. A completed job has no row (the wire deletes it); when it
stored a result, `result:<id>` is what is left, and `inspect` says so instead of "no job".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from emq_worker.admin.verbs import AdminError, discover_queues
from emq_worker.errors import ResultUnavailableError
from emq_worker.jobs.results import decode_result, result_key
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.queue import Queue


async def locate_job(client: Redis, job_id: str) -> str:
    """The one queue whose keyspace holds `job_id`'s row or stored result."""
    found = await discover_queues(client)
    async with client.pipeline(transaction=False) as pipe:
        for name in found.queues:
            keys = QueueKeys.of(name)
            pipe.exists(keys.job(job_id), f"{keys.prefix}result:{job_id}")
        present = await pipe.execute()
    holders = [name for name, n in zip(found.queues, present, strict=True) if n]
    if len(holders) == 1:
        return holders[0]
    if holders:
        raise AdminError(
            f"job {job_id} is in several queues ({', '.join(map(repr, holders))}); "
            "name one with --queue"
        )
    cut = "" if found.complete else "; the queue scan was cut short: name it with --queue"
    raise AdminError(f"no job {job_id} in any of {len(found.queues)} queue(s){cut}")


@dataclass(frozen=True, slots=True)
class CompletedJob:
    """A completed job's stored result (its row is gone)."""

    queue: str
    job_id: str
    value: Any
    """The decoded return value, or None with `error` set."""
    error: str | None
    expires_in_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "job_id": self.job_id,
            "where": "completed",
            "result": self.value,
            "result_error": self.error,
            "result_expires_in_ms": self.expires_in_ms,
        }


async def completed_job(queue: Queue, job_id: str) -> CompletedJob | None:
    """The stored result of `job_id` when its row is gone, else None."""
    key = result_key(queue, job_id)
    async with queue.client.pipeline(transaction=False) as pipe:
        pipe.get(key)
        pipe.pttl(key)
        stored, ttl = await pipe.execute()
    if stored is None:
        return None
    expires = int(ttl) if int(ttl) >= 0 else None
    try:
        value, error = decode_result(job_id, stored), None
    except ResultUnavailableError as exc:  # a result that cannot be shown is described
        value, error = None, str(exc)
    return CompletedJob(queue.name, job_id, value, error, expires)
