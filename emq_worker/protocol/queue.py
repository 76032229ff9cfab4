"""Typed verbs over one queue's scripts: what the supervisor, runner, producer and admin call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ExecAbortError, OutOfMemoryError

from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import JobId, JobState
from emq_worker.protocol.replies import (
    ClaimResult,
    LostLease,
    PromoteResult,
    ReapResult,
    SettleResult,
    claim_result,
    lost_leases,
    promote_result,
    reap_result,
    settle_results,
    text,
)
from emq_worker.protocol.scripts import ArgValue, Scripts, wake_cap
from emq_worker.protocol.values import (
    DEFAULT_COMPLETED_TTL_MS,
    ENQUEUE_MEMO_MS,
    NO_OFFER,
    RENEW_CHUNK,
    Completion,
    Counts,
    Failure,
    HeldLease,
    NewJob,
    OfferTerms,
    Outcome,
    new_nonce,
)


class Queue:
    """One queue's verbs. Holds no state of its own beyond its client, scripts and keys."""

    def __init__(self, client: Redis, scripts: Scripts, name: str) -> None:
        self.client = client
        self.scripts = scripts
        self.keys = QueueKeys.of(name)
        self.name = name
        self._script_keys: dict[str, list[str]] = {}

    def script_keys(self, verb: str, job_id: str | None = None) -> list[str]:
        """The keys of a `verb` call on this queue, as its script's header declares them."""
        if job_id is not None:
            return self.scripts.keys(verb, self.keys.prefix, job_id)
        keys = self._script_keys.get(verb)
        if keys is None:
            keys = self._script_keys[verb] = self.scripts.keys(verb, self.keys.prefix)
        return keys

    async def run(self, verb: str, args: Sequence[ArgValue], job_id: str | None = None) -> Any:
        """Call the script `verb` on this queue with `args`; its keys come from its header."""
        return await self.scripts.call(self.client, verb, self.script_keys(verb, job_id), args)

    async def enqueue(
        self, jobs: Sequence[NewJob], *, nonce: str | None = None
    ) -> list[bool | JobId]:
        """Enqueue all or none (one script call). Per job: True enqueued; False when its id
        already existed (or, chosen, completed within the window); or, for a job with a dedup
        id, the id of the job parked under it (live, or completed within the window).

        The call carries a fresh `nonce`: should the client re-send it (its reply lost), the
        re-send finds the call's memo and gets the same answer, writing nothing."""
        if not jobs:
            return []
        dedup: list[ArgValue] = []
        chosen: list[ArgValue] = []
        placed: list[ArgValue] = []
        for index, job in enumerate(jobs, start=1):
            if job.dedup_id is not None:
                dedup += [index, job.dedup_id, job.dedup_ttl_ms]
            if job.chosen:
                chosen.append(index)
            if job.group is not None or job.priority:
                placed += [index, job.group or "", job.priority]
        args: list[ArgValue] = [self.keys.prefix, nonce or new_nonce(), ENQUEUE_MEMO_MS]
        args += [len(dedup) // 3, len(chosen), len(placed) // 3, *dedup, *chosen, *placed]
        for job in jobs:
            args += [job.id, job.payload, job.mode, job.ms]
        reply = await self.run(
            "enqueue",
            args,
        )
        return [JobId(text(flag)) if isinstance(flag, bytes) else int(flag) == 1 for flag in reply]

    async def claim(
        self,
        count: int,
        lease_ms: int,
        nonce: str | None = None,
        offer: OfferTerms | None = None,
        suspect_room: int = 1,
        *,
        clear_wake: bool = False,
        memo_ms: int | None = None,
    ) -> ClaimResult:
        """Lease up to `count` ready jobs, at most `suspect_room` suspects among them (more only
        once they have waited half a lease). With `offer`, first take over what was handed to the
        worker's standing offer (when `offer.standing`), and leave a new offer if pending runs
        dry (when `offer.offer_ms` > 0). `clear_wake` (the worker was woken by this queue's
        token): finding pending empty deletes the wake list's stale tokens. The call's memo
        answers a re-send for `memo_ms` (default and at most: the lease). See lua/claim.lua."""
        nonce = nonce or new_nonce()
        k = self.keys
        terms = offer or NO_OFFER
        reply = await self.run(
            "claim",
            [
                k.prefix,
                lease_ms,
                count,
                nonce,
                terms.nonce,
                terms.offer_ms,
                int(terms.standing),
                terms.room,
                suspect_room,
                "1" if clear_wake else "",
                lease_ms if memo_ms is None else memo_ms,
            ],
        )
        return claim_result(self.name, nonce, reply)

    async def withdraw(self, offer_nonce: str, lease_ms: int) -> int:
        """Take back the worker's offer; the jobs handed to it go back to pending. Returns how
        many did."""
        k = self.keys
        reply = await self.run(
            "withdraw",
            [k.prefix, offer_nonce, lease_ms],
        )
        return int(reply)

    async def keep_offer(self, offer_nonce: str, lease_ms: int, offer_ms: int) -> bool:
        """Keep the worker's standing offer standing `offer_ms` more; False when it no longer
        stood (handed a job, withdrawn, expired): claim the queue instead."""
        reply = await self.run("offer", [f"{offer_nonce}:{lease_ms}", offer_ms])
        return int(reply) == 1

    async def renew(self, leases: Sequence[HeldLease], lease_ms: int) -> list[LostLease]:
        """Renew every lease in one round trip: one script call per RENEW_CHUNK leases, all in
        one pipeline, so no single call holds the server for long whatever K is."""
        calls = []
        for start in range(0, max(len(leases), 1), RENEW_CHUNK):
            args: list[ArgValue] = [self.keys.prefix, lease_ms]
            for lease in leases[start : start + RENEW_CHUNK]:
                args += [lease.id, lease.token, lease.nonce]
            calls.append((self.script_keys("renew"), args))
        if len(calls) == 1:
            replies = [await self.scripts.call(self.client, "renew", *calls[0])]
        else:
            replies = await self.scripts.call_pipelined(self.client, "renew", calls)
        return [lost for reply in replies for lost in lost_leases(reply)]

    async def settle(
        self,
        outcomes: Sequence[Outcome],
        receipt_ms: int,
        completed_ttl_ms: int = DEFAULT_COMPLETED_TTL_MS,
    ) -> list[SettleResult]:
        """Write every outcome in one script call; one SettleResult per outcome, in order. A
        completed job with a chosen or dedup id stays a duplicate for `completed_ttl_ms`."""
        if not outcomes:
            return []
        completions = [o for o in outcomes if isinstance(o, Completion)]
        failures = [o for o in outcomes if isinstance(o, Failure)]
        stored = [(c, c.result) for c in completions if c.result is not None]
        if stored:  # completions that store a result go first, each with its result and TTL
            completions = [*(c for c, _ in stored), *(c for c in completions if c.result is None)]
        args: list[ArgValue] = [self.keys.prefix, receipt_ms, completed_ttl_ms]
        args += [len(completions), len(stored)]
        for completion, result in stored:
            lease = completion.lease
            args += [lease.id, lease.token, lease.nonce, completion.result_ttl_ms, result]
        for completion in completions[len(stored) :]:
            lease = completion.lease
            args += [lease.id, lease.token, lease.nonce]
        for failure in failures:
            lease = failure.lease
            args += [
                lease.id,
                lease.token,
                lease.nonce,
                failure.delay_ms,
                failure.max_attempts,
                failure.error,
                failure.trace,
            ]
        reply = await self.run(
            "settle",
            args,
        )
        results = settle_results(reply, len(outcomes))
        by_outcome = dict(zip(map(id, [*completions, *failures]), results, strict=True))
        return [by_outcome[id(outcome)] for outcome in outcomes]

    async def complete(
        self,
        lease: HeldLease,
        receipt_ms: int,
        completed_ttl_ms: int = DEFAULT_COMPLETED_TTL_MS,
    ) -> SettleResult:
        return (await self.settle([Completion(lease)], receipt_ms, completed_ttl_ms))[0]

    async def fail(
        self,
        lease: HeldLease,
        receipt_ms: int,
        *,
        delay_ms: int,
        max_attempts: int,
        error: str,
    ) -> SettleResult:
        failure = Failure(lease, delay_ms=delay_ms, max_attempts=max_attempts, error=error)
        return (await self.settle([failure], receipt_ms))[0]

    async def release(self, leases: Sequence[HeldLease]) -> int:
        if not leases:
            return 0
        args: list[ArgValue] = [self.keys.prefix]
        for lease in leases:
            args += [lease.id, lease.token, lease.nonce]
        return int(await self.run("release", args))

    async def reap(self, batch: int, max_attempts: int) -> ReapResult:
        k = self.keys
        reply = await self.run(
            "reap",
            [k.prefix, batch, max_attempts],
        )
        return reap_result(reply)

    async def promote(self, batch: int, only: JobId | None = None) -> PromoteResult:
        """Move due scheduled jobs to pending; with `only`, that job now whatever its due time
        (promoted 0 when it is not scheduled)."""
        k = self.keys
        reply = await self.run("promote", [k.prefix, batch, only or ""])
        return promote_result(reply)

    async def remove(
        self,
        job_id: JobId,
        dedup_id: str = "",
        *,
        only_dead: bool = False,
        only_pending: bool = False,
    ) -> bool:
        """Delete an unheld job; False when it was gone. True also when only set members were
        left of it (its row gone: EchoMQ's late complete of a job we dead-lettered), which are
        removed, and when it completed within the completion window (its tombstones are
        forgotten: the id may be enqueued again). Raises LockedError while it is held, and with
        `only_dead` (`only_pending`), StateError unless it is in dead (pending), checked in the
        same script."""
        k = self.keys
        only = "dead" if only_dead else "pending" if only_pending else ""
        reply = await self.run("remove", [k.prefix, job_id, dedup_id, only])
        return int(reply) >= 0  # 1 removed; 0 members left without a row, or tombstones

    async def reprocess(self, job_id: JobId) -> bool:
        """Return a dead job to pending with a fresh retry budget; False when it was gone (a dead
        member left without its row is removed). Raises StateError unless it is dead, and
        LockedError while a lock still holds it."""
        k = self.keys
        reply = await self.run("reprocess", [k.prefix, job_id])
        return int(reply) == 1

    async def drain(self, *, scheduled: bool, batch: int) -> tuple[int, bool]:
        """Delete up to `batch` jobs waiting in pending (then schedule, with `scheduled`), with
        their keys; returns (jobs deleted, more to do)."""
        k = self.keys
        reply = await self.run(
            "drain",
            [k.prefix, "1" if scheduled else "", batch],
        )
        return int(reply[0]), int(reply[1]) == 1

    async def obliterate(self, *, force: bool, budget: int) -> tuple[int, bool]:
        """Delete up to `budget` jobs of a paused queue, then (when none are left) its keys;
        returns (jobs deleted, more to do). Raises StateError unless paused, and while jobs are
        active unless `force`."""
        k = self.keys
        reply = await self.run(
            "obliterate",
            [k.prefix, "force" if force else "", budget],
        )
        return int(reply[1]), int(reply[0]) == 1

    async def pause(self) -> None:
        await self.client.hset(self.keys.meta, "paused", "1")

    async def resume(self) -> None:
        """Unpause, then push one wake token: a parked worker claims the jobs waiting at once
        instead of at its next check. A server out of memory refuses the token (it may not
        refuse the unpause): the next check finds the jobs then."""
        await self.client.hdel(self.keys.meta, "paused")
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.lpush(self.keys.wake, "1")
                pipe.ltrim(self.keys.wake, 0, wake_cap() - 1)
                await pipe.execute()
        except (OutOfMemoryError, ExecAbortError):
            return

    async def counts(self) -> Counts:
        k = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            for key in (k.pending, k.active, k.schedule, k.dead):
                pipe.zcard(key)
            pipe.hget(k.completed, "count")
            pipe.hget(k.failed, "count")
            pending, active, scheduled, dead, completed, failed = await pipe.execute()
        return Counts(pending, active, scheduled, dead, int(completed or 0), int(failed or 0))

    async def get_job(self, job_id: JobId) -> dict[str, str] | None:
        """The job row with text fields (payload decoded as UTF-8 with replacement), or None."""
        row = await self.client.hgetall(self.keys.job(job_id))
        if not row:
            return None
        return {
            text(k): v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
            for k, v in row.items()
        }

    async def state_of(self, job_id: JobId) -> str:
        """Where the job is: pending (in pending, or its group's lane), active, scheduled, dead,
        awaiting_children (a flow parent, in no set), unknown (a row in no set) or absent."""
        k = self.keys
        async with self.client.pipeline(transaction=False) as pipe:
            for key in (k.pending, k.active, k.schedule, k.dead):
                pipe.zscore(key, job_id)
            pipe.hget(k.job(job_id), "state")
            pipe.exists(k.job(job_id))
            pipe.hget(k.job(job_id), "group")
            *scores, row_state, exists, group = await pipe.execute()
        states = (JobState.PENDING, JobState.ACTIVE, JobState.SCHEDULED, JobState.DEAD)
        for state, score in zip(states, scores, strict=True):
            if score is not None:
                return str(state)
        if row_state == JobState.AWAITING_CHILDREN.encode():
            return str(JobState.AWAITING_CHILDREN)
        if group is not None and await self.client.zscore(k.lane(text(group)), job_id) is not None:
            return str(JobState.PENDING)
        return "unknown" if exists else "absent"
