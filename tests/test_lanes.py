"""Fair lanes at the script level: grouped enqueue, the rotating claim, per-group limits, pause per
group, and the transitions (settle, reap, promote, release, remove) that return a job to its
lane and a lane to the ring."""

from __future__ import annotations

from collections import Counter

import pytest
from redis.asyncio import Redis

from emq_worker.errors import ConfigError, StateError
from emq_worker.protocol.lane_verbs import (
    limit_lane,
    pause_lane,
    read_lanes,
    resume_lane,
    validate_group,
)
from emq_worker.protocol.names import JobId
from emq_worker.protocol.replies import ClaimedJob, text
from tests.support.conformance import Harness, held, lapse

RECEIPT_MS = 60_000


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


async def put(conf: Harness, group: str | None, n: int = 1, **options: object) -> list[JobId]:
    """`n` jobs in `group`'s lane (None: the common pending set), payloads "<group>-<i>"."""
    ids: list[JobId] = []
    for i in range(n):
        sent = await conf.producer.enqueue_raw(
            conf.queue.name,
            f"{group}-{i}".encode(),
            group=group,
            **options,  # type: ignore[arg-type]
        )
        ids.append(sent.job_id)
    return ids


def groups_of(jobs: tuple[ClaimedJob, ...]) -> list[str]:
    return [job.payload.decode().rsplit("-", 1)[0] for job in jobs]


async def ring(conf: Harness) -> list[str]:
    return [text(g) for g in await conf.client.lrange(conf.keys.prefix + "ring", 0, -1)]


async def gactive(conf: Harness) -> dict[str, int]:
    raw = await conf.client.hgetall(conf.keys.prefix + "gactive")
    return {text(k): int(v) for k, v in raw.items()}


async def test_a_grouped_job_waits_in_its_lane_with_its_group_on_the_row(conf: Harness) -> None:
    [job_id] = await put(conf, "tenant-42")
    assert await conf.row(job_id) == {
        b"state": b"pending",
        b"attempts": b"0",
        b"payload": b"tenant-42-0",
        b"group": b"tenant-42",
    }
    assert await conf.members(conf.keys.lane("tenant-42")) == [job_id]
    assert await conf.members(conf.keys.pending) == []
    assert await ring(conf) == ["tenant-42"]
    assert await conf.queue.state_of(job_id) == "pending"
    assert await conf.client.llen(conf.keys.wake) == 1


async def test_claims_take_the_lanes_in_strict_rotation(conf: Harness) -> None:
    await put(conf, "a", 2)
    await put(conf, "b", 2)
    served = [groups_of(await conf.claim(1))[0] for _ in range(4)]
    assert served == ["a", "b", "a", "b"]
    assert await conf.claim(1) == ()
    assert await ring(conf) == []
    assert await gactive(conf) == {"a": 2, "b": 2}


async def test_small_lanes_finish_within_a_few_rotations_not_after_the_big_one(
    conf: Harness,
) -> None:
    await put(conf, "big", 1000)
    await put(conf, "s1", 10)
    await put(conf, "s2", 10)
    seen: list[str] = []
    while len(seen) < 1020:
        jobs = await conf.claim(10)
        assert jobs, f"nothing claimed after {len(seen)} jobs"
        seen += groups_of(jobs)
        for job in jobs:
            assert (await conf.complete(job)).status == "ok"
    last_small = max(i for i, g in enumerate(seen) if g != "big")
    assert last_small < 40, f"the small lanes finished only at claim {last_small}"
    assert Counter(seen) == {"big": 1000, "s1": 10, "s2": 10}
    assert await gactive(conf) == {}
    assert await ring(conf) == []


async def test_one_batch_claim_rotates_within_the_batch(conf: Harness) -> None:
    await put(conf, "a", 5)
    await put(conf, "b", 5)
    await put(conf, "c", 1)
    assert groups_of(await conf.claim(7)) == ["a", "b", "c", "a", "b", "a", "b"]


