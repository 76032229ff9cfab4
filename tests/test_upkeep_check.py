"""The upkeep check (lua/upkeep.lua) on hand-built state: what it finds due, and the fleet's note
(`upkeep`) that vouches for a quiet queue; and the stale wake tokens a woken claim clears
(lua/claim.lua, ARGV[10])."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from emq_worker.protocol.upkeep_check import UpkeepDue, check_upkeep
from tests.support.conformance import Harness

WINDOW_MS = 5_000
REAP_BATCH, MAX_ATTEMPTS = 100, 5


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


async def check(conf: Harness, *, force: bool = False) -> UpkeepDue:
    return await check_upkeep(conf.queue, WINDOW_MS, REAP_BATCH, MAX_ATTEMPTS, force=force)


async def server_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_a_quiet_queue_is_vouched_for_one_window_and_then_held(conf: Harness) -> None:
    assert await check(conf) == UpkeepDue()
    note_ms = await conf.client.pttl(conf.keys.upkeep)
    assert 0 < note_ms <= WINDOW_MS
    held = await check(conf)
    assert held.held_ms is not None
    assert 0 < held.held_ms <= WINDOW_MS
    assert held.quiet


async def test_a_held_answer_says_whether_any_lease_exists(conf: Harness) -> None:
    """No lease: the worker may look again as late as a lease taken from now on allows
    (agenda.quiet_budget_s); a lease: a beat after the note lapses, as a dead holder's lease must
    be reaped on time."""
    await check(conf)
    assert not (await check(conf)).leased
    await conf.client.delete(conf.keys.upkeep)
    await conf.enqueue(b"a")
    await conf.claim(1, lease_ms=60_000)
    assert (await check(conf)).held_ms is None  # the check over the lease leaves its own note
    held = await check(conf)
    assert held.held_ms is not None
    assert held.leased


async def test_a_burst_check_looks_for_itself_while_the_note_stands(conf: Harness) -> None:
    await check(conf)
    assert (await check(conf, force=True)).held_ms is None


async def test_a_lease_about_to_lapse_shortens_the_note_to_its_deadline(conf: Harness) -> None:
    await conf.enqueue(b"a")
    await conf.claim(1, lease_ms=800)
    due = await check(conf)
    assert due.reap_in is not None
    assert 0 < due.reap_in <= 800
    assert 0 < await conf.client.pttl(conf.keys.upkeep) <= 800


async def test_a_lapsed_lease_is_reaped_by_the_check_itself_and_leaves_no_note(
    conf: Harness,
) -> None:
    """The check reaps in the same call: after a stall, the check queued during it runs first
    and reaps before the holders' renewals, queued later, can extend the lapsed leases."""
    job = await conf.enqueue(b"a")
    await conf.claim(1)
    await conf.client.zadd(conf.keys.active, {job: 0}, xx=True)  # its deadline has passed
    due = await check(conf)
    assert (due.reaped.returned, due.reaped.jobs) == (1, ((job, "pending"),))
    assert (due.reap_in, due.pending) == (None, 1)
    assert not due.quiet
    assert await conf.score(conf.keys.pending, job) == 0.0
    assert not await conf.exists(conf.keys.upkeep)


async def test_a_full_reap_batch_says_more_leases_are_due(conf: Harness) -> None:
    jobs = await conf.enqueue_many(3)
    await conf.claim(3)
    await conf.client.zadd(conf.keys.active, dict.fromkeys(jobs, 0), xx=True)
    due = await check_upkeep(conf.queue, WINDOW_MS, 2, MAX_ATTEMPTS)
    assert due.reaped.returned == 2
    assert due.reaped.more
    assert due.reap_in == 0


async def test_a_pending_job_is_reported_and_leaves_no_note(conf: Harness) -> None:
    await conf.enqueue(b"a")
    due = await check(conf)
    assert due.pending == 1
    assert not due.quiet
    assert not await conf.exists(conf.keys.upkeep)


async def test_scheduled_jobs_and_repeats_report_their_due_times(conf: Harness) -> None:
    now = await server_ms(conf.client)
    await conf.client.zadd(conf.keys.schedule, {"JOB-later": now + 2_000})
    repeats = conf.keys.prefix + "repeat"
    await conf.client.zadd(repeats, {"paused": float("inf"), "hourly": now + 3_000})
    due = await check(conf)
    note_ms = await conf.client.pttl(conf.keys.upkeep)
    checked = await server_ms(conf.client) - now  # the check ran this many ms after `now`, at most
    assert due.promote_in is not None
    assert 2_000 - checked <= due.promote_in <= 2_000
    assert due.repeat_in is not None
    assert due.repeat_in - due.promote_in == 1_000  # the same server clock read for both
    assert due.reap_in is None
    # The note lasts until the scheduled job falls due (the earliest of the two), not the window.
    assert due.promote_in - checked <= note_ms <= due.promote_in


async def test_a_paused_repeat_alone_is_never_due(conf: Harness) -> None:
    await conf.client.zadd(conf.keys.prefix + "repeat", {"paused": float("inf")})
    assert (await check(conf)).repeat_in is None


# ---- a woken claim clears stale wake tokens --------------------------------------------------


async def tokens(conf: Harness, n: int) -> None:
    await conf.client.lpush(conf.keys.wake, *["1"] * n)


async def test_a_woken_claim_that_finds_pending_empty_deletes_the_stale_tokens(
    conf: Harness,
) -> None:
    await tokens(conf, 64)
    result = await conf.queue.claim(10, 30_000, clear_wake=True)
    assert result.jobs == ()
    assert await conf.client.llen(conf.keys.wake) == 0


async def test_tokens_stay_when_the_claim_was_not_woken_or_found_jobs(conf: Harness) -> None:
    await tokens(conf, 3)
    await conf.queue.claim(10, 30_000)
    assert await conf.client.llen(conf.keys.wake) == 3
    await conf.enqueue(b"a")
    assert len((await conf.queue.claim(10, 30_000, clear_wake=True)).jobs) == 1
    assert await conf.client.llen(conf.keys.wake) == 4
