"""The completion tombstone: a caller-chosen job id, or a dedup id without a TTL, stays a
duplicate after its job completed, for the worker's completion window (`completed_ttl_ms`),
so re-sending an enqueue whose reply was lost never runs the job again."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer, WorkerSettings
from emq_worker.protocol.values import Completion
from tests.support.conformance import RECEIPT_MS, Harness, held
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually, until

DAY_MS = 86_400_000


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


def idem_key(conf: Harness, job_id: str) -> str:
    return f"{conf.keys.prefix}idem:{job_id}"


async def _run_to_completion(
    conf: Harness, job_id: str, completed_ttl_ms: int | None = None
) -> None:
    job = await conf.claim_one()
    assert job.id == job_id
    if completed_ttl_ms is None:
        result = await conf.complete(job)
    else:
        result = await conf.queue.complete(held(job), RECEIPT_MS, completed_ttl_ms=completed_ttl_ms)
    assert result.status == "ok", result


async def test_a_caller_chosen_id_stays_a_duplicate_after_it_completed(conf: Harness) -> None:
    chosen = conf.mint()
    first = await conf.producer.enqueue(conf.queue.name, "charge", {"v": 1}, job_id=chosen)
    await _run_to_completion(conf, chosen)
    again = await conf.producer.enqueue(conf.queue.name, "charge", {"v": 2}, job_id=chosen)
    assert (first.duplicate, again) == (False, (chosen, True))
    assert not await conf.exists(conf.keys.job(chosen))
    assert (await conf.queue.counts()).pending == 0
    # The tombstone is one small key with the worker's window as its TTL.
    assert await conf.client.get(idem_key(conf, chosen)) == b"completed"
    ttl = await conf.client.pttl(idem_key(conf, chosen))
    assert DAY_MS - 60_000 < ttl <= DAY_MS


async def test_a_caller_chosen_row_still_has_exactly_three_fields(conf: Harness) -> None:
    chosen = conf.mint()
    await conf.producer.enqueue_raw(conf.queue.name, b"x", job_id=chosen)
    assert set(await conf.row(chosen)) == {b"state", b"attempts", b"payload"}


async def test_a_dedup_id_without_ttl_stays_a_duplicate_after_its_job_completed(
    conf: Harness,
) -> None:
    producer, name = conf.producer, conf.queue.name
    first = await producer.enqueue(name, "charge", dedup_id="order-42")
    await _run_to_completion(conf, first.job_id)
    again = await producer.enqueue(name, "charge", dedup_id="order-42")
    assert again == (first.job_id, True)
    assert (await conf.queue.counts()).pending == 0
    ttl = await conf.client.pttl(conf.keys.prefix + "de:order-42")
    assert DAY_MS - 60_000 < ttl <= DAY_MS


async def test_a_dedup_ttl_shorter_than_the_window_still_caps_the_key(conf: Harness) -> None:
    producer, name = conf.producer, conf.queue.name
    first = await producer.enqueue(name, "charge", dedup_id="brief", dedup_ttl_ms=60_000)
    await _run_to_completion(conf, first.job_id)
    assert 0 < await conf.client.pttl(conf.keys.prefix + "de:brief") <= 60_000
    assert (await producer.enqueue(name, "charge", dedup_id="brief")) == (first.job_id, True)


async def test_the_window_ends_and_the_id_may_be_enqueued_again(conf: Harness) -> None:
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)
    await _run_to_completion(conf, chosen, completed_ttl_ms=50)

    async def lapsed() -> bool:
        return not await conf.exists(idem_key(conf, chosen))

    await eventually(lapsed, what="the completion tombstone to expire")
    again = await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)
    assert again == (chosen, False)


async def test_a_window_of_zero_leaves_no_tombstone(conf: Harness) -> None:
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen, dedup_id="z")
    await _run_to_completion(conf, chosen, completed_ttl_ms=0)
    assert not await conf.exists(idem_key(conf, chosen))
    assert not await conf.exists(conf.keys.prefix + "de:z")
    assert (await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)) == (
        chosen,
        False,
    )


async def test_a_minted_id_leaves_no_tombstone(conf: Harness) -> None:
    """Minted ids are never re-sent by a caller (a client re-send is answered by the call's
    memo), so they cost no key for the window."""
    minted = await conf.producer.enqueue(conf.queue.name, "charge")
    assert not await conf.exists(idem_key(conf, minted.job_id))
    await _run_to_completion(conf, minted.job_id)
    assert not await conf.exists(idem_key(conf, minted.job_id))


@pytest.mark.parametrize("with_result", [False, True])
async def test_a_chosen_id_settled_among_minted_ones_gets_its_tombstone(
    conf: Harness, with_result: bool
) -> None:
    """settle.lua looks for idem keys once per call, over all its completions: a chosen id in
    the middle of a batch (with or without a stored result) is found; the minted ids get none."""
    minted = [(await conf.producer.enqueue(conf.queue.name, "charge")).job_id for _ in range(2)]
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)
    minted.append((await conf.producer.enqueue(conf.queue.name, "charge")).job_id)
    jobs = await conf.claim(10)
    outcomes = [
        Completion(held(job), b"1", DAY_MS)
        if with_result and job.id == chosen
        else Completion(held(job))
        for job in jobs
    ]
    results = await conf.queue.settle(outcomes, RECEIPT_MS)
    assert [r.status for r in results] == ["ok"] * 4
    assert await conf.client.get(idem_key(conf, chosen)) == b"completed"
    assert [await conf.exists(idem_key(conf, job_id)) for job_id in minted] == [False] * 3


async def test_a_failed_or_dead_job_leaves_no_tombstone_and_stays_a_duplicate(
    conf: Harness,
) -> None:
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)
    job = await conf.claim_one()
    result = await conf.queue.fail(held(job), RECEIPT_MS, delay_ms=0, max_attempts=0, error="x")
    assert result.detail == "dead"
    assert await conf.client.get(idem_key(conf, chosen)) == b"live"
    assert (await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)).duplicate


async def test_remove_forgets_a_completed_job_so_its_id_may_run_again(conf: Harness) -> None:
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)
    await _run_to_completion(conf, chosen)
    assert await conf.queue.remove(chosen) is True
    assert not await conf.exists(idem_key(conf, chosen))
    assert await conf.queue.remove(chosen) is False  # nothing left at all: gone
    assert (await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)) == (
        chosen,
        False,
    )


async def test_remove_with_the_dedup_id_forgets_its_completed_job(conf: Harness) -> None:
    first = await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="d")
    await _run_to_completion(conf, first.job_id)
    assert await conf.queue.remove(first.job_id, "d") is True
    assert not await conf.exists(conf.keys.prefix + "de:d")
    assert await conf.queue.remove(first.job_id, "d") is False  # nothing left at all: gone
    again = await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="d")
    assert not again.duplicate
    assert again.job_id != first.job_id


async def test_remove_by_id_alone_frees_a_completed_jobs_dedup_id(conf: Harness) -> None:
    """The completion tombstone is `idem:<id>`: forgetting it frees the dedup id too (its key,
    still naming the job, is taken over by the next enqueue)."""
    first = await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="d")
    await _run_to_completion(conf, first.job_id)
    assert await conf.queue.remove(first.job_id) is True
    again = await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="d")
    assert not again.duplicate


async def test_remove_of_a_live_job_frees_its_id(conf: Harness) -> None:
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)
    assert await conf.queue.remove(chosen) is True
    assert not await conf.exists(idem_key(conf, chosen))
    assert (await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)) == (
        chosen,
        False,
    )


@pytest.mark.parametrize("dedup_ttl_ms", [None, 60_000])
async def test_a_dedup_key_whose_job_another_client_deleted_is_taken_over(
    conf: Harness, dedup_ttl_ms: int | None
) -> None:
    """Only a completion within the window (its `idem:<id>` tombstone) holds a dedup id once the
    job's row is gone: EchoMQ's complete, drain and obliterate delete rows without one."""
    first = await conf.producer.enqueue(
        conf.queue.name, "charge", dedup_id="t", dedup_ttl_ms=dedup_ttl_ms
    )
    await conf.client.delete(conf.keys.job(first.job_id))
    again = await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="t")
    assert not again.duplicate
    assert await conf.client.get(conf.keys.prefix + "de:t") == again.job_id.encode()


@pytest.mark.parametrize("delay_ms", [0, 3_600_000])
async def test_the_keys_that_mark_a_live_job_expire_by_themselves(
    conf: Harness, delay_ms: int
) -> None:
    """A dedup key given no TTL and a chosen id's live marker still expire (30 days past the
    job's due time), so no key outlives a queue that another client deleted by known names."""
    hold_ms = 30 * 24 * 3600 * 1000
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen, delay_ms=delay_ms)
    await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="h", delay_ms=delay_ms)
    for key in (idem_key(conf, chosen), conf.keys.prefix + "de:h"):
        left = await conf.client.pttl(key)
        assert hold_ms + delay_ms - 60_000 < left <= hold_ms + delay_ms, key


