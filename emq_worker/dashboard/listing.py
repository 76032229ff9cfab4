"""A page of a queue's jobs in one state: bounded reads only (ZRANGE by index or LRANGE of one
page, then the page's rows), never a whole set.

pending and dead are in mint order (every score is 0, so index order is byte order), scheduled
by run-at, active by deadline; `completed` pages through the settled log (lua/history.lua),
newest first. A row's task and arguments come from its payload only when the payload is small
(PEEK_BYTES): a 16 MiB payload is never read to list it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from emq_worker.dashboard.queues import Page
from emq_worker.errors import ConfigError, PayloadError
from emq_worker.jobs import codec
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import Field, attempts_run
from emq_worker.protocol.replies import text
from emq_worker.protocol.servertime import queue_time, to_ms

STATES = ("pending", "scheduled", "active", "dead", "completed")
PER_PAGE = 50
PEEK_BYTES = 4096
ARGS_SHOWN = 120
SETTLED_READ = 1000
PRIORITY = "priority"
"""The row field a job enqueued with a priority carries (lua/enqueue.lua)."""


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    state: str
    attempts: int = 0
    task: str = ""
    args: str = ""
    size: int = 0
    score_ms: int | None = None
    """run-at (scheduled) or deadline (active), server ms."""
    error: str = ""
    settled: dict[str, Any] = field(default_factory=dict)
    """The settled log's entry (completed): outcome, at_ms, ms, worker, attempt."""
    priority: int | None = None
    """The row's `priority` (lower is claimed first); None for a job enqueued without one."""
    group: str | None = None
    """The fair lane it waits in (a pending job enqueued with a group); None for the others."""
    outstanding: int | None = None
    """A flow parent's children not done yet (the waiting tab)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "attempts": self.attempts,
            "task": self.task,
            "args": self.args,
            "payload_bytes": self.size,
            "score_ms": self.score_ms,
            "error": self.error,
            "priority": self.priority,
            "group": self.group,
            **({"settled": self.settled} if self.settled else {}),
            **({"outstanding": self.outstanding} if self.outstanding is not None else {}),
        }


@dataclass(frozen=True, slots=True)
class Listing:
    queue: str
    state: str
    page: Page
    rows: list[JobRow]
    now_ms: int
    newest_first: bool
    complete: bool = True
    """False when the listing read a bounded part of what it filters (retries, waiting)."""

    @property
    def grouped(self) -> bool:
        """Whether a job of this page waits in a lane (the page then shows the column)."""
        return any(row.group is not None for row in self.rows)

    @property
    def prioritised(self) -> bool:
        """Whether a job of this page has a priority (the page then shows the column)."""
        return any(row.priority is not None for row in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "state": self.state,
            "now_ms": self.now_ms,
            "newest_first": self.newest_first,
            "complete": self.complete,
            **self.page.as_dict(),
            "jobs": [row.as_dict() for row in self.rows],
        }


def state_key(keys: QueueKeys, state: str) -> str:
    if state not in STATES:
        raise ConfigError(f"state must be one of {', '.join(STATES)}; got {state!r}")
    return {"scheduled": keys.schedule, "completed": keys.settled_log}.get(
        state, f"{keys.prefix}{state}"
    )


async def list_jobs(
    client: Redis, queue: str, state: str, number: int, *, newest_first: bool = False
) -> Listing:
    keys = QueueKeys.of(queue)
    key = state_key(keys, state)
    if state == "completed":
        return await _settled(client, keys, number)
    async with client.pipeline(transaction=False) as pipe:
        queue_time(pipe, keys.pending)
        pipe.zcard(key)
        now, size = await pipe.execute()
    page = Page(number, PER_PAGE, int(size))
    members = await client.zrange(key, page.start, page.stop, desc=newest_first, withscores=True)
    scored = [(text(pair[0]), int(pair[1])) for pair in members]
    rows = await peek(client, keys, state, scored)
    return Listing(queue, state, page, rows, to_ms(now), newest_first)


async def peek(
    client: Redis, keys: QueueKeys, state: str, scored: list[tuple[str, int]]
) -> list[JobRow]:
    """The rows of a page: a pipeline of their fields and payload sizes, then one of the small
    payloads (for the task and arguments)."""
    async with client.pipeline(transaction=False) as pipe:
        for job_id, _ in scored:
            pipe.hmget(
                keys.job(job_id),
                Field.STATE,
                Field.ATTEMPTS,
                Field.LAST_ERROR,
                PRIORITY,
                Field.FENCED,
            )
            pipe.hstrlen(keys.job(job_id), Field.PAYLOAD)
        replies = await pipe.execute()
    small = [
        job_id for (job_id, _), n in zip(scored, replies[1::2], strict=True) if n <= PEEK_BYTES
    ]
    async with client.pipeline(transaction=False) as pipe:
        for job_id in small:
            pipe.hget(keys.job(job_id), Field.PAYLOAD)
        payloads = dict(zip(small, await pipe.execute(), strict=True))
    rows = []
    for (job_id, score), (row_state, attempts, error, priority, fenced), size in zip(
        scored, replies[::2], replies[1::2], strict=True
    ):
        task, args = preview(payloads.get(job_id))
        rows.append(
            JobRow(
                id=job_id,
                state=text(row_state) if row_state is not None else "(no row)",
                attempts=attempts_run(attempts, fenced),
                task=task,
                args=args,
                size=int(size),
                score_ms=score if state in ("scheduled", "active") else None,
                error="" if error is None else _utf8(error),
                priority=_integer(priority),
            )
        )
    return rows


def _integer(value: bytes | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:  # a priority some other writer spelled oddly: shown as none
        return None


def preview(payload: bytes | str | None) -> tuple[str, str]:
    """(task, a short JSON text of its arguments) of one of our envelopes, else ('', a bit of
    the raw payload)."""
    if payload is None:
        return "", ""
    raw = payload.encode() if isinstance(payload, str) else payload
    try:
        message = codec.decode_message(raw)
    except PayloadError:
        return "", _utf8(raw[:ARGS_SHOWN])
    args = json.dumps(message[1], ensure_ascii=False, separators=(", ", ": "))
    return message[0], args if len(args) <= ARGS_SHOWN else args[: ARGS_SHOWN - 1] + "…"


def _utf8(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


async def settled_entries(client: Redis, keys: QueueKeys) -> list[dict[str, Any]]:
    """The settled log, newest first (at most SETTLED_READ entries; one LRANGE)."""
    entries = []
    for raw in await client.lrange(keys.settled_log, 0, SETTLED_READ - 1):
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            entries.append(entry)
    return entries


async def _settled(client: Redis, keys: QueueKeys, number: int) -> Listing:
    async with client.pipeline(transaction=False) as pipe:
        queue_time(pipe, keys.pending)
        pipe.type(keys.settled_log)
        now, kind = await pipe.execute()
    entries = await settled_entries(client, keys) if text(kind) == "list" else []
    completed = [e for e in entries if e.get("outcome") == "completed"]
    page = Page(number, PER_PAGE, len(completed))
    rows = [
        JobRow(
            id=str(e["id"]),
            state="completed",
            attempts=int(e.get("attempt") or 0),
            task=str(e.get("task", "")),
            settled=e,
        )
        for e in completed[page.start : page.stop + 1]
    ]
    return Listing(keys.queue, "completed", page, rows, to_ms(now), True)
