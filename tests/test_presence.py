"""A worker's presence: every few beats it writes, in one entry for all its queues, who it is
(host, pid, version, concurrency, busy slots) and which jobs it holds where since when, and
indexes itself in `{emq}:workers`, so readers find it without a SCAN; a graceful stop takes it
off both. Entries per queue (earlier workers, or an ACL without `{emq}:` keys) are read too."""

from __future__ import annotations

import json

import anyio
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.protocol.keys import WORKERS_KEY, QueueKeys, worker_entry_key
from emq_worker.runtime.presence import (
    Entry,
    Presence,
    WorkerRegistry,
    live_workers,
    package_version,
    presence_entries,
)
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually, until


def holding_app(release: anyio.Event, started: list[str]) -> App:
    app = App()

    @app.task
    async def hold(ctx: JobContext, name: str) -> None:
        started.append(name)
        await release.wait()

    return app


async def test_the_entry_names_the_worker_and_the_jobs_it_holds_since_their_claim(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    release, started = anyio.Event(), list[str]()
    settings = worker_settings(queue_name, redis_url, concurrency=4, beat_ms=50)
    async with running_worker(settings, holding_app(release, started)) as worker:
        try:
            first = (await producer.enqueue(queue_name, "hold", {"name": "a"})).job_id
            await until(lambda: started == ["a"], what="the first job to start")
            second = (await producer.enqueue(queue_name, "hold", {"name": "b"})).job_id
            await until(lambda: len(started) == 2, what="the second job to start")

            async def both_listed() -> list[Entry]:
                entries = await presence_entries(client, [queue_name])
                return [e for e in entries if len(e.fields.get("jobs", [])) == 2]

            [entry] = await eventually(both_listed, what="an entry listing both jobs")
        finally:
            release.set()
        assert worker.presence is not None
        worker_id = worker.presence.id
        assert await client.zscore(WORKERS_KEY, worker_id) is not None
    fields = entry.fields
    assert fields["id"] == worker_id
    assert fields["version"] == package_version() != "unknown"
    assert (fields["concurrency"], fields["busy"], fields["held_here"]) == (4, 2, 2)
    assert (fields["lease_ms"], fields["ttl_ms"]) == (3_000, 10_000)
    [[id_a, attempt_a, age_a], [id_b, _, age_b]] = fields["jobs"]
    assert (id_a, id_b, attempt_a) == (first, second, 1)  # the longest held first
    assert age_a >= age_b >= 0
    assert 0 <= entry.age_ms < fields["ttl_ms"]
    # Stopped gracefully: off the index and its entry gone.
    assert await client.zscore(WORKERS_KEY, worker_id) is None
    assert await client.exists(worker_entry_key(worker_id)) == 0
    assert await live_workers(client, queue_name) == []


async def test_an_entry_without_an_index_is_still_found_by_a_bounded_scan(
    client: Redis, queue_name: str
) -> None:
    keys = QueueKeys.of(queue_name)
    entry = {"id": "old:1:beef", "host": "old", "pid": 1, "started": 1.0, "beat": 2.0}
    await client.set(keys.worker("old:1:beef"), json.dumps(entry), px=10_000)
    assert [w["id"] for w in await live_workers(client, queue_name)] == ["old:1:beef"]


async def test_one_entry_per_worker_whatever_the_number_of_queues(
    client: Redis, queue_name: str
) -> None:
    """Refreshing presence costs the same few commands for 1 queue or 100: it used to cost four
    per queue, most of an idle worker's traffic."""
    queues = [f"{queue_name}-{n}" for n in range(100)]
    registry = WorkerRegistry(client, queues, concurrency=10, beat_ms=1_000)
    try:
        await registry.beat(Presence(held=0, completed=0))
        found = await presence_entries(client, queues)
        assert {entry.queue for entry in found if entry.fields["id"] == registry.id} == set(queues)
        assert not await client.exists(*(QueueKeys.of(name).worker(registry.id) for name in queues))
    finally:
        await registry.leave()
    assert [
        e for e in await presence_entries(client, queues) if e.fields["id"] == registry.id
    ] == []


async def test_entries_per_queue_of_earlier_workers_are_still_read(
    client: Redis, queue_name: str
) -> None:
    keys = QueueKeys.of(queue_name)
    entry = {"id": "old:2:cafe", "queues": [queue_name], "started": 1.0, "held_here": 3}
    await client.set(keys.worker("old:2:cafe"), json.dumps(entry), px=10_000)
    await client.zadd(keys.workers, {"old:2:cafe": 1})
    [found] = await live_workers(client, queue_name)
    assert (found["id"], found["held_here"]) == ("old:2:cafe", 3)


async def test_an_acl_without_the_workers_keys_announces_on_each_queue_instead(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """An ACL line of an earlier release grants the queue's keys but not `{emq}:worker:*`: the
    worker is still seen, through an entry on the queue."""
    user, password = f"presence-{queue_name}", "presence-secret"
    await client.acl_setuser(
        user,
        enabled=True,
        passwords=[f"+{password}"],
        keys=[f"emq:{{{queue_name}}}:*"],
        commands=["+@all"],
    )
    limited = Redis.from_url(redis_url.replace("redis://", f"redis://{user}:{password}@"))
    try:
        registry = WorkerRegistry(limited, [queue_name], concurrency=1, beat_ms=1_000)
        await registry.beat(Presence(held=0, completed=0))
        assert registry.per_queue
        assert [w["id"] for w in await live_workers(client, queue_name)] == [registry.id]
        await registry.leave()
        assert await live_workers(client, queue_name) == []
    finally:
        await limited.aclose()
        await client.acl_deluser(user)