async def test_a_live_marker_whose_row_vanished_is_taken_over(conf: Harness) -> None:
    """An EchoMQ consumer completes by deleting the row only: the id is free again, as there."""
    chosen = conf.mint()
    await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)
    await conf.client.delete(conf.keys.job(chosen))
    assert (await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen)) == (
        chosen,
        False,
    )


async def test_a_worker_never_runs_a_completed_chosen_id_again_end_to_end(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """The issue's reproduction: enqueue --job-id X twice with a worker running."""
    app = App()
    runs: list[int] = []

    @app.task
    async def work(ctx: JobContext, seq: int) -> None:
        runs.append(seq)

    producer, conf = Producer(client), Harness.of(client, queue_name)
    chosen = conf.mint()
    settings = worker_settings(queue_name, redis_url, concurrency=1)
    async with running_worker(settings, app) as worker:
        assert not (await producer.enqueue(queue_name, "work", {"seq": 1}, job_id=chosen)).duplicate
        await until(lambda: worker.counters.completed == 1, what="the first completion")
        again = await producer.enqueue(queue_name, "work", {"seq": 2}, job_id=chosen)
        # A later job, minted after the chosen id: with one slot and mint order, a re-run of
        # the chosen id would have been claimed and finished before it.
        await producer.enqueue(queue_name, "work", {"seq": 3})
        await until(lambda: worker.counters.completed >= 2, what="the later job")
    assert again == (chosen, True)
    assert runs == [1, 3]
    assert (await conf.metric("completed"))[0] == 2


def test_the_window_defaults_to_a_day_and_zero_turns_it_off() -> None:
    assert WorkerSettings(queues=("q",)).completed_ttl_ms == DAY_MS
    assert WorkerSettings(queues=("q",), completed_ttl_ms=0).completed_ttl_ms == 0
