"""Quiet and stop one live worker through the keyspace (`emq-worker quiet|stop WORKER_ID`), with
real `emq-worker run` processes: a quiet worker claims nothing new and finishes what it holds; a
stopped one hands its leases back and exits 0, its jobs run by another worker. A worker holding
jobs hears a request within a beat; an idle one at its next presence refresh."""

from __future__ import annotations

import time

import anyio
from redis.asyncio import Redis

from emq_worker import App, Producer
from emq_worker.admin import worker_control
from emq_worker.protocol.keys import QueueKeys, worker_ask_key, worker_entry_key
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.presence import Presence, WorkerRegistry, live_workers
from tests.support.commands import parked
from tests.support.processes import EMQ_WORKER, WorkerProcess, WorkerProcesses
from tests.support.running import holding_worker, running_worker, worker_settings
from tests.support.wait import eventually, until

LEASE_MS = 5_000
BEAT_MS = 200
GRACE_MS = 60_000
"""Far longer than the test waits: a stop that waited for the grace period would fail it."""
HONOURED_S = 10.0
"""A presence refresh (3.3 s here), plus slack for a loaded machine (the same bound for every
wait on the worker)."""


def start(workers: WorkerProcesses, name: str, queue: str, url: str) -> WorkerProcess:
    extra = ["--concurrency", "2", "--grace-ms", str(GRACE_MS)]
    return workers.start(
        name, queue=queue, redis_url=url, lease_ms=LEASE_MS, beat_ms=BEAT_MS, extra=extra
    )


async def worker_entry(client: Redis, queue: str, process: WorkerProcess) -> dict[str, object]:
    """The live presence entry of `process` on `queue`."""

    async def probe() -> dict[str, object] | None:
        found = [w for w in await live_workers(client, queue) if w.get("pid") == process.pid]
        return found[0] if found else None

    entry = await eventually(probe, timeout=HONOURED_S, what=f"{process.name}'s entry")
    assert entry is not None
    return entry


