"""Fault tests on real `emq-worker run` processes: SIGKILL, SIGSTOP/SIGCONT, SIGTERM (once and
twice) and a version fence, against a real redis-server.

Every handler of `tests.apps.ledger` appends `start|done <job> <attempt> <pid>` to a shared
ledger, so a test can tell which process ran which attempt; Redis says which write was accepted.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import JobSpec, Producer
from emq_worker.protocol.keys import VERSION_KEY
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.values import Counts
from tests.support.processes import WorkerProcess, WorkerProcesses
from tests.support.server import RedisServer
from tests.support.wait import eventually

pytestmark = pytest.mark.fault

BEAT_MS = 100
SLACK_S = 1.5
EXIT_SOON_S = 2.0
LATE_SLACK_MS = 1_000
"""Scheduling slack on a loaded machine, past the beat a reap may wait for its check."""
HOLD_MS = 600_000
"""A first attempt held longer than any test waits: only its worker's death ends it."""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(tmp_path / "workers") as processes:
        yield processes


async def server_now_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def wait_completed(queue: Queue, job: JobId) -> Counts:
    """Wait until the job's row is gone and one completion is counted; return the counts."""

    async def settled() -> Counts | None:
        counts = await queue.counts()
        gone = await queue.get_job(job) is None
        return counts if gone and counts.completed >= 1 else None

    counts = await eventually(settled, timeout=5, what=f"{job} completed and its row deleted")
    assert counts is not None
    return counts


def where_jobs_are(counts: Counts) -> tuple[int, int, int, int, int]:
    """(pending, active, scheduled, dead, completed)."""
    return (counts.pending, counts.active, counts.scheduled, counts.dead, counts.completed)


