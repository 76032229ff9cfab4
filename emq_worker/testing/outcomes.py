"""What became of a job, read from the server, and assertions on it for tests."""

from __future__ import annotations

import re
from dataclasses import dataclass

from emq_worker.protocol.ids import job_id as checked_job_id
from emq_worker.protocol.names import Field, attempts_run
from emq_worker.protocol.queue import Queue


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """`state` is `completed` (the row is gone; its settle receipt, or its completion tombstone,
    says so), `dead`, `pending`, `active`, `scheduled`, or `absent` (no trace: removed, never
    enqueued, or completed longer ago than the receipt lasts: the worker's settle timeout and
    5 s, 15 s by default)."""

    job_id: str
    state: str
    attempts: int | None
    """Claims so far (the fencing token; for a job we dead-lettered, the attempts it ran, one
    less than the token its move to dead raised); for a completed job, the attempt that
    completed it (None when only the tombstone is left)."""
    last_error: str | None


async def outcome(queue: Queue, job_id: str) -> JobOutcome:
    """Where the job `job_id` of `queue` is, with its attempts and last error."""
    keys, client = queue.keys, queue.client
    async with client.pipeline(transaction=True) as pipe:
        pipe.hmget(keys.job(job_id), Field.STATE, Field.ATTEMPTS, Field.LAST_ERROR, Field.FENCED)
        pipe.hget(*keys.receipt(job_id))
        pipe.get(f"{keys.prefix}idem:{checked_job_id(job_id)}")
        (state, attempts, last_error, fenced), receipt, tombstone = await pipe.execute()
    if state is not None:
        error = last_error.decode("utf-8", "replace") if last_error is not None else None
        return JobOutcome(job_id, state.decode(), attempts_run(attempts, fenced), error)
    if receipt is not None:
        # `<token>:<nonce>:<outcome>`: the settle that deleted the row.
        token, _, rest = receipt.decode().partition(":")
        if rest.rsplit(":", 1)[-1] == "completed":
            return JobOutcome(job_id, "completed", int(token), None)
    if tombstone == b"completed":
        return JobOutcome(job_id, "completed", None, None)
    return JobOutcome(job_id, "absent", None, None)


def expect_completed(found: JobOutcome, *, attempts: int | None = None) -> JobOutcome:
    """Raise AssertionError unless the job completed (on its `attempts`-th attempt, if given)."""
    if found.state != "completed":
        raise AssertionError(f"job {found.job_id} is {_described(found)}, not completed")
    if attempts is not None and found.attempts != attempts:
        raise AssertionError(
            f"job {found.job_id} completed on attempt {found.attempts}, not {attempts}"
        )
    return found


def expect_dead(
    found: JobOutcome, *, error: str | None = None, attempts: int | None = None
) -> JobOutcome:
    """Raise AssertionError unless the job is dead, its last error matching the regular
    expression `error` (re.search) and its attempts `attempts`, when given."""
    if found.state != "dead":
        raise AssertionError(f"job {found.job_id} is {_described(found)}, not dead")
    if error is not None and not re.search(error, found.last_error or ""):
        raise AssertionError(
            f"job {found.job_id} is dead with last error {found.last_error!r}, which does not "
            f"match {error!r}"
        )
    if attempts is not None and found.attempts != attempts:
        raise AssertionError(
            f"job {found.job_id} is dead after {found.attempts} attempts, not {attempts}"
        )
    return found


def _described(found: JobOutcome) -> str:
    said = found.state
    if found.attempts is not None:
        said += f" after {found.attempts} attempts"
    if found.last_error:
        said += f" (last error: {found.last_error!r})"
    return said
