"""Partitioned queues on one server: the naming rule, where producers send jobs, and workers given
the logical name serving every partition, across a change of N, with nothing lost or stranded."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from redis.asyncio import Redis

from emq_worker import App, JobContext, JobSpec, Producer
from emq_worker.cli.main import main
from emq_worker.protocol.keys import QueueKeys, hash_slot, validate_queue_name
from emq_worker.protocol.lane_verbs import pause_lane
from emq_worker.protocol.partition_names import (
    key_partition,
    partition_name,
    partition_names,
    slot_range,
)
from emq_worker.protocol.partitions import holds_work, set_partitions
from emq_worker.protocol.replies import text
from emq_worker.runtime.partitioned import PartitionedWorker, RegistryWatch
from tests.support.running import worker_settings
from tests.support.wait import until


@pytest.mark.parametrize("n", [2, 3, 6, 16, 64])
def test_partition_i_of_n_lands_in_the_ith_of_n_equal_slot_ranges(n: int) -> None:
    names = partition_names("orders", n)
    assert len(set(names)) == n
    for index, name in enumerate(names):
        assert validate_queue_name(name) == name
        assert hash_slot(QueueKeys.of(name).pending) in slot_range(index, n)
    assert names == [partition_name("orders", i, n) for i in range(n)]  # deterministic


def test_the_vectors_in_the_protocol_page() -> None:
    names = partition_names("orders", 3)
    assert names == ["orders.p0of3-0", "orders.p1of3-1", "orders.p2of3-3"]
    assert [hash_slot(f"{{{name}}}") for name in names] == [3632, 7089, 13587]


def test_one_partition_is_the_queue_itself() -> None:
    assert partition_names("orders", 1) == ["orders"]


async def where(client: Redis, names: list[str]) -> dict[str, str]:
    """job id -> the partition whose pending set holds it."""
    found = {}
    for name in names:
        for member in await client.zrange(QueueKeys.of(name).pending, 0, -1):
            found[text(member)] = name
    return found


async def test_jobs_of_one_key_land_on_one_partition_and_unkeyed_jobs_spread(
    client: Redis, queue_name: str
) -> None:
    await set_partitions(client, queue_name, 4)
    producer = Producer(client)
    keys = [f"customer-{i}" for i in range(12)]
    specs = [JobSpec("noop", key=key) for key in keys for _ in range(5)]
    batch = await producer.enqueue_many(queue_name, specs)
    one_by_one = [await producer.enqueue(queue_name, "noop", key=key) for key in keys]
    unkeyed = [await producer.enqueue(queue_name, "noop") for _ in range(8)]

    found = await where(client, partition_names(queue_name, 4))
    assert len(found) == len(specs) + len(keys) + 8  # every job is in one of the partitions
    by_key: dict[str, set[str]] = {}
    for spec, enqueued in zip(specs, batch, strict=True):
        by_key.setdefault(str(spec.placement["key"]), set()).add(found[enqueued.job_id])
    for key, enqueued in zip(keys, one_by_one, strict=True):
        by_key[key].add(found[enqueued.job_id])
    assert all(len(partitions) == 1 for partitions in by_key.values()), by_key
    assert len({next(iter(p)) for p in by_key.values()}) > 1  # 12 keys do not all share one
    spread = Counter(found[enqueued.job_id] for enqueued in unkeyed)
    assert sorted(spread.values()) == [2, 2, 2, 2]  # round-robin


async def test_a_dedup_id_holds_across_the_logical_queue(client: Redis, queue_name: str) -> None:
    await set_partitions(client, queue_name, 5)
    producer = Producer(client)
    first = await producer.enqueue(queue_name, "noop", dedup_id="order-17")
    again = [await producer.enqueue(queue_name, "noop", dedup_id="order-17") for _ in range(5)]
    assert not first.duplicate
    assert all(e.duplicate and e.job_id == first.job_id for e in again)


@pytest.mark.parametrize(("was", "now"), [(3, 6), (6, 2)])
async def test_changing_n_mid_drain_loses_and_strands_nothing(
    client: Redis, redis_url: str, queue_name: str, was: int, now: int
) -> None:
    """Growing: new jobs spread over more partitions; shrinking: the retired ones drain first.
    Either way every job runs once, and the old generation retires once it is empty."""
    await set_partitions(client, queue_name, was)
    app = App()
    ran: Counter[str] = Counter()
    ran_on: set[str] = set()

    @app.task
    async def work(ctx: JobContext) -> None:
        ran[ctx.job_id] += 1
        ran_on.add(ctx.queue)
        await anyio.sleep(0.01)  # 300 jobs 4 at a time: 0.75 s at the least

    producer = Producer(client)
    before = await producer.enqueue_many(queue_name, [JobSpec("work") for _ in range(300)])
    settings = worker_settings(queue_name, redis_url, concurrency=4)
    worker = PartitionedWorker(
        settings, app, watch=RegistryWatch(0.1, plain_every_s=0.1, retire_after_ms=300)
    )
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        with anyio.fail_after(10):
            await worker.ready.wait()
        await until(lambda: len(ran) >= 30, what="the drain to begin")
        assert len(ran) < 300  # mid-drain
        await set_partitions(client, queue_name, now)
        # a producer that reads the registry after the change (a running one does within 1 s)
        fresh = Producer(client)
        after = await fresh.enqueue_many(queue_name, [JobSpec("work") for _ in range(300)])
        ids = {e.job_id for e in [*before, *after]}
        await until(lambda: set(ran) == ids, within=60, what="every job to run")
        retired = [*partition_names(queue_name, now), queue_name]
        await until(lambda: worker.served == tuple(retired), what="the old to retire")
        worker.request_stop()
    assert max(ran.values()) == 1  # every job once
    old = partition_names(queue_name, was)
    new = partition_names(queue_name, now)
    assert not any([await holds_work(client, name) for name in [*old, *new]])
    assert ran_on == {*old, *new}  # the 300 enqueued after the change spread over the new


async def test_a_result_is_waited_for_through_the_logical_name(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    await set_partitions(client, queue_name, 3)
    app = App()

    @app.task(result_ttl_ms=60_000)
    async def double(ctx: JobContext, n: int) -> int:
        return 2 * n

    producer = Producer(client)
    jobs = [await producer.enqueue(queue_name, "double", {"n": n}) for n in range(3)]
    worker = PartitionedWorker(worker_settings(queue_name, redis_url), app)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        results = [await producer.result(job.job_id, queue=queue_name) for job in jobs]
        worker.request_stop()
    assert results == [0, 2, 4]


async def test_stats_on_the_logical_name_lists_every_partition_served(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    await set_partitions(client, queue_name, 2)
    await Producer(client).enqueue_many(queue_name, [JobSpec("noop") for _ in range(4)])
    await set_partitions(client, queue_name, 3)
    args = ["stats", "-q", queue_name, "--json", "--redis-url", redis_url]
    shown = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(main, args))
    assert shown.exit_code == 0, shown.output
    rows = {row["queue"]: row["pending"] for row in json.loads(shown.output)["queues"]}
    served = [*partition_names(queue_name, 3), *partition_names(queue_name, 2), queue_name]
    assert list(rows) == served
    assert sum(rows.values()) == 4


async def test_the_cli_enqueues_a_keyed_job_to_its_keys_partition(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    await set_partitions(client, queue_name, 4)
    args = ["enqueue", "-q", queue_name, "--key", "customer-9", "noop", "--redis-url", redis_url]
    sent = [await anyio.to_thread.run_sync(lambda: CliRunner().invoke(main, args)) for _ in "ab"]
    assert [result.exit_code for result in sent] == [0, 0], sent[0].output
    found = await where(client, partition_names(queue_name, 4))
    wanted = partition_name(queue_name, key_partition("customer-9", 4), 4)
    assert [found[result.output.strip()] for result in sent] == [wanted, wanted]


async def test_pause_and_resume_on_the_logical_name_reach_every_partition(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    await set_partitions(client, queue_name, 3)
    served = [*partition_names(queue_name, 3), queue_name]

    async def paused() -> list[bool]:
        return [bool(await client.hexists(QueueKeys.of(n).meta, "paused")) for n in served]

    for verb, expected in (("pause", True), ("resume", False)):
        args = [verb, queue_name, "--redis-url", redis_url]
        done = await anyio.to_thread.run_sync(CliRunner().invoke, main, args)
        assert done.exit_code == 0, done.output
        assert "(4 queues served under that name)" in done.output
        assert await paused() == [expected] * 4


async def test_the_partitions_command_sets_n_and_lists_every_generation_served(
    redis_url: str, queue_name: str
) -> None:
    async def run(*args: str) -> dict[str, Any]:
        line = ["partitions", queue_name, *args, "--json", "--redis-url", redis_url]
        done = await anyio.to_thread.run_sync(CliRunner().invoke, main, line)
        assert done.exit_code == 0, done.output
        view: dict[str, Any] = json.loads(done.output)
        return view

    assert [row["partition"] for row in (await run())["served"]] == [queue_name]
    await run("2")
    shown = await run("3")
    assert shown["partitions"] == 3
    rows = [(row["partition"], row["generation"], row["current"]) for row in shown["served"]]
    assert rows == [
        *[(name, 3, True) for name in partition_names(queue_name, 3)],
        *[(name, 2, False) for name in partition_names(queue_name, 2)],
        (queue_name, 1, False),
    ]
    assert [row["slot"] for row in shown["served"][:3]] == [
        hash_slot(f"{{{name}}}") for name in partition_names(queue_name, 3)
    ]


async def test_a_partition_whose_only_jobs_wait_in_a_paused_lane_still_holds_work(
    client: Redis, queue_name: str
) -> None:
    """Else its generation would retire with those jobs in it, and no worker would serve them."""
    producer = Producer(client)
    await producer.enqueue(queue_name, "noop", group="tenant-1")
    assert await holds_work(client, queue_name)
    await pause_lane(producer.queue(queue_name), "tenant-1")
    assert not await client.llen(QueueKeys.of(queue_name).prefix + "ring")  # out of the ring
    assert await holds_work(client, queue_name)