async def test_a_group_limit_holds_its_lane_until_a_job_settles(conf: Harness) -> None:
    await limit_lane(conf.queue, "a", 1)
    first, _ = await put(conf, "a", 2)
    [job] = await conf.claim(5)
    assert job.id == first
    assert await ring(conf) == []
    assert await conf.claim(5) == ()
    assert (await conf.complete(job)).status == "ok"
    assert await ring(conf) == ["a"]
    assert groups_of(await conf.claim(5)) == ["a"]


async def test_a_limit_leaves_other_lanes_served(conf: Harness) -> None:
    await limit_lane(conf.queue, "a", 2)
    await put(conf, "a", 6)
    await put(conf, "b", 6)
    assert Counter(groups_of(await conf.claim(10))) == {"a": 2, "b": 6}


async def test_raising_or_clearing_a_limit_rings_the_lane_and_wakes(conf: Harness) -> None:
    await limit_lane(conf.queue, "a", 1)
    await put(conf, "a", 3)
    await conf.claim(5)
    assert await ring(conf) == []
    await conf.client.delete(conf.keys.wake)
    await limit_lane(conf.queue, "a", 3)
    assert await ring(conf) == ["a"]
    assert await conf.client.llen(conf.keys.wake) == 1
    assert len(await conf.claim(5)) == 2
    await limit_lane(conf.queue, "a", 1)  # over the limit now: off the ring, nothing taken
    await put(conf, "a", 1)
    assert await ring(conf) == []
    await limit_lane(conf.queue, "a", None)
    assert await ring(conf) == ["a"]


async def test_pausing_a_group_parks_its_lane_only(conf: Harness) -> None:
    await put(conf, "a", 2)
    await put(conf, "b", 2)
    assert await pause_lane(conf.queue, "a")
    assert not await pause_lane(conf.queue, "a")
    assert groups_of(await conf.claim(10)) == ["b", "b"]
    view = await read_lanes(conf.queue)
    assert [(lane.group, lane.waiting, lane.paused) for lane in view.deepest] == [
        ("a", 2, True),
        ("b", 0, False),
    ]
    assert await resume_lane(conf.queue, "a")
    assert groups_of(await conf.claim(10)) == ["a", "a"]


async def test_a_paused_queue_serves_no_lane(conf: Harness) -> None:
    await put(conf, "a", 1)
    await conf.queue.pause()
    result = await conf.queue.claim(5, 60_000)
    assert result.paused
    assert result.jobs == ()


async def test_ungrouped_jobs_are_one_more_lane_in_the_rotation(conf: Harness) -> None:
    await put(conf, "a", 20)
    await put(conf, "b", 20)
    await put(conf, None, 20)
    served = [groups_of(await conf.claim(1))[0] for _ in range(30)]
    assert Counter(served) == {"a": 10, "b": 10, "None": 10}


async def test_a_reaped_grouped_job_goes_back_to_its_lane(conf: Harness) -> None:
    await limit_lane(conf.queue, "a", 1)
    [job_id] = await put(conf, "a")
    [job] = await conf.claim(1, lease_ms=30)
    await lapse(60)
    reaped = await conf.queue.reap(10, 3)
    assert reaped.returned == 1
    assert await conf.members(conf.keys.lane("a")) == [job_id]
    assert await conf.members(conf.keys.pending) == []
    assert await gactive(conf) == {}
    assert await ring(conf) == ["a"]
    again = await conf.claim_one()
    assert (again.id, again.token) == (job_id, 2)
    # The old holder's late complete is fenced out (a new claim holds it).
    assert (await conf.complete(job)).status == "stale"


async def test_a_late_settle_takes_the_job_out_of_its_lane(conf: Harness) -> None:
    [job_id] = await put(conf, "a")
    [job] = await conf.claim(1, lease_ms=30)
    await lapse(60)
    await conf.queue.reap(10, 3)
    assert (await conf.complete(job)).status == "ok"  # late, but nobody re-claimed it
    assert await conf.members(conf.keys.lane("a")) == []
    assert await ring(conf) == []
    assert await conf.row(job_id) == {}


