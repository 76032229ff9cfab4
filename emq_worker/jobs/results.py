"""Job results (opt-in): a handler's return value, stored by the completing settle, and the
producer's wait for it.

A task (or one enqueue) with a result TTL makes the settle that completes the job, fenced and in
the same script call, write `emq:{q}:result:<id>` = `{"value": <return value>}` with that TTL,
and push one token to `emq:{q}:result:<id>:ready` (same TTL). The row itself is still deleted
on completion, as the wire says.

A waiter reads the row, then the result, in one round trip; while the job is still on its way
it blocks on the ready list with `BLMOVE ready ready` (a rotation: the token stays, so every
waiter sees it, and one that starts after the settle returns at once). A settle that moves the
job to dead pushes a 'dead' token the same way, so a waiter learns of the failure at once too.
It still looks at the row at least once a second, for a job reaped dead (no token); a 'dead'
token left from before a `dead retry` makes it fall back to that once-a-second look.
"""

from __future__ import annotations

import time
from typing import Any, Final

import anyio

from emq_worker.errors import JobFailedError, ResultTimeoutError, ResultUnavailableError
from emq_worker.jobs import codec
from emq_worker.protocol.names import Field, JobState
from emq_worker.protocol.queue import Queue
from emq_worker.valkey.connection import socket_timeout_of

RECHECK_S: Final = 1.0
"""A waiter looks at the row at least this often (a dead job pushes no token)."""
MIN_BLOCK_S: Final = 0.01
DEAD_TOKEN: Final = b"dead"
"""What settle pushes to the ready list when the job goes dead (a completion pushes b"1")."""


def result_key(queue: Queue, job_id: str) -> str:
    return f"{queue.keys.prefix}result:{job_id}"


def encode_result(value: Any) -> tuple[bytes, str | None]:
    """The stored form of a handler's return value, and an error when JSON cannot hold it (then
    what is stored says so, and `Producer.result` raises ResultUnavailableError with it)."""
    try:
        return codec.encode_value({"value": value}), None
    except (TypeError, ValueError) as exc:
        error = f"the handler's return value is not JSON-serialisable: {exc}"
        return codec.encode_value({"error": error}), error


def decode_result(job_id: str, stored: bytes) -> Any:
    try:
        envelope = codec.decode_value(stored)
    except ValueError as exc:
        raise ResultUnavailableError(f"job {job_id}: the stored result is not JSON: {exc}") from exc
    if isinstance(envelope, dict) and "value" in envelope:
        return envelope["value"]
    if isinstance(envelope, dict) and "error" in envelope:
        raise ResultUnavailableError(
            f"job {job_id} completed but stored no result: {envelope['error']}"
        )
    raise ResultUnavailableError(f"job {job_id}: unexpected stored result {stored[:60]!r}")


async def wait_result(queue: Queue, job_id: str, within_s: float) -> Any:
    """The job's result, waiting up to `within_s` seconds for it.

    Raises ResultTimeoutError when the job is still pending, active or scheduled at the deadline;
    JobFailedError (with the row's `last_error`) when the job is dead; ResultUnavailableError
    when there is no row and no result (completed without storing one, result expired, removed,
    never enqueued on this queue), or when the handler's value could not be stored.
    """
    client, key = queue.client, result_key(queue, job_id)
    ready = key + ":ready"
    socket_timeout = socket_timeout_of(client)
    # A block the socket timeout would cut short is no block: keep each well inside it.
    block_s = RECHECK_S if socket_timeout is None else min(RECHECK_S, socket_timeout / 2)
    deadline = time.monotonic() + within_s
    stale = False
    while True:
        # The row before the result, in one round trip: the result is written in the script
        # that deletes the row, so a row seen gone means any result is already there.
        async with client.pipeline(transaction=False) as pipe:
            pipe.hmget(queue.keys.job(job_id), Field.STATE, Field.LAST_ERROR)
            pipe.get(key)
            (state, last_error), stored = await pipe.execute()
        if stored is not None:
            return decode_result(job_id, stored)
        if state is None:
            raise ResultUnavailableError(
                f"job {job_id} in queue {queue.name!r} has no result and no row: it completed "
                "without storing one (no result_ttl_ms), its result expired, it was removed, or "
                "it never existed"
            )
        if state == JobState.DEAD.encode():
            raise JobFailedError(job_id, (last_error or b"").decode("utf-8", "replace"))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ResultTimeoutError(
                f"job {job_id} in queue {queue.name!r} has no result after {within_s} s "
                f"(it is {state.decode('utf-8', 'replace')})"
            )
        seconds = round(max(MIN_BLOCK_S, min(remaining, block_s)), 3)
        if stale:  # a 'dead' token from before a dead retry: it would end every block at once
            await anyio.sleep(seconds)
            continue
        # BLMOVE of a list onto itself rotates it: the token stays for every other waiter.
        # (redis-py types the timeout as int; the server takes decimal seconds.)
        token = await client.blmove(ready, ready, seconds, "RIGHT", "LEFT")  # type: ignore[arg-type]
        stale = token == DEAD_TOKEN
