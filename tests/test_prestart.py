"""The pre-start lease check (runtime/prestart.py) against a real redis-server: a lease confirmed
recently starts unchecked; an older one is renewed first, and one the server gave away (reaped and
claimed again) is reported lost, so its handler never starts."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from emq_worker.admin.verbs import cancel_job
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob
from emq_worker.runtime.lease import Lease
from emq_worker.runtime.prestart import needs_check, still_held
from tests.support.conformance import LEASE_MS, Harness, lapse

SHORT_LEASE_MS = 30
"""A lease short enough to let it lapse in a test; the sleep past it is the scenario."""


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


def test_a_lease_confirmed_under_half_a_lease_ago_starts_unchecked() -> None:
    now = time.monotonic()
    job = ClaimedJob("q", JobId("x"), b"", Token(1), "nonce")
    lease = Lease(job=job, confirmed_at=now - 0.4)
    assert not needs_check(lease, 1_000, now)
    assert needs_check(lease, 1_000, now + 0.2)


async def test_a_lease_still_held_is_renewed_and_confirmed(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one(LEASE_MS)
    lease = Lease(job=job, confirmed_at=0.0)
    now = time.monotonic()
    assert await still_held(lease, conf.queue, LEASE_MS, now)
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
    assert not await still_held(lease, conf.queue, LEASE_MS, time.monotonic())
    assert lease.confirmed_at == 0.0


async def test_a_cancel_request_is_noted_and_the_lease_kept(conf: Harness) -> None:
    await conf.enqueue()
    job = await conf.claim_one(LEASE_MS)
    await cancel_job(conf.queue, job.id)
    lease = Lease(job=job, confirmed_at=0.0)
    assert await still_held(lease, conf.queue, LEASE_MS, time.monotonic())
    assert lease.cancel_requested
