"""A small mixed fleet on one queue: EchoMQ's flat scripts (claim_batch, complete, retry,
promote), driven from the test, beside a real emq-worker worker. Both sides fail some first
attempts, and EchoMQ abandons a few claims (its holder "crashed"), which our reaper takes back.
Every job is completed exactly once, by one side or the other."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from redis.asyncio import Redis

from emq_worker import App, JobContext
from tests.interop.echomq import Claimed, EchoMQ
from tests.support.conformance import Harness
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

JOBS = 60
ECHOMQ_LEASE_MS = 60_000
"""The live EchoMQ holder's lease: longer than the whole test, so that its jobs stay its own
however slowly a loaded machine runs its rounds (at 5 s, a round's retry could meet a lease
our reaper had taken back: the test's precondition, not the protocol, failed)."""
ABANDONED_LEASE_MS = 200
"""The lease of the claims EchoMQ's "crashed" holder never settles: our reaper takes them back."""


class EchoMQSide:
    """An EchoMQ BatchConsumer with the Pump's promote beside it, one polling round at a time:
    it settles the jobs it holds a few per round (a retry for a first attempt whose payload
    ends in 3, else a complete) and claims a few more."""

    def __init__(self, emq: EchoMQ) -> None:
        self.emq = emq
        self.held: list[Claimed] = []
        self.completed: list[str] = []
        self.abandoned: list[str] = []

    async def start(self) -> None:
        """Before our worker starts: claims its "crashed" holder never settles, and a batch."""
        for _ in range(3):
            job = await self.emq.claim(ABANDONED_LEASE_MS)
            assert job is not None
            self.abandoned.append(job.id)
        self.held = await self.emq.claim_batch(12, ECHOMQ_LEASE_MS)

    async def round(self) -> None:
        await self.emq.promote()
        settling, self.held = self.held[:2], self.held[2:]
        for job in settling:
            if job.token == 1 and job.payload.endswith(b"3"):
                verdict = await self.emq.retry(
                    job.id, job.token, delay_ms=20, max_attempts=3, error="boom"
                )
                assert verdict == "scheduled", (job, verdict)
            elif await self.emq.complete(job.id, job.token) == "ok":
                self.completed.append(job.id)
        self.held += await self.emq.claim_batch(2, ECHOMQ_LEASE_MS)


async def test_every_job_is_completed_exactly_once(
    client: Redis, conf: Harness, emq: EchoMQ, redis_url: str
) -> None:
    ids = [conf.mint() for _ in range(JOBS)]
    for i, job_id in enumerate(ids):
        if i % 2:
            assert await emq.enqueue(job_id, f"emq-{i}".encode())
        else:
            await conf.enqueue(f"py-{i}".encode(), job_id=job_id)

    app = App()

    @app.raw_handler(conf.queue.name)
    async def run(ctx: JobContext) -> None:
        if ctx.token == 1 and ctx.payload.endswith(b"7"):
            raise RuntimeError(f"first attempt of {ctx.payload!r} fails")

    ours: list[str] = []
    pubsub = client.pubsub()
    await pubsub.subscribe(conf.keys.prefix + "events")
    theirs = EchoMQSide(emq)
    await theirs.start()

    async def all_done() -> bool:
        while (message := await pubsub.get_message(ignore_subscribe_messages=True)) is not None:
            event: dict[str, Any] = json.loads(message["data"])
            if event["event"] == "completed":
                ours.append(event["job_id"])
        if len(ours) + len(theirs.completed) < JOBS:
            await theirs.round()
            return False
        return True

    try:
        settings = worker_settings(conf.queue.name, redis_url, concurrency=4)
        async with running_worker(settings, app):
            await eventually(all_done, timeout=30, what=f"{JOBS} completions")
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py

    done = Counter(ours + theirs.completed)
    assert sorted(done) == sorted(ids)
    assert set(done.values()) == {1}, [job_id for job_id, n in done.items() if n > 1]
    assert ours, "our worker completed jobs"
    assert theirs.completed, "EchoMQ's side completed jobs"
    assert (await conf.metric("completed"))[0] == JOBS
    counts = await conf.queue.counts()
    assert (counts.pending, counts.active, counts.scheduled, counts.dead) == (0, 0, 0, 0)
    for job_id in ids:
        assert await conf.row(job_id) == {}
    # EchoMQ clears the queue by the names it knows: whatever of ours is left expires by itself
    # (the chosen ids' markers and completion tombstones included).
    await emq.pause()
    assert await emq.obliterate(force=True) == "ok"
    left = [key async for key in client.scan_iter(match=conf.keys.prefix + "*")]
    assert [key for key in left if await client.pttl(key) < 0] == []
