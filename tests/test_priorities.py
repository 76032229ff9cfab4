"""Priorities at the script level: a job's priority is its score in pending (or its lane), lower
first and mint order within a priority; every script that puts a job back keeps it; a plain job's
row keeps exactly its three fields."""

from __future__ import annotations

import re

import pytest
from redis.asyncio import Redis

from emq_worker.errors import ConfigError
from emq_worker.protocol.names import JobId
from emq_worker.protocol.values import NewJob
from tests.support.conformance import Harness, held, lapse


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


async def put(conf: Harness, priority: int, label: str = "", **options: object) -> JobId:
    sent = await conf.producer.enqueue_raw(
        conf.queue.name,
        (label or str(priority)).encode(),
        priority=priority,
        **options,  # type: ignore[arg-type]
    )
    return sent.job_id


async def test_only_a_prioritized_job_gets_the_field_and_its_score(conf: Harness) -> None:
    plain = await put(conf, 0)
    urgent = await put(conf, -5)
    assert await conf.row(plain) == {b"state": b"pending", b"attempts": b"0", b"payload": b"0"}
    assert (await conf.row(urgent))[b"priority"] == b"-5"
    assert await conf.score(conf.keys.pending, plain) == 0
    assert await conf.score(conf.keys.pending, urgent) == -5


async def test_claims_take_lower_priorities_first_in_mint_order_within_each(
    conf: Harness,
) -> None:
    order = [(3, "c1"), (0, "p1"), (-2, "u1"), (3, "c2"), (0, "p2"), (-2, "u2")]
    for priority, label in order:
        await put(conf, priority, label)
    claimed = [job.payload.decode() for job in await conf.claim(4)]
    claimed += [job.payload.decode() for job in await conf.claim(4)]
    assert claimed == ["u1", "u2", "p1", "p2", "c1", "c2"]


async def test_every_way_back_to_pending_keeps_the_priority(conf: Harness) -> None:
    job_id = await put(conf, 7)
    pending = conf.keys.pending

    job = await conf.claim_one(lease_ms=30)  # reaped
    await lapse(60)
    await conf.queue.reap(10, 9)
    assert await conf.score(pending, job_id) == 7

    job = await conf.claim_one()  # failed, retried at once
    await conf.fail(job, delay_ms=0, max_attempts=9)
    assert await conf.score(pending, job_id) == 7

    job = await conf.claim_one()  # failed, retried later, promoted
    await conf.fail(job, delay_ms=10, max_attempts=9)
    await lapse(30)
    await conf.queue.promote(10)
    assert await conf.score(pending, job_id) == 7

    job = await conf.claim_one()  # released at a graceful stop
    await conf.queue.release([held(job)])
    assert await conf.score(pending, job_id) == 7

    job = await conf.claim_one()  # dead-lettered, reprocessed
    await conf.fail(job, max_attempts=1)
    await conf.queue.reprocess(job_id)
    assert await conf.score(pending, job_id) == 7


async def test_a_scheduled_job_is_promoted_at_its_priority(conf: Harness) -> None:
    job_id = await put(conf, 4, delay_ms=10)
    await lapse(30)
    assert (await conf.queue.promote(10)).promoted == 1
    assert await conf.score(conf.keys.pending, job_id) == 4


async def test_priorities_order_a_lane_too(conf: Harness) -> None:
    for priority in (2, 1, 0):
        await put(conf, priority, f"a{priority}", group="a")
    assert [job.payload for job in await conf.claim(3)] == [b"a0", b"a1", b"a2"]


@pytest.mark.parametrize("bad", [1_000_001, -1_000_001, 1.5, True, "1"])
async def test_a_priority_out_of_range_is_refused_naming_it(conf: Harness, bad: object) -> None:
    with pytest.raises(
        ConfigError, match=f"priority must be an integer.*got {re.escape(repr(bad))}"
    ):
        await put(conf, bad)  # type: ignore[arg-type]
    assert await conf.client.keys(conf.keys.prefix + "*") == []


def test_new_job_defaults_to_no_group_and_priority_zero() -> None:
    job = NewJob(JobId("JOB00000000001"), b"x")
    assert (job.group, job.priority) == (None, 0)
