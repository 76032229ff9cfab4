"""A worker's presence: every beat it writes, per queue, who it is (host, pid, version,
concurrency, busy slots) and which jobs it holds since when, and indexes itself in
`emq:{q}:workers`, so readers find it without a SCAN; a graceful stop takes it off both."""

from __future__ import annotations

import json

import anyio
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.beat.presence import Entry, live_workers, package_version, presence_entries
from emq_worker.protocol.keys import QueueKeys
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
    keys = QueueKeys.of(queue_name)
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
        assert await client.zscore(keys.workers, worker_id) is not None
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
    assert await client.zscore(keys.workers, worker_id) is None
    assert await client.exists(keys.worker(worker_id)) == 0
    assert await live_workers(client, queue_name) == []


async def test_an_entry_without_an_index_is_still_found_by_a_bounded_scan(
    client: Redis, queue_name: str
) -> None:
    keys = QueueKeys.of(queue_name)
    entry = {"id": "old:1:beef", "host": "old", "pid": 1, "started": 1.0, "beat": 2.0}
    await client.set(keys.worker("old:1:beef"), json.dumps(entry), px=10_000)
    assert [w["id"] for w in await live_workers(client, queue_name)] == ["old:1:beef"]