async def ask(redis_url: str, verb: str, worker_id: str) -> str:
    done = await anyio.run_process(
        [str(EMQ_WORKER), verb, worker_id, "--redis-url", redis_url], check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def test_a_quiet_worker_finishes_its_job_and_claims_nothing_new(
    client: Redis, redis_url: str, queue_name: str, worker_processes: WorkerProcesses
) -> None:
    workers = worker_processes
    producer = Producer(client)
    quiet = start(workers, "quiet", queue_name, redis_url)
    held = (await producer.enqueue(queue_name, "sleep", {"ms": 1_500})).job_id
    await workers.ledger.wait_for("start", held, pid=quiet.pid, within_s=HONOURED_S)
    entry = await worker_entry(client, queue_name, quiet)

    said = await ask(redis_url, "quiet", str(entry["id"]))
    assert "claims nothing new" in said
    await quiet.wait_event("operator_asked", control="quiet", within_s=HONOURED_S)
    # It has a free slot and a wake token would reach it: still it leaves this job alone.
    later = (await producer.enqueue(queue_name, "noop", {})).job_id
    await workers.ledger.wait_for("done", held, pid=quiet.pid, within_s=HONOURED_S)
    other = start(workers, "other", queue_name, redis_url)
    ran = await workers.ledger.wait_for("start", later, within_s=HONOURED_S)
    assert ran.pid == other.pid, workers.ledger.entries()
    assert quiet.returncode is None  # quiet is not stopped: it stays, claiming nothing
    entry = await worker_entry(client, queue_name, quiet)

    async def says_quiet() -> bool:
        return (await worker_entry(client, queue_name, quiet)).get("control") == "quiet"

    await eventually(says_quiet, timeout=HONOURED_S, what="its entry to say it is quiet")


async def test_a_stopped_worker_hands_its_lease_back_and_exits_0(
    client: Redis, redis_url: str, queue_name: str, worker_processes: WorkerProcesses
) -> None:
    workers = worker_processes
    producer = Producer(client)
    queue = Queue(client, Scripts(), queue_name)
    stopped = start(workers, "stopped", queue_name, redis_url)
    long = (await producer.enqueue(queue_name, "sleep", {"ms": 100, "first_ms": 600_000})).job_id
    await workers.ledger.wait_for("start", long, pid=stopped.pid, within_s=HONOURED_S)
    entry = await worker_entry(client, queue_name, stopped)

    asked = time.monotonic()
    await ask(redis_url, "stop", str(entry["id"]))
    assert await stopped.wait_exit(HONOURED_S) == 0
    took_s = time.monotonic() - asked
    released = await stopped.wait_event("leases_released", queue=queue_name)
    assert released["released"] == 1
    assert await queue.state_of(JobId(long)) == "pending"
    assert took_s < GRACE_MS / 1000
    assert not await live_workers(client, queue_name)  # it left the workers list

    other = start(workers, "other", queue_name, redis_url)
    ran = await workers.ledger.wait_for("start", long, pid=other.pid, within_s=HONOURED_S)
    assert ran.pid == other.pid


async def test_asking_an_unknown_worker_fails_naming_it(redis_url: str) -> None:
    done = await anyio.run_process(
        [str(EMQ_WORKER), "stop", "nohost:1:abcd", "--redis-url", redis_url], check=False
    )
    assert done.returncode == 1
    assert "no live worker 'nohost:1:abcd'" in done.stderr.decode()


async def test_a_worker_with_entries_per_queue_reads_the_request_where_it_is_written(
    client: Redis, queue_name: str
) -> None:
    """An ACL without the `{emq}:` keys: the worker writes an entry per queue, the request is
    written into each, and the worker's next refresh reads it back."""
    queues = [queue_name, queue_name + ".b"]
    registry = WorkerRegistry(client, queues, concurrency=1, beat_ms=BEAT_MS)
    registry.per_queue = True
    await registry.beat(Presence(0, 0))

    async def found() -> list[str]:
        return queues

    key = await worker_control.ask_worker(client, registry.id, "quiet", found)
    assert key == QueueKeys.of(queue_name).worker(registry.id)
    assert await registry.beat(Presence(0, 0)) == "quiet"
    assert await registry.beat(Presence(0, 0)) == ""  # heard once: the refresh replaced it
    assert not await client.exists(worker_entry_key(registry.id))


HEARD_S = 2.0
"""Far below the presence refresh's 3.3 s, which a request made just after a refresh would wait
out if only the refresh read it; far above a 100 ms beat, for a loaded machine."""


async def test_a_worker_holding_jobs_hears_a_stop_within_a_beat_not_at_its_next_refresh(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    settings = worker_settings(queue_name, redis_url, beat_ms=100, lease_ms=30_000)
    async with holding_worker(settings) as (worker, _):
        await Producer(client).enqueue(queue_name, "hold")

        async def holding() -> dict[str, object] | None:
            found = await live_workers(client, queue_name)
            return found[0] if found and found[0].get("held") == 1 else None

        entry = await eventually(holding, what="the worker's entry to say it holds the job")
        assert entry is not None

        async def refreshed() -> bool:  # just after a refresh: the next is 3.3 s away
            again = await live_workers(client, queue_name)
            return bool(again) and again[0].get("beat") != entry["beat"]

        await eventually(refreshed, what="the worker's next presence refresh")
        asked = time.monotonic()
        await worker_control.ask_worker(client, str(entry["id"]), "stop", no_queues)
        await until(lambda: worker.stop.requested, what="the stop to be heard", within=HEARD_S)
        assert time.monotonic() - asked < HEARD_S


async def no_queues() -> list[str]:
    return []


async def test_an_idle_worker_hears_a_stop_at_once_not_at_its_next_refresh(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """An idle worker refreshes its entry every 10 s (a third of its idle TTL), when a park ends:
    the operator's token on `{emq}:worker:<id>:ask`, which its park watches, ends the park, and
    the refresh that reads the request back comes at once."""
    settings = worker_settings(queue_name, redis_url, beat_ms=100, lease_ms=30_000)
    async with running_worker(settings, App()) as worker:
        entry = await eventually(lambda: first_entry(client, queue_name), what="its entry")
        assert entry is not None

        async def refreshed() -> bool:  # just after a refresh: the next is 10 s or more away
            again = await first_entry(client, queue_name)
            return again is not None and again.get("beat") != entry["beat"]

        # An idle refresh comes at the end of the first park 10 s after the last: within 18 s.
        await eventually(refreshed, timeout=30, what="the worker's next presence refresh")
        await parked(client)
        asked = time.monotonic()
        await worker_control.ask_worker(client, str(entry["id"]), "stop", no_queues)
        await until(lambda: worker.stop.requested, what="the stop to be heard", within=HEARD_S)
        assert time.monotonic() - asked < HEARD_S
    assert not await client.exists(worker_ask_key(str(entry["id"])))  # it left no token


async def first_entry(client: Redis, queue: str) -> dict[str, object] | None:
    found = await live_workers(client, queue)
    return found[0] if found else None
