"""A small harness for the EchoMQ conformance scenarios: one queue, our verbs, raw reads.

Each scenario in `tests/test_conformance.py` drives the server through our typed verbs
(`Producer`, `Queue`) and checks the effects with raw Redis commands, as EchoMQ's own
conformance suite does, so a Python worker and an Elixir one leave the same keys behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, cast

import anyio
from redis.asyncio import Redis

from emq_worker.jobs.producer import Producer
from emq_worker.protocol.ids import SnowflakeMinter, encode
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, SettleResult
from emq_worker.protocol.values import HeldLease

LEASE_MS: Final = 60_000
"""EchoMQ's conformance claims use a 60 s lease unless a scenario names one."""
RECEIPT_MS: Final = 60_000
"""How long a settle receipt answers a re-sent settle in these scenarios."""
TEST_NODE_ID: Final = 999
"""Node id for ids minted by the harness itself (the Producer mints from its default node)."""


def held(job: ClaimedJob, token: int | None = None) -> HeldLease:
    """The lease a claim handed out; `token` forges another fencing token for the same claim."""
    return HeldLease(job.id, job.token if token is None else Token(token), job.nonce)


def foreign_id(namespace: str) -> str:
    """A well-formed branded id in another namespace than JOB (e.g. an `ORD` id)."""
    return encode(namespace, SnowflakeMinter(TEST_NODE_ID).next())


@dataclass(slots=True)
class Harness:
    client: Redis
    producer: Producer
    queue: Queue
    minter: SnowflakeMinter

    @classmethod
    def of(cls, client: Redis, queue_name: str) -> Harness:
        producer = Producer(client)
        return cls(client, producer, producer.queue(queue_name), SnowflakeMinter(TEST_NODE_ID))

    @property
    def keys(self) -> QueueKeys:
        return self.queue.keys

    def mint(self) -> JobId:
        return self.minter.job_id()

    async def enqueue(
        self, payload: bytes = b"x", *, delay_ms: int | None = None, job_id: str | None = None
    ) -> JobId:
        enqueued = await self.producer.enqueue_raw(
            self.queue.name, payload, delay_ms=delay_ms, job_id=job_id
        )
        assert not enqueued.duplicate, f"{enqueued.job_id} was already enqueued"
        return enqueued.job_id

    async def enqueue_many(self, n: int) -> list[JobId]:
        """`n` jobs with payloads b"0", b"1", ... in mint order."""
        return [await self.enqueue(str(i).encode()) for i in range(n)]

    async def claim(self, count: int, lease_ms: int = LEASE_MS) -> tuple[ClaimedJob, ...]:
        return (await self.queue.claim(count, lease_ms)).jobs

    async def claim_one(self, lease_ms: int = LEASE_MS) -> ClaimedJob:
        jobs = await self.claim(1, lease_ms)
        assert len(jobs) == 1, f"expected one job to claim; got {jobs!r}"
        return jobs[0]

    async def complete(self, job: ClaimedJob, token: int | None = None) -> SettleResult:
        return await self.queue.complete(held(job, token), RECEIPT_MS)

    async def fail(
        self,
        job: ClaimedJob,
        *,
        delay_ms: int = 10,
        max_attempts: int = 3,
        error: str = "boom",
        token: int | None = None,
    ) -> SettleResult:
        return await self.queue.fail(
            held(job, token),
            RECEIPT_MS,
            delay_ms=delay_ms,
            max_attempts=max_attempts,
            error=error,
        )

    async def row(self, job_id: str) -> dict[bytes, bytes]:
        """HGETALL of the raw job row (empty when the row is gone)."""
        reply = await self.client.hgetall(self.keys.job(job_id))
        return cast(dict[bytes, bytes], reply)

    async def field(self, job_id: str, name: str) -> bytes | None:
        value = await self.client.hget(self.keys.job(job_id), name)
        return cast(bytes | None, value)

    async def exists(self, key: str) -> bool:
        return int(await self.client.exists(key)) == 1

    async def score(self, set_key: str, job_id: str) -> float | None:
        value: float | None = await self.client.zscore(set_key, job_id)
        return value

    async def members(self, set_key: str) -> list[str]:
        """Every member of a sorted set, in score-then-byte order."""
        reply = await self.client.zrange(set_key, 0, -1)
        return [member.decode() for member in cast(list[bytes], reply)]

    async def browse_rev(self, set_key: str) -> list[str]:
        """`ZRANGE <set> + - BYLEX REV`: EchoMQ's newest-first browse of a score-0 set."""
        reply = await self.client.zrange(set_key, "+", "-", desc=True, bylex=True)
        return [member.decode() for member in cast(list[bytes], reply)]

    async def metric(self, name: str) -> tuple[int, int]:
        """(HGET metrics:<name> count, LLEN metrics:<name>:data), as EchoMQ's get_metrics."""
        key = f"{self.keys.prefix}metrics:{name}"
        count: Any = await self.client.hget(key, "count")
        data = int(await self.client.llen(key + ":data"))
        return int(count or 0), data


async def lapse(ms: int) -> None:
    """Sleep past a lease, schedule or receipt deadline of `ms`: the sleep IS the scenario."""
    await anyio.sleep(ms / 1000)
