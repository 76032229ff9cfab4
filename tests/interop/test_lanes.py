"""Fair lanes and priorities shared with EchoMQ: its grouped scripts (restated in
tests/interop/echomq/g*.lua) and ours on one queue. Both kinds of consumer serve one ring in one
rotation, honour each other's per-group limits and pauses, count each other's leases in and out of
gactive, and claim prioritized jobs in priority order."""

from __future__ import annotations

from collections import Counter

import pytest

from emq_worker import App, JobContext
from emq_worker.protocol.lane_verbs import limit_lane, pause_lane, resume_lane
from emq_worker.protocol.names import JobId
from emq_worker.protocol.replies import text
from tests.interop.echomq import EchoMQ
from tests.interop.echomq.lanes import EchoLanes
from tests.support.conformance import Harness, lapse
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


@pytest.fixture
def lanes(emq: EchoMQ) -> EchoLanes:
    return EchoLanes(emq)


async def ring(conf: Harness) -> list[str]:
    return [text(g) for g in await conf.client.lrange(conf.keys.prefix + "ring", 0, -1)]


async def gactive(conf: Harness) -> dict[str, int]:
    raw = await conf.client.hgetall(conf.keys.prefix + "gactive")
    return {text(k): int(v) for k, v in raw.items()}


async def ours(conf: Harness, group: str, n: int = 1, priority: int = 0) -> list[JobId]:
    ids: list[JobId] = []
    for i in range(n):
        sent = await conf.producer.enqueue_raw(
            conf.queue.name, f"{group}-{i}".encode(), group=group, priority=priority
        )
        ids.append(sent.job_id)
    return ids


async def theirs(conf: Harness, lanes: EchoLanes, group: str, n: int = 1) -> list[JobId]:
    ids: list[JobId] = []
    for i in range(n):
        job_id = conf.mint()
        assert await lanes.enqueue(group, job_id, f"{group}-{i}".encode())
        ids.append(job_id)
    return ids


def group_of(payload: bytes) -> str:
    return payload.decode().rsplit("-", 1)[0]


async def test_both_consumers_serve_one_rotation(conf: Harness, lanes: EchoLanes) -> None:
    await theirs(conf, lanes, "a", 3)
    await ours(conf, "b", 3)
    await ours(conf, "c", 3)
    served = []
    for turn in range(9):
        if turn % 2:
            job = await lanes.claim()
            assert job is not None
            served.append(job.group)
            assert await lanes.complete(job.id, job.token) == "ok"
        else:
            [mine] = await conf.claim(1)
            served.append(group_of(mine.payload))
            assert (await conf.complete(mine)).status == "ok"
    assert served == ["a", "b", "c"] * 3
    assert await ring(conf) == []
    assert await gactive(conf) == {}


async def test_small_lanes_finish_within_a_few_rotations_across_a_mixed_fleet(
    conf: Harness, lanes: EchoLanes, redis_url: str
) -> None:
    """3 groups of 1 000, 10 and 10 jobs, enqueued by both sides; our worker and EchoMQ's grouped
    consumer claim side by side: the small groups are served within the first rotations, every
    job exactly once."""
    ids = await theirs(conf, lanes, "big", 500) + await ours(conf, "big", 500)
    ids += await ours(conf, "small-1", 5) + await theirs(conf, lanes, "small-1", 5)
    ids += await theirs(conf, lanes, "small-2", 5) + await ours(conf, "small-2", 5)
    served: list[str] = []
    completed: list[str] = []
    app = App()

    @app.raw_handler(conf.queue.name)
    async def run(ctx: JobContext) -> None:
        served.append(group_of(ctx.payload))
        completed.append(ctx.job_id)

    async def echomq_round() -> bool:
        job = await lanes.claim()
        if job is not None:
            served.append(job.group)
            assert await lanes.complete(job.id, job.token) == "ok"
            completed.append(job.id)
        return len(completed) >= len(ids)

    async with running_worker(worker_settings(conf.queue.name, redis_url, concurrency=4), app):
        await eventually(echomq_round, timeout=60, what=f"{len(ids)} completions")
    assert sorted(completed) == sorted(ids)
    last_small = max(i for i, group in enumerate(served) if group != "big")
    assert last_small < 80, f"the small lanes were served last at {last_small} of {len(served)}"
    assert Counter(served) == {"big": 1000, "small-1": 10, "small-2": 10}
    assert await gactive(conf) == {}
    assert await ring(conf) == []


async def test_a_limit_set_by_either_side_binds_both(conf: Harness, lanes: EchoLanes) -> None:
    await lanes.limit("a", 1)
    await theirs(conf, lanes, "a", 3)
    await ours(conf, "b", 2)
    held = await lanes.claim()
    assert held is not None
    assert held.group == "a"
    assert [group_of(job.payload) for job in await conf.claim(5)] == ["b", "b"]
    assert await lanes.complete(held.id, held.token) == "ok"
    [mine] = await conf.claim(5)
    assert group_of(mine.payload) == "a"
    assert await lanes.claim() is None  # our lease counts against the limit too
    await limit_lane(conf.queue, "a", 2)
    job = await lanes.claim()
    assert job is not None
    assert job.group == "a"
    assert await gactive(conf) == {"a": 2, "b": 2}


