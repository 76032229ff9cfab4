"""Recovery with suspects and frozen workers, on real `emq-worker run` processes.

A suspect (a job reaped twice) starts within lease + beat + slack of its holder's death (the slack
measured by the first recovery of the same job, at least 1 s) even on a
worker that runs a long job, and the work enqueued behind it starts at once on that worker's free
slots. A worker frozen past its lease does not start, once thawed, a job handed to it before the
freeze: it confirms the lease first and finds it gone.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from emq_worker import JobSpec, Producer
from emq_worker.protocol.names import JobId
from tests.support.processes import Entry, WorkerProcess, WorkerProcesses
from tests.support.wait import eventually

pytestmark = pytest.mark.fault

LEASE_MS = 1_200
"""Long enough that a worker starved beside a busy loop keeps J (at 600 ms, B gave it up)."""
BEAT_MS = 100
MIN_SLACK_S = 1.0
LONG_MS = 8_000
"""The long job L beside the suspect: a suspect that waits for it misses the bound by far."""
SUSPECT_MS = 20_000
"""J runs long enough to be caught running by each kill, however slowly C starts up before B's."""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(tmp_path / "workers") as processes:
        yield processes


def start(workers: WorkerProcesses, name: str, queue: str, url: str, *extra: str) -> WorkerProcess:
    args = ["--max-attempts", "5", *extra]
    return workers.start(
        name, queue=queue, redis_url=url, lease_ms=LEASE_MS, beat_ms=BEAT_MS, extra=args
    )


async def kill(worker: WorkerProcess) -> float:
    worker.send(signal.SIGKILL)
    killed_at = time.monotonic()
    await worker.wait_exit(5)
    return killed_at


async def test_a_suspect_starts_at_once_beside_a_long_job_and_the_work_behind_it_too(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    """A (-c 1) runs J and is SIGKILLed; B (-c 1) takes J at attempt 2 and is SIGKILLed: J is a
    suspect. C (-c 5) runs the long job L meanwhile; J (attempt 3) and five short jobs enqueued
    after B's death all start within lease + beat + slack of it, while L still runs."""
    producer = Producer(client)
    a = start(workers, "a", queue_name, redis_url, "--concurrency", "1")
    await a.wait_event("worker_started")
    j = (await producer.enqueue(queue_name, "sleep", {"ms": SUSPECT_MS})).job_id
    await workers.ledger.wait_for("start", j, attempt=1, pid=a.pid)
    b = start(workers, "b", queue_name, redis_url, "--concurrency", "1")
    await b.wait_event("worker_started")
    a_killed_at = await kill(a)
    await workers.ledger.wait_for("start", j, attempt=2, pid=b.pid, within_s=10)
    # The slack is measured: how late past lease + beat this machine's first recovery (of J
    # from A, by an idle B) came, twice over, and at least MIN_SLACK_S.
    nominal = (LEASE_MS + BEAT_MS) / 1000
    first_late = time.monotonic() - a_killed_at - nominal
    long_job = (await producer.enqueue(queue_name, "sleep", {"ms": LONG_MS})).job_id
    c = start(workers, "c", queue_name, redis_url, "--concurrency", "5")
    long_start = await workers.ledger.wait_for("start", long_job, within_s=30)
    # The scenario's precondition: B still runs J (so L can only go to C). A B starved of CPU
    # past its lease gives J up, and takes L itself.
    assert long_start.pid == c.pid, (
        f"L started on {long_start.pid}, not on C ({c.pid}): B lost J before its kill; "
        f"B's log: {b.tail()}"
    )

    killed_at = await kill(b)
    assert workers.ledger.find("done", j) == [], "J ended before B's kill: nothing was shown"
    shorts = await producer.enqueue_many(queue_name, [JobSpec("sleep", {"ms": 10})] * 5)
    bound = nominal + max(MIN_SLACK_S, 2 * first_late)
    rerun = await workers.ledger.wait_for("start", j, attempt=3, pid=c.pid, within_s=30)
    j_took = time.monotonic() - killed_at
    for short in shorts:
        await workers.ledger.wait_for("start", short.job_id, pid=c.pid, within_s=30)
    shorts_took = time.monotonic() - killed_at
    long_done = workers.ledger.find("done", long_job)

    assert rerun.attempt == 3
    late = f"(the first recovery came {first_late:+.2f} s off lease + beat)"
    assert j_took <= bound, (
        f"the suspect J started {j_took:.2f} s after B's death; bound {bound:.2f} {late}"
    )
    assert shorts_took <= bound, (
        f"the short jobs started {shorts_took:.2f} s after; bound {bound:.2f} {late}"
    )
    assert long_done == [], "L ended before the work beside it started: nothing was shown"
    assert await client.sismember(producer.queue(queue_name).keys.suspects, j)


async def waiting(client: Redis, pattern: str) -> int:
    """Items left in the hand-off lists matching `pattern` (not yet popped by a parked worker)."""
    return sum([int(await client.llen(key)) async for key in client.scan_iter(match=pattern)])


async def thawed_start_or_skip(workers: WorkerProcesses, a: WorkerProcess, job: JobId) -> Entry:
    """Wait until the thawed worker either starts `job` or says it will not; return a ledger
    line standing for that (a `skipped` one when it did not start)."""

    async def probe() -> Entry | None:
        started = workers.ledger.find("start", job, pid=a.pid)
        if started:
            return started[0]
        if a.find("job_not_started", job_id=job):
            return Entry("skipped", job, 1, a.pid)
        if a.find("lease_self_fenced", job_id=job):  # past its local deadline: never started
            return Entry("skipped", job, 1, a.pid)
        return None

    found = await eventually(probe, timeout=15, what=f"{a.name} to start or skip {job}")
    assert found is not None
    return found


async def test_a_thawed_worker_does_not_start_a_job_handed_to_it_before_the_freeze(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    """A is parked with a hand-off offer standing and is SIGSTOPped; the job enqueued next is
    handed to A's offer (leased to A), reaped after its lease by B and completed there. Thawed,
    A reads the hand-off from its BLPOP: it must confirm the lease and not run the handler."""
    producer = Producer(client)
    keys = producer.queue(queue_name).keys
    a = start(workers, "a", queue_name, redis_url)
    await a.wait_event("worker_started")
    job: JobId | None = None
    for _ in range(5):  # an offer may lapse between the probe and the SIGSTOP: try again

        async def offer_stands() -> bool:
            return int(await client.zcard(keys.offers)) == 1

        await eventually(offer_stands, timeout=5, what="A's hand-off offer")
        a.send(signal.SIGSTOP)
        candidate = (await producer.enqueue(queue_name, "sleep", {"ms": 10})).job_id
        # Handed to A, and already pushed into A's socket by its blocked BLPOP (an empty hand-off
        # list). A job handed while A was between two parks stays in the list, which lapses
        # with the lease before A thaws: A never sees that one, and the scenario is not played.
        if await client.hget(keys.job(candidate), "state") == b"active" and not await waiting(
            client, keys.prefix + "handoff:*"
        ):
            job = candidate
            break
        a.send(signal.SIGCONT)
    assert job is not None, "no job was handed to the frozen worker in 5 tries"
    b = start(workers, "b", queue_name, redis_url)
    await workers.ledger.wait_for("done", job, pid=b.pid, within_s=15)

    a.send(signal.SIGCONT)
    seen = await thawed_start_or_skip(workers, a, job)
    assert seen.kind == "skipped", f"the thawed worker started {job} after it completed elsewhere"
