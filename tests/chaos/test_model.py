"""A model-based test of the real scripts on the real test redis: hypothesis drives enqueue,
claim, renew, complete, fail, reap, promote, hand-off offers (made, taken by a park, taken over by
the next claim, withdrawn), the passing of time and the death of a worker, and after every step
the server must agree with a small model of the protocol. A failure shrinks to a minimal sequence
of steps.

Time passes without sleeping: leases and retry delays are long (60 s), and "time passes" for a
lease or a scheduled job by moving its score to 0 (the epoch), which is what the reaper and
promote compare with the server's TIME.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio.from_thread
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis.asyncio import Redis

from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId, Token
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import SettleResult
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import Completion, Failure, HeldLease, NewJob, OfferTerms
from emq_worker.runtime.offers import OFFERS_PER_QUEUE
from emq_worker.valkey.connection import connect

LONG_MS = 60_000
"""Leases and retry delays: nothing lapses or falls due unless a rule says time passed."""
REAP_CAP = 3
RECEIPT_MS = 60_000
PAYLOAD = b'{"task":"work","kwargs":{}}'
_queues = itertools.count()
_nonces = itertools.count()


@dataclass(slots=True)
class Job:
    state: str = "pending"
    """pending, active, scheduled, dead, or completed (the row is gone)."""
    attempts: int = 0
    holder: tuple[int, str] | None = None
    """(token, nonce) of the claim whose lock is set: only while active."""
    receipt: tuple[int, str, str] | None = None
    expired: bool = False
    due: bool = False
    reaps: int = 0
    base: int = 0
    """Attempts that do not count against the retry budget (`attempts_base`): a job handed to an
    offer and withdrawn before it started, and the fence of a move to dead."""
    suspect: bool = False
    """Reaped back to pending a second time, or before its last attempt: at most one per claim
    until it is settled or dead."""

    def fence_out(self) -> None:
        """A move to dead gives the job a token nobody holds, spending no attempt."""
        self.attempts += 1
        self.base += 1


class Protocol(RuleBasedStateMachine):
    """Overridden per test run with a portal and a client (see `machine`)."""

    portal: anyio.from_thread.BlockingPortal
    client: Redis

    def __init__(self) -> None:
        super().__init__()
        self.queue = Queue(self.client, Scripts(), f"model.{next(_queues)}")
        self.minter = SnowflakeMinter(1002)
        self.jobs: dict[str, Job] = {}
        self.leases: list[HeldLease] = []
        self.workers: list[str] = []
        self.completions = 0
        self.handoffs: dict[str, list[str]] = {}
        """Every offer made (by nonce) and the jobs on its hand-off list."""
        self.standing: set[str] = set()
        """The offers in the offers set: made, and neither used up nor withdrawn."""

    def run(self, coroutine: Any, *args: Any) -> Any:
        return self.portal.call(coroutine, *args)

    # --- rules -------------------------------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def enqueue(self, n: int) -> None:
        ids = [str(self.minter.job_id()) for _ in range(n)]
        nothing_waits = not any(job.state == "pending" for job in self.jobs.values())
        flags = self.run(self.queue.enqueue, [NewJob(JobId(i), PAYLOAD) for i in ids])
        assert flags == [True] * n
        for job in ids:
            self.jobs[job] = Job()
        # The oldest jobs go to standing offers, one each, while nothing waited in pending.
        handed = {}
        for offer in sorted(self.standing):
            items = self.run(self.client.lrange, self.queue.keys.handoff(offer), 0, -1)
            assert len(items) <= 1, (offer, items)
            if items:
                handed[items[0].split(b":")[1].decode()] = offer
        expected = ids[: min(n, len(self.standing))] if nothing_waits else []
        assert sorted(handed) == expected, (handed, expected)
        for job_id, offer in handed.items():
            leased = self.jobs[job_id]
            leased.state, leased.attempts, leased.holder = "active", 1, (1, offer)
            self.handoffs[offer].append(job_id)
            self.standing.discard(offer)
            self.workers.append(offer)
            self.leases.append(HeldLease(JobId(job_id), Token(1), offer))

    @rule(
        count=st.integers(1, 5),
        offer=st.booleans(),
        withdraw=st.none() | st.integers(0, 10_000),
    )
    def claim(self, count: int, offer: bool, withdraw: int | None) -> None:
        """A claim, maybe making an offer, maybe by a worker that made one before (it withdraws
        that offer and takes over what was handed to it, then offers again under its nonce)."""
        nonce = f"{next(_nonces):016x}"
        terms, taken = OfferTerms(), []
        if withdraw is not None and self.handoffs:
            offer_nonce = sorted(self.handoffs)[withdraw % len(self.handoffs)]
            taken = [j for j in self.handoffs[offer_nonce] if self._held(j, offer_nonce)]
            self.handoffs[offer_nonce] = []
            self.standing.discard(offer_nonce)
            terms = OfferTerms(offer_nonce, LONG_MS if offer else 0, True)
        elif offer:
            offer_nonce = f"{next(_nonces):016x}"
            self.handoffs[offer_nonce] = []
            terms = OfferTerms(offer_nonce, LONG_MS)
        result = self.run(self.queue.claim, count, LONG_MS, nonce, terms)
        left = count - len(taken)
        pending = sorted(j for j, job in self.jobs.items() if job.state == "pending")
        kept, passed_over = self._lease_order(pending, left)
        assert [job.id for job in result.jobs] == [*taken, *kept]
        assert result.suspects == {j for j in kept if self.jobs[j].suspect}
        offered = bool(terms.offer_ms) and not passed_over and len(kept) < left
        offered = offered and len(self.standing) < OFFERS_PER_QUEUE
        assert result.offered == offered, (terms, left, pending)
        if offered:
            self.standing.add(terms.nonce)
        self.workers.append(nonce)
        for claimed in result.jobs:
            job = self.jobs[claimed.id]
            if claimed.id not in taken:
                job.attempts += 1
            assert claimed.token == job.attempts
            job.state, job.holder, job.expired = "active", (job.attempts, nonce), False
            self.leases.append(HeldLease(claimed.id, claimed.token, nonce))

    def _lease_order(self, pending: list[str], left: int) -> tuple[list[str], bool]:
        """The pending jobs a claim of `left` leases, in mint order: every ordinary job and one
        suspect; the later suspects are passed over (none has waited half of LONG_MS here)."""
        kept: list[str] = []
        room, passed_over = 1, False
        for job_id in pending:
            if len(kept) >= left:
                break
            if not self.jobs[job_id].suspect:
                kept.append(job_id)
            elif room > 0:
                room -= 1
                kept.append(job_id)
            else:
                passed_over = True
        return kept, passed_over

    def _held(self, job_id: str, nonce: str) -> bool:
        job = self.jobs[job_id]
        return job.state == "active" and job.holder == (job.attempts, nonce)

    @precondition(lambda self: any(self.handoffs.values()))
    @rule(pick=st.integers(0, 10_000))
    def park_takes_a_handoff(self, pick: int) -> None:
        """The offering worker's BLPOP takes the job (it then holds it under the offer's nonce)."""
        offers = sorted(offer for offer, items in self.handoffs.items() if items)
        offer = offers[pick % len(offers)]
        popped = self.run(self.client.lpop, self.queue.keys.handoff(offer))
        assert popped.split(b":")[1].decode() == self.handoffs[offer].pop(0)

    @precondition(lambda self: self.handoffs)
    @rule(pick=st.integers(0, 10_000))
    def withdraw(self, pick: int) -> None:
        offer = sorted(self.handoffs)[pick % len(self.handoffs)]
        released = self.run(self.queue.withdraw, offer, LONG_MS)
        back = [j for j in self.handoffs.pop(offer) if self._held(j, offer)]
        self.standing.discard(offer)
        assert released == len(back)
        for job_id in back:
            job = self.jobs[job_id]
            job.state, job.holder, job.expired = "pending", None, False
            job.base += 1

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 10_000))
    def renew(self, pick: int) -> None:
        lease = self.leases[pick % len(self.leases)]
        lost = self.run(self.queue.renew, [lease], LONG_MS)
        job = self.jobs[lease.id]
        holds = job.state == "active" and job.holder == (lease.token, lease.nonce)
        assert (not lost) == holds, (lease, job, lost)
        if holds:
            job.expired = False

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 10_000))
    def complete(self, pick: int) -> None:
        lease = self.leases[pick % len(self.leases)]
        [result] = self.run(self.queue.settle, [Completion(lease)], RECEIPT_MS)
        self._check_settle(lease, result, "completed")

    @precondition(lambda self: self.leases)
    @rule(
        pick=st.integers(0, 10_000),
        delay=st.sampled_from([0, LONG_MS]),
        max_attempts=st.integers(0, 4),
    )
    def fail(self, pick: int, delay: int, max_attempts: int) -> None:
        lease = self.leases[pick % len(self.leases)]
        failure = Failure(lease, delay, max_attempts, "boom")
        [result] = self.run(self.queue.settle, [failure], RECEIPT_MS)
        if lease.token - self.jobs[lease.id].base >= max_attempts:
            outcome = "dead"
        else:
            outcome = "pending" if delay <= 0 else "scheduled"
        self._check_settle(lease, result, outcome)

    @precondition(lambda self: any(job.state == "active" for job in self.jobs.values()))
    @rule(pick=st.integers(0, 10_000))
    def lease_lapses(self, pick: int) -> None:
        active = sorted(j for j, job in self.jobs.items() if job.state == "active")
        job_id = active[pick % len(active)]
        self.run(self.client.zadd, self.queue.keys.active, {job_id: 0}, False, True)
        self.jobs[job_id].expired = True

    @precondition(lambda self: self.workers)
    @rule(pick=st.integers(0, 10_000))
    def worker_dies(self, pick: int) -> None:
        """Every lease one claim call handed out stops being renewed: its deadlines pass."""
        nonce = self.workers[pick % len(self.workers)]
        for job_id, job in self.jobs.items():
            if job.state == "active" and job.holder is not None and job.holder[1] == nonce:
                self.run(self.client.zadd, self.queue.keys.active, {job_id: 0}, False, True)
                job.expired = True

    @rule()
    def reap(self) -> None:
        result = self.run(self.queue.reap, 100, REAP_CAP)
        expected = {}
        for job_id, job in self.jobs.items():
            if job.state == "active" and job.expired:
                spent = job.attempts - job.base
                job.state = "dead" if spent >= REAP_CAP else "pending"
                job.holder, job.expired = None, False
                if job.state == "pending":
                    job.reaps += 1
                    job.suspect = job.reaps >= 2 or spent + 1 >= REAP_CAP
                else:
                    job.suspect = False
                    job.fence_out()
                expected[job_id] = job.state
        assert dict(result.jobs) == expected

    @precondition(lambda self: any(job.state == "scheduled" for job in self.jobs.values()))
    @rule(pick=st.integers(0, 10_000))
    def retry_falls_due(self, pick: int) -> None:
        scheduled = sorted(j for j, job in self.jobs.items() if job.state == "scheduled")
        job_id = scheduled[pick % len(scheduled)]
        self.run(self.client.zadd, self.queue.keys.schedule, {job_id: 0}, False, True)
        self.jobs[job_id].due = True

    @rule()
    def promote(self) -> None:
        result = self.run(self.queue.promote, 100)
        due = [job for job in self.jobs.values() if job.state == "scheduled" and job.due]
        assert result.promoted == len(due)
        for job in due:
            job.state, job.due = "pending", False

    # --- the model of one settle ----------------------------------------------------------

    def _check_settle(self, lease: HeldLease, result: SettleResult, outcome: str) -> None:
        job = self.jobs[lease.id]
        expected: tuple[str, str | None]
        if job.receipt is not None and job.receipt[:2] == (lease.token, lease.nonce):
            expected = ("settled", job.receipt[2])
        elif job.state == "completed":
            expected = ("gone", "")
        elif job.attempts != lease.token:
            expected = ("stale", str(job.attempts))
        elif job.holder is not None and job.holder != (lease.token, lease.nonce):
            expected = ("stale", None)
        elif job.state not in ("active", "pending"):
            expected = ("state", job.state)
        else:
            expected = ("ok", outcome)
            job.state, job.holder, job.expired, job.suspect = outcome, None, False, False
            job.receipt = (lease.token, lease.nonce, outcome)
            if outcome == "dead":
                job.fence_out()
            self.completions += outcome == "completed"
        status, detail = expected
        assert str(result.status) == status, (lease, job, result)
        assert detail is None or result.detail == detail, (lease, job, result)

    # --- what the server must agree with after every step ----------------------------------

    @invariant()
    def server_agrees(self) -> None:
        snapshot = self.run(_snapshot, self.client, self.queue, list(self.jobs))
        sets, rows, locks, completed = snapshot
        for state in ("pending", "active", "scheduled", "dead", "suspects"):
            if state == "suspects":
                expected = {j for j, job in self.jobs.items() if job.suspect}
            else:
                expected = {j for j, job in self.jobs.items() if job.state == state}
            assert sets[state] == expected, (state, sets[state] ^ expected)
        for job_id, job in self.jobs.items():
            row, lock = rows[job_id], locks[job_id]
            if job.state == "completed":
                assert row is None, job_id
                continue
            assert row == (job.state, job.attempts), (job_id, row, job)
            holder = None if job.holder is None else f"{job.holder[0]}:{job.holder[1]}"
            assert lock == holder, (job_id, lock, job)
        assert completed == self.completions

    @invariant()
    def offers_agree(self) -> None:
        members = self.run(self.client.zrange, self.queue.keys.offers, 0, -1)
        assert {m.decode() for m in members} == {f"{n}:{LONG_MS}" for n in self.standing}
        for offer, jobs in self.handoffs.items():
            items = self.run(self.client.lrange, self.queue.keys.handoff(offer), 0, -1)
            assert [item.split(b":")[1].decode() for item in items] == jobs, offer


async def _snapshot(
    client: Redis, queue: Queue, ids: list[str]
) -> tuple[dict[str, set[str]], dict[str, Any], dict[str, str | None], int]:
    keys = queue.keys
    named = {"pending": keys.pending, "active": keys.active}
    named |= {"scheduled": keys.schedule, "dead": keys.dead}
    async with client.pipeline(transaction=False) as pipe:
        for key in named.values():
            pipe.zrange(key, 0, -1)
        pipe.smembers(keys.suspects)
        for job in ids:
            pipe.hmget(keys.job(job), "state", "attempts")
            pipe.get(keys.lock(job))
        pipe.hget(keys.completed, "count")
        replies = await pipe.execute()
    sets = {
        name: {m.decode() for m in members}
        for name, members in zip([*named, "suspects"], replies[:5], strict=True)
    }
    rows: dict[str, Any] = {}
    locks: dict[str, str | None] = {}
    for i, job in enumerate(ids):
        state, attempts = replies[5 + 2 * i]
        rows[job] = None if state is None else (state.decode(), int(attempts))
        lock = replies[6 + 2 * i]
        locks[job] = None if lock is None else lock.decode()
    return sets, rows, locks, int(replies[-1] or 0)


async def _client(url: str) -> Redis:
    return connect(url, DEFAULT_WIRE_VERSION)


@pytest.fixture
def machine(redis_url: str) -> Iterator[type[Protocol]]:
    with anyio.from_thread.start_blocking_portal() as portal:
        client = portal.call(_client, redis_url)
        try:
            yield type("BoundProtocol", (Protocol,), {"portal": portal, "client": client})
        finally:
            portal.call(client.aclose)


@pytest.mark.soak
def test_the_scripts_agree_with_the_model_of_the_protocol(machine: type[Protocol]) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=100,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
