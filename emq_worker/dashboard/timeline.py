"""The lease timeline: samples of `emq:{q}:active` on the server clock, compared over time.

Each sample reads Redis TIME and the earliest deadlines in the active set. Compared with the
previous sample of the same queue it tells:
- a renewal: the same claim (same attempts) with a deadline that moved forward;
- at risk: less than half of the longest lease seen for that job remains (renewal runs every
  third of a lease, so a healthy lease never drops that low: a sweep was missed);
- expired: the deadline passed and the reaper has not run yet;
- how a lease ended when it left the set (or its attempts moved on): the holder's receipt says
  settled (completed, retried, dead); without one, a lease gone after its deadline was reaped,
  before it released (a worker handing jobs back at shutdown); no row and no receipt: removed.

Each lease also shows its holder and when it was claimed: our workers list the jobs they hold
and how long ago they claimed them in their presence entries (dashboard/fleet.py), exact to a
round trip on the server clock. The claim script records no claim time on the row, so a lease no
entry lists (an EchoMQ holder; a worker holding more than its entry lists) is dated by its
deadline minus the longest time left ever seen on it (about the lease length), the earliest such
estimate kept, and flagged as estimated.

This works from the keyspace alone; the optional `emq:{q}:events` channel is not needed.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import anyio
from redis.asyncio import Redis

from emq_worker.dashboard.fleet import Holder, holders
from emq_worker.dashboard.listing import peek
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.replies import text
from emq_worker.protocol.servertime import queue_time, to_ms
from emq_worker.runtime.presence import presence_entries

LEASES_SHOWN = 200
"""Leases a sample reads: the earliest deadlines, which are the ones about to lapse."""
ENDED_KEPT = 50
"""Ended leases remembered per queue."""
RENEWALS_KEPT = 20
QUEUES_TRACKED = 100
"""Queues with a remembered sample; the least recently sampled is forgotten first."""
SETTLED = {"completed": "completed", "scheduled": "retry scheduled", "pending": "retried"}


@dataclass(slots=True)
class Lease:
    job_id: str
    attempts: int
    deadline_ms: int
    first_seen_ms: int
    longest_ms: int
    """The most time left seen on this lease: about the lease length."""
    renewals: list[int] = field(default_factory=list)
    """Server times (ms) of the samples that saw the deadline move forward."""
    claimed_ms: int | None = None
    """When it was claimed (server ms): from its holder's entry, else estimated."""
    claim_estimated: bool = True
    holder: str = ""
    task: str = ""

    def date(self, holder: Holder | None, lease_ms: int = 0) -> None:
        """Learn the claim's time (and holder) from an entry, or estimate it: the deadline minus
        the longer of the most time left ever seen and `lease_ms` (the queue's workers' lease)."""
        if holder is not None:
            self.holder, self.claimed_ms, self.claim_estimated = (
                holder.worker,
                holder.claimed_ms,
                False,
            )
        elif self.claim_estimated:
            # Never later than first seen (a lease first seen past its deadline shows no length).
            estimate = min(self.deadline_ms - max(self.longest_ms, lease_ms), self.first_seen_ms)
            self.claimed_ms = (
                estimate if self.claimed_ms is None else min(self.claimed_ms, estimate)
            )

    @property
    def start_ms(self) -> int:
        return self.first_seen_ms if self.claimed_ms is None else self.claimed_ms

    def status(self, now_ms: int) -> str:
        left = self.deadline_ms - now_ms
        if left <= 0:
            return "expired"
        return "at-risk" if 2 * left < self.longest_ms else "held"

    def as_dict(self, now_ms: int) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempts": self.attempts,
            "deadline_ms": self.deadline_ms,
            "left_ms": self.deadline_ms - now_ms,
            "first_seen_ms": self.first_seen_ms,
            "renewals": list(self.renewals),
            "status": self.status(now_ms),
            "claimed_ms": self.claimed_ms,
            "claim_estimated": self.claim_estimated,
            "running_ms": now_ms - self.start_ms,
            "holder": self.holder,
            "task": self.task,
        }


@dataclass(frozen=True, slots=True)
class EndedLease:
    lease: Lease
    ended: str
    """reaped, completed, retried, retry scheduled, dead, released or removed."""
    noticed_ms: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.lease.job_id,
            "attempts": self.lease.attempts,
            "deadline_ms": self.lease.deadline_ms,
            "first_seen_ms": self.lease.first_seen_ms,
            "claimed_ms": self.lease.claimed_ms,
            "holder": self.lease.holder,
            "task": self.lease.task,
            "renewals": list(self.lease.renewals),
            "ended": self.ended,
            "noticed_ms": self.noticed_ms,
        }


@dataclass(frozen=True, slots=True)
class Timeline:
    queue: str
    now_ms: int
    held: int
    """Leases in the active set (more than `leases` when it holds over LEASES_SHOWN)."""
    leases: list[Lease]
    ended: list[EndedLease]

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "now_ms": self.now_ms,
            "held": self.held,
            "leases": [lease.as_dict(self.now_ms) for lease in self.leases],
            "ended": [end.as_dict() for end in self.ended],
        }