async def test_pause_per_group_set_by_either_side(conf: Harness, lanes: EchoLanes) -> None:
    await ours(conf, "a", 2)
    await theirs(conf, lanes, "b", 2)
    await lanes.pause("a")
    assert [group_of(job.payload) for job in await conf.claim(5)] == ["b", "b"]
    await resume_lane(conf.queue, "a")
    job = await lanes.claim()
    assert job is not None
    assert job.group == "a"
    await pause_lane(conf.queue, "a")
    assert await lanes.claim() is None
    assert await lanes.depth("a") == 1
    await lanes.resume("a")
    assert [group_of(job.payload) for job in await conf.claim(5)] == ["a"]


async def test_our_reaper_returns_an_echomq_grouped_lease_to_its_lane(
    conf: Harness, lanes: EchoLanes
) -> None:
    """EchoMQ's holder died: our reaper must put its grouped job back in its lane and count it out
    of gactive, or a lane at its limit is never served again (it went to the flat pending set,
    where EchoMQ's grouped consumer never looks, and gactive kept the dead lease)."""
    await lanes.limit("a", 1)
    [job_id] = await theirs(conf, lanes, "a")
    crashed = await lanes.claim(lease_ms=30)
    assert crashed is not None
    await lapse(60)
    assert (await conf.queue.reap(10, 5)).returned == 1
    assert await conf.members(conf.keys.lane("a")) == [job_id]
    assert await conf.members(conf.keys.pending) == []
    assert await gactive(conf) == {}
    again = await lanes.claim()
    assert again is not None
    assert (again.id, again.token) == (job_id, 2)


async def test_echomq_reaps_and_completes_our_grouped_leases(
    conf: Harness, lanes: EchoLanes
) -> None:
    await limit_lane(conf.queue, "a", 1)
    [job_id] = await ours(conf, "a")
    await conf.claim(1, lease_ms=30)
    await lapse(60)
    assert await lanes.reap() == 1
    assert await gactive(conf) == {}
    job = await lanes.claim()
    assert job is not None
    assert (job.id, job.token) == (job_id, 2)
    assert await lanes.retry(job.id, job.token, delay_ms=10, max_attempts=5, error="x") == (
        "scheduled"
    )
    await lapse(30)
    assert (await conf.queue.promote(10)).promoted == 1
    [mine] = await conf.claim(1)
    assert (mine.id, mine.token) == (job_id, 3)
    assert await lanes.complete(mine.id, mine.token) == "ok"
    assert await gactive(conf) == {}
    assert await ring(conf) == []


async def test_echomq_claims_skip_a_stale_ring_entry_ours_do_not(
    conf: Harness, lanes: EchoLanes
) -> None:
    """A ring entry whose lane is empty (another client emptied it) makes EchoMQ's claim answer
    empty with work waiting; ours drops it and serves the next lane in the same call."""
    await ours(conf, "b")
    await conf.client.lpush(conf.keys.prefix + "ring", "gone")
    assert await lanes.claim() is None
    await conf.client.lpush(conf.keys.prefix + "ring", "gone")
    assert [group_of(job.payload) for job in await conf.claim(1)] == ["b"]
    assert await ring(conf) == []


async def test_priorities_are_claimed_in_order_by_both_sides(conf: Harness, emq: EchoMQ) -> None:
    """Our prioritized jobs among EchoMQ's plain ones (score 0): EchoMQ's batch claim (lowest
    scores first) and ours take them in priority order, mint order within a priority."""
    urgent = [(await conf.producer.enqueue_raw(conf.queue.name, b"u", priority=-1)).job_id]
    plain = [conf.mint() for _ in range(2)]
    for job_id in plain:
        assert await emq.enqueue(job_id, b"p")
    late = [(await conf.producer.enqueue_raw(conf.queue.name, b"l", priority=5)).job_id]
    urgent.append((await conf.producer.enqueue_raw(conf.queue.name, b"u", priority=-1)).job_id)
    batch = await emq.claim_batch(3, 60_000)
    assert [job.id for job in batch] == [*urgent, plain[0]]
    [mine, last] = await conf.claim(5)
    assert [mine.id, last.id] == [plain[1], late[0]]


async def test_priorities_order_a_lane_for_echomq_claims_too(
    conf: Harness, lanes: EchoLanes
) -> None:
    for priority in (3, -3, 0):
        await conf.producer.enqueue_raw(
            conf.queue.name, str(priority).encode(), group="a", priority=priority
        )
    claimed = []
    while (job := await lanes.claim()) is not None:
        claimed.append(job.payload)
    assert claimed == [b"-3", b"0", b"3"]
