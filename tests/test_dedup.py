"""Deduplication: `dedup_id` parks `de:<did>` with the job in one script; a second enqueue under
the same key returns the first job's id until the completion window after the job completed
ends (test_completion_tombstone.py), the job is removed, or the TTL lapses. Caller-chosen job
ids are idempotent on their own (EchoMQ's duplicate verdict)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.errors import ConfigError
from emq_worker.jobs.producer import JobSpec
from tests.support.conformance import RECEIPT_MS, Harness, held
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


async def test_a_second_enqueue_with_the_same_dedup_id_returns_the_first_job(
    conf: Harness,
) -> None:
    producer, name = conf.producer, conf.queue.name
    first = await producer.enqueue(name, "charge", {"order": 1}, dedup_id="order-42")
    second = await producer.enqueue(name, "charge", {"order": 2}, dedup_id="order-42")
    assert not first.duplicate
    assert second.duplicate
    assert second.job_id == first.job_id
    assert (await conf.queue.counts()).pending == 1
    # The wire: de:<did> holds the job id (EchoMQ's get_deduplication_job_id reads it).
    assert await conf.client.get(conf.keys.prefix + "de:order-42") == first.job_id.encode()
    assert b'"order":1' in (await conf.field(first.job_id, "payload") or b"")


async def test_completion_without_a_window_releases_the_dedup_key(conf: Harness) -> None:
    producer, name = conf.producer, conf.queue.name
    first = await producer.enqueue(name, "charge", dedup_id="order-42")
    job = await conf.claim_one()
    assert job.id == first.job_id
    assert (await conf.queue.complete(held(job), RECEIPT_MS, completed_ttl_ms=0)).status == "ok"
    assert not await conf.exists(conf.keys.prefix + "de:order-42")
    again = await producer.enqueue(name, "charge", dedup_id="order-42")
    assert not again.duplicate
    assert again.job_id != first.job_id


async def test_remove_releases_the_dedup_key_from_the_row(conf: Harness) -> None:
    producer, name = conf.producer, conf.queue.name
    first = await producer.enqueue(name, "charge", dedup_id="order-42")
    assert await conf.queue.remove(first.job_id) is True  # no did given: the row names it
    assert not await conf.exists(conf.keys.prefix + "de:order-42")
    assert not (await producer.enqueue(name, "charge", dedup_id="order-42")).duplicate


async def test_a_retried_or_dead_job_keeps_its_key(conf: Harness) -> None:
    producer, name = conf.producer, conf.queue.name
    first = await producer.enqueue(name, "charge", dedup_id="once")
    job = await conf.claim_one()
    result = await conf.queue.fail(held(job), RECEIPT_MS, delay_ms=0, max_attempts=0, error="boom")
    assert result.detail == "dead"
    again = await producer.enqueue(name, "charge", dedup_id="once")
    assert again == (first.job_id, True)


async def test_the_ttl_releases_the_key_while_the_job_still_lives(conf: Harness) -> None:
    producer, name = conf.producer, conf.queue.name
    first = await producer.enqueue(name, "charge", dedup_id="brief", dedup_ttl_ms=50)
    ttl = await conf.client.pttl(conf.keys.prefix + "de:brief")
    assert 0 < ttl <= 50

    async def released() -> bool:
        return not await conf.exists(conf.keys.prefix + "de:brief")

    await eventually(released, what="the dedup key to expire")
    again = await producer.enqueue(name, "charge", dedup_id="brief")
    assert not again.duplicate
    assert again.job_id != first.job_id
    assert (await conf.queue.counts()).pending == 2


async def test_a_key_naming_a_vanished_job_is_taken_over(conf: Harness) -> None:
    """A leaked `de:` key (an Elixir drain, a raw DEL of the row) does not block new work."""
    key = conf.keys.prefix + "de:leaked"
    await conf.client.set(key, conf.mint())
    enqueued = await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="leaked")
    assert not enqueued.duplicate
    assert await conf.client.get(key) == enqueued.job_id.encode()


async def test_one_batch_dedups_within_itself_in_one_call(conf: Harness) -> None:
    specs = [
        JobSpec("charge", {"n": 1}, dedup_id="a"),
        JobSpec("charge", {"n": 2}, dedup_id="a"),
        JobSpec("charge", {"n": 3}),
        JobSpec("charge", {"n": 4}, dedup_id="b"),
    ]
    results = await conf.producer.enqueue_many(conf.queue.name, specs)
    assert [r.duplicate for r in results] == [False, True, False, False]
    assert results[1].job_id == results[0].job_id
    assert len({r.job_id for r in results}) == 3
    assert (await conf.queue.counts()).pending == 3


async def test_a_dedup_row_has_the_dedup_field_and_a_plain_row_stays_three_fields(
    conf: Harness,
) -> None:
    deduped = await conf.producer.enqueue_raw(conf.queue.name, b"x", dedup_id="k")
    plain = await conf.producer.enqueue_raw(conf.queue.name, b"y")
    assert (await conf.row(deduped.job_id))[b"dedup"] == b"k"
    assert set(await conf.row(plain.job_id)) == {b"state", b"attempts", b"payload"}


async def test_a_caller_chosen_id_is_idempotent(conf: Harness) -> None:
    chosen = conf.mint()
    first = await conf.producer.enqueue(conf.queue.name, "charge", {"v": 1}, job_id=chosen)
    second = await conf.producer.enqueue(conf.queue.name, "charge", {"v": 2}, job_id=chosen)
    assert (first.duplicate, second.duplicate) == (False, True)
    assert second.job_id == first.job_id == chosen
    assert b'"v":1' in (await conf.field(chosen, "payload") or b"")


async def test_a_caller_chosen_id_and_a_dedup_id_together(conf: Harness) -> None:
    chosen = conf.mint()
    first = await conf.producer.enqueue(conf.queue.name, "charge", dedup_id="k")
    again = await conf.producer.enqueue(conf.queue.name, "charge", job_id=chosen, dedup_id="k")
    assert again == (first.job_id, True)
    assert not await conf.exists(conf.keys.job(chosen))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dedup_id": ""}, "dedup_id must match"),
        ({"dedup_id": "has space"}, "dedup_id must match"),
        ({"dedup_id": "x" * 256}, "dedup_id must match"),
        ({"dedup_id": "k", "dedup_ttl_ms": 0}, "dedup_ttl_ms must be an integer >= 1"),
        ({"dedup_ttl_ms": 5}, "dedup_ttl_ms needs a dedup_id"),
    ],
)
async def test_bad_dedup_options_are_refused_naming_the_value(
    client: Redis, queue_name: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        await Producer(client).enqueue(queue_name, "charge", **options)  # type: ignore[arg-type]
    assert not await client.exists(f"emq:{{{queue_name}}}:pending")


async def test_a_worker_without_a_window_frees_the_key_at_completion_end_to_end(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    app = App()
    runs: list[int] = []

    @app.task
    async def charge(ctx: JobContext, n: int) -> None:
        runs.append(n)

    producer = Producer(client)
    first = await producer.enqueue(queue_name, "charge", {"n": 1}, dedup_id="once")
    assert (await producer.enqueue(queue_name, "charge", {"n": 2}, dedup_id="once")).duplicate
    settings = worker_settings(queue_name, redis_url, completed_ttl_ms=0)
    async with running_worker(settings, app) as worker:
        await eventually(lambda: _value(worker.counters.completed == 1), what="completion")
    assert runs == [1]
    assert not await client.exists(f"emq:{{{queue_name}}}:de:once")
    assert (await producer.enqueue(queue_name, "charge", {"n": 3}, dedup_id="once")).job_id != (
        first.job_id
    )


async def _value(value: bool) -> bool:
    return value
