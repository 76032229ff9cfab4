"""Typed values the queue verbs return. Expected outcomes are values, never exceptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from emq_worker.errors import ScriptError
from emq_worker.protocol.names import JobId, Token


class ClaimedJob(NamedTuple):
    queue: str
    id: JobId
    payload: bytes
    token: Token
    nonce: str


@dataclass(frozen=True, slots=True)
class Limited:
    """The queue's concurrency ceiling or rate limit leaves no room for another job now (the
    claim's jobs, maybe none, used the last of it)."""

    reason: str
    """'concurrency' or 'rate'."""
    retry_after_ms: int
    """For 'rate': ms until the window reopens. For 'concurrency': 0 (when a slot frees)."""


@dataclass(frozen=True, slots=True)
class ClaimResult:
    jobs: tuple[ClaimedJob, ...]
    paused: bool
    phantoms: int
    limited: Limited | None = None
    suspects: frozenset[JobId] = frozenset()
    """The jobs leased that are suspects (reaped twice, or reaped before their last attempt):
    the worker holding one asks for no other until it is settled (see lua/claim.lua)."""
    offered: bool = False
    """The claim emptied pending and left this worker's hand-off offer standing: the next job
    enqueued may be leased to it straight away (see lua/claim.lua)."""


CLAIM_STATUSES = frozenset({"ok", "offered", "paused", "limited"})


class SettleStatus(StrEnum):
    OK = "ok"
    SETTLED = "settled"
    """This holder had already settled the job (a re-sent command); nothing changed."""
    GONE = "gone"
    STALE = "stale"
    """Another holder owns the job: the write was fenced out."""
    STATE = "state"
    """The token matches but the job is no longer active (scheduled or dead)."""


class SettleResult(NamedTuple):
    """One job's settle reply (a tuple: one is made per settled job, on the hot path)."""

    status: SettleStatus
    detail: str = ""
    """For OK/SETTLED: the outcome (completed, scheduled, pending, dead); for STALE: the current
    attempts or lock value; for STATE: the state found."""


@dataclass(frozen=True, slots=True)
class LostLease:
    id: JobId
    current: str
    """The row's attempts now ('' when gone), or its state when the token still matches."""


@dataclass(frozen=True, slots=True)
class ReapResult:
    returned: int
    dead: int
    phantoms: int
    more: bool
    jobs: tuple[tuple[JobId, str], ...] = field(default=(), compare=False)
    """Each job reaped, with where it went: 'pending' or 'dead'."""


@dataclass(frozen=True, slots=True)
class PromoteResult:
    promoted: int
    phantoms: int
    next_due_ms: int | None
    more: bool
    outbox: int = 0
    """Entries waiting in the queue's flow outbox (the beat sweeps them: runtime/outbox.py)."""


def text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    raise ScriptError(f"expected a string in a script reply; got {value!r}")


def settle_results(reply: Any, expected: int) -> list[SettleResult]:
    """The one mapping of settle replies to SettleResults (one meaning per reply: EchoMQ's D10)."""
    if not isinstance(reply, list) or len(reply) != 2 * expected:
        raise ScriptError(f"unexpected settle reply for {expected} jobs: {reply!r}")
    results = []
    for i in range(0, len(reply), 2):
        status = _SETTLE_STATUSES.get(reply[i])  # (an Enum lookup by value costs ~1 us a job)
        if status is None:
            try:
                status = SettleStatus(text(reply[i]))
            except ValueError as exc:
                raise ScriptError(f"unexpected settle status: {reply[i]!r}") from exc
        results.append(SettleResult(status, text(reply[i + 1])))
    return results


_SETTLE_STATUSES: dict[Any, SettleStatus] = {
    **{status.value.encode(): status for status in SettleStatus},
    **{status.value: status for status in SettleStatus},
}


def claim_result(queue: str, nonce: str, reply: Any) -> ClaimResult:
    """{status, phantoms, jobs...}, or {'limited', phantoms, retry_after_ms, reason, jobs...};
    status is 'ok', 'offered', 'paused' or 'limited'. A paused or limited reply may still list
    jobs: those a standing offer took over. A last element that is an array lists the jobs
    leased that are suspects."""
    if not isinstance(reply, list) or len(reply) < 2 or text(reply[0]) not in CLAIM_STATUSES:
        raise ScriptError(f"unexpected claim reply: {reply!r}")
    suspects: frozenset[JobId] = frozenset()
    if isinstance(reply[-1], list):
        suspects = frozenset(JobId(text(item)) for item in reply[-1])
        reply = reply[:-1]
    status = text(reply[0])
    first = 4 if status == "limited" else 2
    if len(reply) < first or (len(reply) - first) % 3:
        raise ScriptError(f"unexpected claim reply: {reply!r}")
    limited = None
    if status == "limited":
        limited = Limited(reason=text(reply[3]), retry_after_ms=max(0, int(reply[2])))
    jobs = []
    for i in range(first, len(reply), 3):
        payload = reply[i + 1]
        jobs.append(
            ClaimedJob(
                queue=queue,
                id=JobId(text(reply[i])),
                payload=payload if isinstance(payload, bytes) else text(payload).encode(),
                token=Token(int(reply[i + 2])),
                nonce=nonce,
            )
        )
    return ClaimResult(
        tuple(jobs),
        paused=status == "paused",
        phantoms=int(reply[1]),
        limited=limited,
        suspects=suspects,
        offered=status == "offered",
    )


def handed_off_job(queue: str, offer_nonce: str, item: bytes) -> ClaimedJob:
    """A job enqueue.lua leased to this worker's offer: "<attempts>:<id>:<payload>"."""
    attempts, _, rest = item.partition(b":")
    job_id, colon, payload = rest.partition(b":")
    if not colon or not attempts.isdigit():
        raise ScriptError(f"unexpected hand-off on {queue!r}: {item[:80]!r}")
    return ClaimedJob(queue, JobId(job_id.decode()), payload, Token(int(attempts)), offer_nonce)


def lost_leases(reply: Any) -> list[LostLease]:
    if not isinstance(reply, list) or len(reply) % 2:
        raise ScriptError(f"unexpected renew reply: {reply!r}")
    return [LostLease(JobId(text(reply[i])), text(reply[i + 1])) for i in range(0, len(reply), 2)]


def reap_result(reply: Any) -> ReapResult:
    if not isinstance(reply, list) or len(reply) < 4 or len(reply) % 2:
        raise ScriptError(f"unexpected reap reply: {reply!r}")
    returned, dead, phantoms, more = (int(v) for v in reply[:4])
    jobs = tuple((JobId(text(reply[i])), text(reply[i + 1])) for i in range(4, len(reply), 2))
    return ReapResult(returned, dead, phantoms, bool(more), jobs)


def promote_result(reply: Any) -> PromoteResult:
    promoted, phantoms, next_due, more, outbox = (int(v) for v in reply)
    return PromoteResult(promoted, phantoms, None if next_due < 0 else next_due, bool(more), outbox)
