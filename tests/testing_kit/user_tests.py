"""A user's tests with the plugin enabled (`pytest -p emq_worker.testing`): the project's
tests/test_testing_kit.py runs them as test_shop.py in a project of their own."""

from __future__ import annotations

import pytest
import shop

from emq_worker.testing import Emq, NotIdleError


async def test_a_charge_completes_with_its_result(emq: Emq, queue: str) -> None:
    async with emq.producer() as producer:
        job = await shop.charge.with_options(queue=queue).enqueue(producer, "A1", amount=1200)
        counters = await emq.run_until_idle(shop.app, queue)
        assert await job.result(timeout_s=1) == {"A1": 1200}
    assert counters.completed == 1
    await emq.assert_completed(queue, job.job_id, attempts=1)


async def test_a_declined_charge_is_dead_with_its_error(emq: Emq, queue: str) -> None:
    async with emq.producer() as producer:
        job = await shop.charge.with_options(queue=queue, max_attempts=2).enqueue(
            producer, "A2", amount=-5
        )
    await emq.run_until_idle(shop.app, queue)
    await emq.assert_dead(queue, job.job_id, error=r"ValueError.*declined: amount -5", attempts=2)
    with pytest.raises(AssertionError, match=r"is dead after 2 attempts .*declined.*not completed"):
        await emq.assert_completed(queue, job.job_id)


async def test_retries_and_delays_are_fast_forwarded(emq: Emq, queue: str) -> None:
    async with emq.producer() as producer:
        retried = await shop.flaky.with_options(queue=queue).enqueue(producer, fail_times=2)
        later = await shop.charge.with_options(queue=queue, delay_ms=3_600_000).enqueue(
            producer, "A3", amount=1
        )
    counters = await emq.run_until_idle(shop.app, queue)
    assert (counters.retried, counters.completed) == (2, 2)
    await emq.assert_completed(queue, retried.job_id, attempts=3)
    await emq.assert_completed(queue, later.job_id, attempts=1)


async def test_a_repeat_fires_on_demand(emq: Emq, queue: str) -> None:
    async with emq.producer() as producer:
        await producer.repeat(queue, "hourly", "tick", every_ms=3_600_000)
    before = len(shop.ticks)
    assert await emq.fire_repeats(queue) == 1
    await emq.run_until_idle(shop.app, queue)
    assert len(shop.ticks) == before + 1


async def test_a_delay_not_forwarded_is_not_idle_in_time(emq: Emq, queue: str) -> None:
    async with emq.producer() as producer:
        await shop.charge.with_options(queue=queue, delay_ms=3_600_000).enqueue(producer, "A4", 1)
    with pytest.raises(NotIdleError, match=r"not idle after 0.3 s: 0 pending, 0 held, 1 scheduled"):
        await emq.run_until_idle(shop.app, queue, forward=False, timeout_s=0.3)
    assert await emq.fast_forward(queue) == 1
    assert (await emq.outcome(queue, "JOB00000000000")).state == "absent"