async def test_a_sigkilled_holder_s_job_is_rerun_by_another_worker_within_a_lease_and_a_beat(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    lease_ms = 600
    queue = Producer(client).queue(queue_name)
    a, b, job = await held_by_a_beside_b(queue, redis_url, workers, lease_ms, BEAT_MS)

    a.send(signal.SIGKILL)
    killed_at = time.monotonic()
    rerun = await workers.ledger.wait_for("start", job, pid=b.pid, within_s=10)
    took = time.monotonic() - killed_at

    budget = (lease_ms + BEAT_MS) / 1000 + SLACK_S
    assert took <= budget, f"B started the job {took:.2f} s after the kill; budget {budget} s"
    assert rerun.attempt == 2
    assert await a.wait_exit(EXIT_SOON_S) == -signal.SIGKILL
    await b.wait_event("beat_reaped", queue=queue_name, returned=1)
    await workers.ledger.wait_for("done", job, attempt=2, pid=b.pid, within_s=5)
    counts = await wait_completed(queue, job)
    assert where_jobs_are(counts) == (0, 0, 0, 0, 1)
    assert workers.ledger.find("done", job, pid=a.pid) == [], "A finished before the kill"


async def test_a_dead_holder_s_lease_is_reaped_within_a_beat_of_its_deadline_by_a_held_worker(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    """The holder checks its queue every beat and leaves the fleet's note; the other worker's
    checks are answered `held`. A note made over a lease lapses at its deadline at the latest, and
    a held check is made again a beat after the note lapses, not a check window (ten beats here)
    after: the lease of a holder killed is reaped within a beat of its deadline."""
    lease_ms, beat_ms = 9_000, 250  # a check window of 2.5 s, under a third of the lease
    queue = Producer(client).queue(queue_name)
    a, b, job = await held_by_a_beside_b(queue, redis_url, workers, lease_ms, beat_ms)

    a.send(signal.SIGKILL)
    assert await a.wait_exit(EXIT_SOON_S) == -signal.SIGKILL
    deadline = await client.zscore(queue.keys.active, job)  # final: nobody renews it now
    assert deadline is not None

    async def rerun_at() -> int | None:
        attempts = await client.hget(queue.keys.job(job), "attempts")
        return await server_now_ms(client) if attempts == b"2" else None

    rerun = await eventually(rerun_at, timeout=lease_ms / 1000 + 10, what=f"{job} claimed again")
    assert rerun is not None
    late_ms = rerun - int(deadline)
    assert late_ms <= beat_ms + LATE_SLACK_MS, f"claimed again {late_ms} ms after its deadline"
    await workers.ledger.wait_for("done", job, attempt=2, pid=b.pid, within_s=5)


async def held_by_a_beside_b(
    queue: Queue, redis_url: str, workers: WorkerProcesses, lease_ms: int, beat_ms: int
) -> tuple[WorkerProcess, WorkerProcess, JobId]:
    """Worker A holds a job's first attempt until it dies (however slow the machine; a rerun
    takes 50 ms); B starts before the crash (A keeps renewing meanwhile), so its start-up is not
    on the clock. Returns A, B and the job."""
    name = queue.name
    a = workers.start("a", queue=name, redis_url=redis_url, lease_ms=lease_ms, beat_ms=beat_ms)
    await a.wait_event("worker_started")
    job = (
        await Producer(queue.client).enqueue(name, "sleep", {"ms": 50, "first_ms": HOLD_MS})
    ).job_id
    await workers.ledger.wait_for("start", job, attempt=1, pid=a.pid)
    b = workers.start("b", queue=name, redis_url=redis_url, lease_ms=lease_ms, beat_ms=beat_ms)
    await b.wait_event("worker_started")
    assert workers.ledger.find(job_id=job, pid=b.pid) == []
    await assert_held_by_its_first_claim(queue, job, workers)
    return a, b, job


async def assert_held_by_its_first_claim(
    queue: Queue, job: JobId, workers: WorkerProcesses
) -> None:
    """The scenario's precondition: the holder still holds the job it is about to lose (active,
    first attempt, no handler finished), or its kill tests nothing."""
    row = await queue.get_job(job)
    held = row is not None and (row["state"], row["attempts"]) == ("active", "1")
    assert held, f"{job} is no longer held by its first claim before the kill: {row}"
    assert workers.ledger.find("done", job) == [], f"{job} finished before the kill"


async def test_a_job_handed_to_a_worker_killed_while_parked_is_rerun_after_its_lease(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    """A worker SIGKILLed while parked leaves its hand-off offer standing (a beat and a half at
    most): the job handed to it is leased to the dead worker, like a job it had claimed, and
    the reaper returns it after the lease; nothing is lost."""
    lease_ms = 600
    producer = Producer(client)
    queue = producer.queue(queue_name)
    a = workers.start(
        "a", queue=queue_name, redis_url=redis_url, lease_ms=lease_ms, beat_ms=BEAT_MS
    )
    await a.wait_event("worker_started")

    async def offer_stands() -> bool:
        return int(await client.zcard(queue.keys.offers)) == 1

    await eventually(offer_stands, timeout=5, what="A's hand-off offer")
    a.send(signal.SIGKILL)
    assert await a.wait_exit(EXIT_SOON_S) == -signal.SIGKILL
    job = (await producer.enqueue(queue_name, "sleep", {"ms": 10})).job_id
    assert await client.hget(queue.keys.job(job), "state") == b"active"  # handed to dead A

    b = workers.start(
        "b", queue=queue_name, redis_url=redis_url, lease_ms=lease_ms, beat_ms=BEAT_MS
    )
    await b.wait_event("worker_started")
    started_at = time.monotonic()
    rerun = await workers.ledger.wait_for("start", job, pid=b.pid, within_s=10)
    took = time.monotonic() - started_at
    budget = (lease_ms + BEAT_MS) / 1000 + SLACK_S
    assert took <= budget, f"B started the job {took:.2f} s after its start; budget {budget} s"
    assert rerun.attempt == 2
    counts = await wait_completed(queue, job)
    assert where_jobs_are(counts) == (0, 0, 0, 0, 1)
    assert workers.ledger.find(job_id=job, pid=a.pid) == []


async def test_a_frozen_holder_that_wakes_after_a_reclaim_has_its_late_write_fenced(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    job_ms = 1500
    producer = Producer(client)
    queue = producer.queue(queue_name)
    a = workers.start("a", queue=queue_name, redis_url=redis_url, lease_ms=500, beat_ms=BEAT_MS)
    await a.wait_event("worker_started")
    job = (await producer.enqueue(queue_name, "sleep", {"ms": job_ms})).job_id
    await workers.ledger.wait_for("start", job, attempt=1, pid=a.pid)
    a.send(signal.SIGSTOP)
    frozen_at = time.monotonic()  # A's handler began its sleep before this instant

    async def lease_lapsed() -> bool:
        deadline = await client.zscore(queue.keys.active, job)
        return deadline is not None and deadline < await server_now_ms(client)

    await eventually(lease_lapsed, timeout=5, what="A's lease deadline to pass on the server")
    b = workers.start("b", queue=queue_name, redis_url=redis_url, lease_ms=3000, beat_ms=BEAT_MS)
    await workers.ledger.wait_for("start", job, attempt=2, pid=b.pid, within_s=10)

    # The scenario: A stays frozen until its handler's sleep is over, so on waking it both
    # renews and tries to complete attempt 1 while B holds attempt 2.
    await anyio.sleep(max(0.0, frozen_at + job_ms / 1000 + 0.1 - time.monotonic()))
    assert workers.ledger.find("done", job) == [], "precondition: B must still hold attempt 2"
    a.send(signal.SIGCONT)

    # Thawed, A finds the lease past its local deadline and stops the handler before it writes
    # anything (lease_self_fenced); a handler that returned first would have its complete
    # refused by the server (write_fenced). Either way only B's completion counts.
    async def a_gave_up() -> dict[str, Any] | None:
        found = a.find("lease_self_fenced", job_id=job) or a.find("write_fenced", job_id=job)
        return found[0] if found else None

    outcome = await eventually(a_gave_up, timeout=5, what="A giving attempt 1 up")
    assert outcome is not None
    if outcome["event"] == "write_fenced":
        assert (outcome["stale_token"], outcome["current"]) == (1, "2")
    await workers.ledger.wait_for("done", job, attempt=2, pid=b.pid, within_s=5)
    counts = await wait_completed(queue, job)
    assert where_jobs_are(counts) == (0, 0, 0, 0, 1)

    a.send(signal.SIGTERM)
    assert await a.wait_exit(EXIT_SOON_S) == 0
    stopped = await a.wait_event("worker_stopped")
    # `fenced` counts writes the server refused because another holder owns the job, and
    # `self_fenced` leases given up at their local deadline: one of them gave attempt 1 up.
    # `leases_lost` need not move: a renewal that finds the lease gone while the job is already
    # settling is left to the settle's reply.
    assert stopped["fenced"] + stopped["self_fenced"] >= 1
    assert stopped["completed"] == 0


async def test_graceful_sigterm_hands_held_jobs_back_to_pending_at_once(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    grace_ms, lease_ms = 300, 30_000
    producer = Producer(client)
    queue = producer.queue(queue_name)
    w = workers.start(
        "w",
        queue=queue_name,
        redis_url=redis_url,
        lease_ms=lease_ms,
        beat_ms=BEAT_MS,
        extra=["--grace-ms", str(grace_ms)],
    )
    await w.wait_event("worker_started")
    specs = [JobSpec("sleep", {"ms": 10_000}) for _ in range(3)]
    jobs = [e.job_id for e in await producer.enqueue_many(queue_name, specs)]
    for job in jobs:
        await workers.ledger.wait_for("start", job, attempt=1, pid=w.pid)

    w.send(signal.SIGTERM)
    sent_at = time.monotonic()
    code = await w.wait_exit(grace_ms / 1000 + EXIT_SOON_S + 1)
    took = time.monotonic() - sent_at
    assert code == 0
    assert took <= grace_ms / 1000 + EXIT_SOON_S

    # Right after exit, long before a 30 s lease could lapse: back in pending, unlocked.
    for job in jobs:
        assert await queue.state_of(job) == "pending"
        row = await queue.get_job(job)
        assert row is not None
        assert (row["state"], row["attempts"]) == ("pending", "1")
        assert not await client.exists(queue.keys.lock(job))
    assert sum(e["released"] for e in w.find("leases_released", queue=queue_name)) == 3
    assert workers.ledger.find("done") == []

    claimed = await queue.claim(3, lease_ms)
    assert sorted(j.id for j in claimed.jobs) == sorted(jobs)
    assert [j.token for j in claimed.jobs] == [2, 2, 2]


async def test_a_second_sigterm_exits_at_once_and_leaves_the_lease_to_the_reaper(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    producer = Producer(client)
    queue = producer.queue(queue_name)
    w = workers.start(
        "w",
        queue=queue_name,
        redis_url=redis_url,
        lease_ms=30_000,
        beat_ms=BEAT_MS,
        extra=["--grace-ms", "30000"],
    )
    await w.wait_event("worker_started")
    job = (await producer.enqueue(queue_name, "sleep", {"ms": 10_000})).job_id
    await workers.ledger.wait_for("start", job, attempt=1, pid=w.pid)

    w.send(signal.SIGTERM)
    await w.wait_event("shutdown_requested", signal="SIGTERM")
    w.send(signal.SIGTERM)
    assert await w.wait_exit(EXIT_SOON_S) == 128 + signal.SIGTERM
    assert w.find("shutdown_forced", signal="SIGTERM") != []
    assert w.find("leases_released") == []

    assert await queue.state_of(job) == "active"
    assert await client.exists(queue.keys.lock(job))
    deadline = await client.zscore(queue.keys.active, job)
    assert deadline is not None
    assert deadline > await server_now_ms(client)
    row = await queue.get_job(job)
    assert row is not None
    assert row["attempts"] == "1"
    assert workers.ledger.find("done", job) == []


async def test_a_worker_refuses_to_start_on_a_keyspace_of_another_version(
    tmp_path: Path, queue_name: str, workers: WorkerProcesses
) -> None:
    # A private server: the fence key is global, the session server must keep its version.
    with RedisServer(tmp_path / "r") as server:
        raw = Redis.from_url(server.url)
        try:
            await raw.set(VERSION_KEY, "echomq:9.9.9")
            w = workers.start(
                "w", queue=queue_name, redis_url=server.url, lease_ms=3000, beat_ms=BEAT_MS
            )
            assert await w.wait_exit(5) == 1
            output = w.output()
            assert "'echomq:9.9.9'" in output
            assert f"'{DEFAULT_WIRE_VERSION}'" in output
            assert "Traceback" not in output
            assert await raw.get(VERSION_KEY) == b"echomq:9.9.9"
            assert await raw.dbsize() == 1
        finally:
            await raw.aclose()