@dataclass(slots=True)
class _Track:
    leases: dict[str, Lease] = field(default_factory=dict)
    ended: deque[EndedLease] = field(default_factory=lambda: deque(maxlen=ENDED_KEPT))
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class LeaseTracker:
    """Remembers the last sample per queue, so each new one can be compared with it."""

    def __init__(self, client: Redis, *, shown: int = LEASES_SHOWN) -> None:
        self.client = client
        self.shown = shown
        self._tracks: OrderedDict[str, _Track] = OrderedDict()

    def _track(self, queue: str) -> _Track:
        track = self._tracks.pop(queue, None) or _Track()
        self._tracks[queue] = track
        while len(self._tracks) > QUEUES_TRACKED:
            self._tracks.popitem(last=False)
        return track

    async def sample(self, queue: str) -> Timeline:
        keys = QueueKeys.of(queue)
        track = self._track(queue)
        async with track.lock:
            now_ms, held, seen = await self._read(keys)
            await self._compare(keys, track, now_ms, seen)
            await self._attribute(keys, track, now_ms)
            leases = sorted(track.leases.values(), key=lambda lease: lease.deadline_ms)
            ended = sorted(track.ended, key=lambda end: end.noticed_ms, reverse=True)
            return Timeline(queue, now_ms, held, leases, ended)

    async def _read(self, keys: QueueKeys) -> tuple[int, int, dict[str, tuple[int, int]]]:
        """Server now, the active set's size, and {id: (deadline, attempts)} of its head."""
        async with self.client.pipeline(transaction=False) as pipe:
            queue_time(pipe, keys.active)
            pipe.zcard(keys.active)
            pipe.zrange(keys.active, 0, self.shown - 1, withscores=True)
            now, held, members = await pipe.execute()
        ids = [text(member) for member, _ in members]
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hget(keys.job(job_id), "attempts")
            attempts = await pipe.execute()
        seen = {
            job_id: (int(score), int(tries or 0))
            for job_id, (_, score), tries in zip(ids, members, attempts, strict=True)
        }
        return to_ms(now), int(held), seen

    async def _compare(
        self, keys: QueueKeys, track: _Track, now_ms: int, seen: dict[str, tuple[int, int]]
    ) -> None:
        gone = [
            lease
            for job_id, lease in track.leases.items()
            if job_id not in seen or seen[job_id][1] != lease.attempts
        ]
        still_held = {lease.job_id for lease in await self._beyond_the_head(keys, gone)}
        for old in gone:
            del track.leases[old.job_id]
            if old.job_id not in still_held:
                ended = await self._how_it_ended(keys, old, now_ms)
                track.ended.append(EndedLease(old, ended, now_ms))
        for job_id, (deadline, attempts) in seen.items():
            lease = track.leases.get(job_id)
            if lease is None:
                track.leases[job_id] = Lease(job_id, attempts, deadline, now_ms, deadline - now_ms)
                continue
            if deadline > lease.deadline_ms:
                lease.renewals = [*lease.renewals, now_ms][-RENEWALS_KEPT:]
            lease.deadline_ms = deadline
            lease.longest_ms = max(lease.longest_ms, deadline - now_ms)

    async def _attribute(self, keys: QueueKeys, track: _Track, now_ms: int) -> None:
        """Each lease's holder and claim time; the task of the leases seen for the first time."""
        entries = await presence_entries(self.client, [keys.queue]) if track.leases else []
        held = holders(entries, now_ms)
        lease_ms = max((int(e.fields.get("lease_ms") or 0) for e in entries), default=0)
        for lease in track.leases.values():
            lease.date(held.get((lease.job_id, lease.attempts)), lease_ms)
        new = [(lease.job_id, 0) for lease in track.leases.values() if not lease.task]
        for row in await peek(self.client, keys, "active", new) if new else []:
            track.leases[row.id].task = row.task or "?"

    async def _beyond_the_head(self, keys: QueueKeys, gone: list[Lease]) -> list[Lease]:
        """Of the leases missing from a sample, those still held by the same claim: with more
        than LEASES_SHOWN leases, a renewal moves a deadline past the ones a sample reads."""
        if not gone:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for lease in gone:
                pipe.zscore(keys.active, lease.job_id)
                pipe.hget(keys.job(lease.job_id), "attempts")
            replies = await pipe.execute()
        return [
            lease
            for lease, score, attempts in zip(gone, replies[::2], replies[1::2], strict=True)
            if score is not None and int(attempts or 0) == lease.attempts
        ]

    async def _how_it_ended(self, keys: QueueKeys, lease: Lease, now_ms: int) -> str:
        row = keys.job(lease.job_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hget(*keys.receipt(lease.job_id))
            pipe.exists(row)
            receipt, exists = await pipe.execute()
        if receipt is not None:
            token, _, rest = text(receipt).partition(":")
            outcome = rest.rpartition(":")[2]
            if token == str(lease.attempts):
                return SETTLED.get(outcome, outcome)
        if lease.deadline_ms <= now_ms and exists:
            return "reaped"
        return "released" if exists else "removed"
