"""The pre-start lease check (runtime/prestart.py) against a real redis-server: a lease confirmed
recently starts unchecked; an older one, or one past its local deadline, is renewed first, and one
the server gave away (reaped and claimed again) is reported lost, so its handler never starts; a
worker whose claim was answered past the local deadline runs the job at once."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.admin.verbs import cancel_job
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, ClaimResult
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.prestart import needs_check, still_held
from tests.support.conformance import LEASE_MS, Harness, lapse
from tests.support.running import running_worker, worker_settings
from tests.support.wait import until

SHORT_LEASE_MS = 30
"""A lease short enough to let it lapse in a test; the sleep past it is the scenario."""
SETTINGS = worker_settings("q", "redis://localhost", lease_ms=LEASE_MS)


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


def test_a_lease_confirmed_under_half_a_lease_ago_starts_unchecked() -> None:
    now = time.monotonic()
    job = ClaimedJob("q", JobId("x"), b"", Token(1), "nonce")
    lease = Lease(job=job, confirmed_at=now - 0.4)
    settings = worker_settings("q", "redis://localhost", lease_ms=1_000)
    assert not needs_check(lease, settings, now)
    assert needs_check(lease, settings, now + 0.2)


def test_a_lease_past_its_local_deadline_is_checked_whatever_the_share() -> None:
    """With renewals every 100 ms of a 1 s lease and a 700 ms stop margin, the local deadline
    (300 ms) comes before half a lease: a claim answered 400 ms after it was sent is checked."""
    now = time.monotonic()
    job = ClaimedJob("q", JobId("x"), b"", Token(1), "nonce")
    lease = Lease(job=job, confirmed_at=now - 0.4)
    settings = worker_settings(
        "q", "redis://localhost", lease_ms=1_000, renew_every_ms=100, stop_margin_ms=700
    )
    assert needs_check(lease, settings, now)


async def test_a_lease_still_held_is_renewed_and_confirmed(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one(LEASE_MS)
    lease = Lease(job=job, confirmed_at=0.0)
    now = time.monotonic()
    assert await still_held(lease, conf.queue, SETTINGS, now)
    assert lease.confirmed_at == now
    assert not lease.cancel_requested


async def test_a_lease_reaped_and_claimed_again_is_lost_before_the_start(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one(SHORT_LEASE_MS)
    await lapse(2 * SHORT_LEASE_MS)
    await conf.queue.reap(10, 5)
    again = await conf.claim_one(LEASE_MS)
    assert again.token == job.token + 1
    lease = Lease(job=job, confirmed_at=0.0)
    assert not await still_held(lease, conf.queue, SETTINGS, time.monotonic())
    assert lease.confirmed_at == 0.0


async def test_a_cancel_request_is_noted_and_the_lease_kept(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one(LEASE_MS)
    await cancel_job(conf.queue, job.id)
    lease = Lease(job=job, confirmed_at=0.0)
    assert await still_held(lease, conf.queue, SETTINGS, time.monotonic())
    assert lease.cancel_requested


LATE_LEASE_MS = 1_500
CLAIM_LATE_S = 1.6
"""Longer than the lease less the stop margin (1.4 s): every claim's request reaches the server
this late, as one sent into a cut network and retransmitted after the heal does."""


async def test_a_claim_answered_past_the_local_deadline_runs_its_job_at_once(
    client: Redis, redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server leased the job when the claim arrived, so the lease is fresh there; the worker
    counts it from the send and finds it past its local deadline. The pre-start check confirms
    it and the handler runs; it is not given up unstarted to wait a lease for the reaper."""
    runs: list[int] = []
    app = App()

    @app.task
    async def noted(ctx: JobContext) -> None:
        runs.append(ctx.attempt)

    claim = Queue.claim

    async def late_claim(self: Queue, *args: Any, **kwargs: Any) -> ClaimResult:
        await anyio.sleep(CLAIM_LATE_S)
        return await claim(self, *args, **kwargs)

    monkeypatch.setattr(Queue, "claim", late_claim)
    await Producer(client).enqueue(queue_name, "noted")
    settings = worker_settings(
        queue_name, redis_url, lease_ms=LATE_LEASE_MS, renew_every_ms=500, handoff=False
    )
    async with running_worker(settings, app) as worker:
        await until(lambda: bool(runs), what="the job ran", within=CLAIM_LATE_S * 2 + 1)
        fenced = worker.counters.self_fenced
    assert runs == [1], f"attempts run: {runs} (a first attempt given up unstarted)"
    assert fenced == 0
