"""The values the queue verbs take and return: jobs to enqueue, held leases, outcomes, counts,
hand-off terms, and the protocol's timing constants."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal, NamedTuple

from emq_worker.protocol.names import JobId, Token

ScheduleMode = Literal["now", "in", "at"]
RENEW_CHUNK = 50
"""Leases per renew script call: under about 2 ms of server time even on a slow 2-core VM."""
DEFAULT_COMPLETED_TTL_MS = 24 * 3600 * 1000
"""The completion window: how long a completed job enqueued with a caller-chosen id or a dedup
id stays a duplicate (its tombstone `idem:<id>` lasts this long; see lua/settle.lua)."""
ENQUEUE_MEMO_MS = 60_000
"""How long an enqueue call's memo answers a re-send of that call (longer than any client's
retry window, as for settle receipts)."""


class NewJob(NamedTuple):
    """One job to enqueue: `mode` "now", "in" (ms from now, server clock) or "at" (unix ms)."""

    id: JobId
    payload: bytes
    mode: ScheduleMode = "now"
    ms: int = 0
    dedup_id: str | None = None
    """Enqueue only if no live job is parked under this key (`de:<did>`); None: no dedup."""
    dedup_ttl_ms: int = 0
    """How long the dedup key lasts at most (0: until the completion window ends after the job
    completed, or it is removed)."""
    chosen: bool = False
    """The caller chose `id`: its completion leaves a tombstone, so the id stays a duplicate for
    the worker's completion window (`idem:<id>`). Minted ids leave none."""
    group: str | None = None
    """The fair lane the job waits in (`g:<group>:pending`); None: the queue's pending set."""
    priority: int = 0
    """Its score where it waits: lower is claimed first; 0, the default, writes no field."""


class HeldLease(NamedTuple):
    """What a renew, settle or release needs to prove ownership of one lease."""

    id: JobId
    token: Token
    nonce: str


class Completion(NamedTuple):
    lease: HeldLease
    result: bytes | None = None
    """The handler's return value (JSON) to store for `result_ttl_ms`; None stores nothing."""
    result_ttl_ms: int = 0


class Failure(NamedTuple):
    """Retry after `delay_ms` (0: at once), or dead once `max_attempts` are used (0: now)."""

    lease: HeldLease
    delay_ms: int
    max_attempts: int
    error: str
    trace: str = ""
    """The handler's formatted traceback (bounded), stored as the row's last_traceback."""


Outcome = Completion | Failure


@dataclass(frozen=True, slots=True)
class Counts:
    pending: int
    active: int
    scheduled: int
    dead: int
    completed: int
    failed: int
    """metrics:failed, the wire's name: how many jobs went dead (see dead_lettered)."""

    @property
    def dead_lettered(self) -> int:
        """Jobs moved to dead so far: the operator's name for the `failed` counter."""
        return self.failed


class OfferTerms(NamedTuple):
    """What a claim is told about the worker's hand-off offer on its queue."""

    nonce: str = ""
    """The offer's nonce; '' when the worker makes no offers."""
    offer_ms: int = 0
    """Leave an offer lasting this long if the claim empties pending (0: leave none)."""
    standing: bool = False
    """The worker's last offer may still stand: withdraw it and take over its jobs first."""
    room: int = 1
    """Leave the offer only if this many slots of the claim's count are left unleased."""


NO_OFFER = OfferTerms()


def new_nonce() -> str:
    return secrets.token_hex(8)