async def test_a_failure_returns_a_grouped_job_to_its_lane_or_schedule(conf: Harness) -> None:
    await put(conf, "a", 2)
    first, second = await conf.claim(2)
    assert (await conf.fail(first, delay_ms=0)).detail == "pending"
    assert await conf.members(conf.keys.lane("a")) == [first.id]
    assert (await conf.fail(second, delay_ms=10)).detail == "scheduled"
    assert await gactive(conf) == {}
    await lapse(30)
    assert (await conf.queue.promote(10)).promoted == 1
    assert sorted(await conf.members(conf.keys.lane("a"))) == sorted([first.id, second.id])
    assert await ring(conf) == ["a"]


async def test_a_dead_lettered_grouped_job_frees_its_lane(conf: Harness) -> None:
    await limit_lane(conf.queue, "a", 1)
    await put(conf, "a", 2)
    [job] = await conf.claim(5)
    assert (await conf.fail(job, max_attempts=1)).detail == "dead"
    assert await gactive(conf) == {}
    assert groups_of(await conf.claim(5)) == ["a"]


async def test_release_returns_grouped_leases_to_their_lane(conf: Harness) -> None:
    ids = await put(conf, "a", 2)
    jobs = await conf.claim(2)
    assert await conf.queue.release([held(job) for job in jobs]) == 2
    assert sorted(await conf.members(conf.keys.lane("a"))) == sorted(ids)
    assert await gactive(conf) == {}


async def test_remove_takes_a_job_out_of_its_lane_and_its_count(conf: Harness) -> None:
    waiting, running = await put(conf, "a", 2)
    await conf.client.delete(conf.keys.lane("a"))
    await conf.client.zadd(conf.keys.lane("a"), {waiting: 0, running: 0})
    [job] = await conf.claim(1)
    assert job.id == waiting
    await conf.client.delete(conf.keys.lock(job.id))  # its holder is gone (an EchoMQ claim)
    assert await conf.queue.remove(job.id)
    assert await gactive(conf) == {}
    assert await conf.queue.remove(running, only_pending=True)
    assert await conf.client.exists(conf.keys.lane("a")) == 0
    assert await ring(conf) == []
    with pytest.raises(StateError):
        await conf.queue.remove((await put(conf, "b"))[0], only_dead=True)


async def test_reprocess_returns_a_dead_grouped_job_to_its_lane(conf: Harness) -> None:
    [job_id] = await put(conf, "a")
    [job] = await conf.claim(1)
    await conf.fail(job, max_attempts=1)
    assert await conf.queue.reprocess(job_id)
    assert await conf.members(conf.keys.lane("a")) == [job_id]
    assert await ring(conf) == ["a"]


async def test_stats_list_the_deepest_lanes_first(conf: Harness) -> None:
    await put(conf, "a", 1)
    await put(conf, "b", 3)
    await put(conf, "c", 2)
    await limit_lane(conf.queue, "d", 4)
    view = await read_lanes(conf.queue, top=2)
    assert (view.groups, view.waiting, view.serviceable, view.complete) == (4, 6, 3, True)
    assert [(lane.group, lane.waiting) for lane in view.deepest] == [("b", 3), ("c", 2)]
    assert view.as_dict()["deepest"][0] == {
        "group": "b",
        "waiting": 3,
        "active": 0,
        "limit": 0,
        "paused": False,
    }


@pytest.mark.parametrize("bad", ["", "a:b", "{x}", "a" * 129, "t\u00e9"])
def test_a_group_name_outside_the_alphabet_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="group must match"):
        validate_group(bad)


async def test_a_bad_group_writes_nothing(conf: Harness) -> None:
    with pytest.raises(ConfigError, match="'a b'"):
        await put(conf, "a b")
    assert await conf.client.keys(conf.keys.prefix + "*") == []
