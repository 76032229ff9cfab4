"""`emq-worker run --processes N` on real processes and a real server: the children drain a queue
together; a child SIGKILLed is restarted and its jobs come back within a lease and a beat (none
lost, none completed twice); a wedged child is killed and replaced; SIGTERM to the parent stops
every child gracefully; systemd hears READY=1 once all are ready.

The children log into the parent's output (one file here): their lines carry `process`, the
parent's `worker_process_*` lines name each child's pid.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from emq_worker import JobSpec, Producer
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from tests.support.processes import WorkerProcess, WorkerProcesses
from tests.support.wait import eventually
from tests.test_sdnotify import READY, STOPPING, WATCHDOG, NotifyListener

pytestmark = pytest.mark.fault

BEAT_MS = 100
LEASE_MS = 600
SLACK_S = 1.5
START_S = 20.0
"""A parent and its children each import the app and connect: generous on a loaded machine."""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(tmp_path / "workers") as processes:
        yield processes


def start_fleet(
    workers: WorkerProcesses,
    queue: str,
    redis_url: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> WorkerProcess:
    return workers.start(
        "fleet",
        queue=queue,
        redis_url=redis_url,
        lease_ms=LEASE_MS,
        beat_ms=BEAT_MS,
        extra=["--processes", "2", *extra],
        env=env,
    )


async def all_ready(fleet: WorkerProcess) -> list[int]:
    """Wait until the parent has both children ready; their pids, by process index."""
    await fleet.wait_event("fleet_ready", within_s=START_S)
    return [fleet.find("worker_process_ready", process=i)[-1]["pid"] for i in (0, 1)]


async def second_event(fleet: WorkerProcess, event: str, **fields: object) -> dict[str, Any]:
    """The second log event named `event` with `fields` (e.g. a restarted child's)."""

    async def probe() -> dict[str, Any] | None:
        found = fleet.find(event, **fields)
        return found[1] if len(found) > 1 else None

    second = await eventually(probe, timeout=START_S, what=f"a second {event} {fields}")
    assert second is not None
    return second


async def wait_all_completed(queue: Queue, jobs: list[JobId]) -> None:
    async def settled() -> bool:
        counts = await queue.counts()
        return counts.completed >= len(jobs) and counts.pending + counts.active == 0

    await eventually(settled, timeout=20, what=f"{len(jobs)} jobs completed")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return False


# --- real processes ----------------------------------------------------------------------------


async def test_two_processes_drain_a_queue_together_and_stop_on_sigterm(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    producer = Producer(client)
    queue = producer.queue(queue_name)
    fleet = start_fleet(workers, queue_name, redis_url, "-c", "2")
    pids = await all_ready(fleet)
    # Four jobs held at once with two slots per process: both processes must take some.
    specs = [JobSpec("sleep", {"ms": 3000})] * 4
    held = [e.job_id for e in await producer.enqueue_many(queue_name, specs)]
    for job in held:
        await workers.ledger.wait_for("start", job, attempt=1, within_s=10)
    assert {e.pid for e in workers.ledger.find("start")} == set(pids)
    quick = [e.job_id for e in await producer.enqueue_many(queue_name, [JobSpec("noop")] * 50)]
    await wait_all_completed(queue, held + quick)
    assert len(workers.ledger.find("done")) == 54

    fleet.send(signal.SIGTERM)
    assert await fleet.wait_exit(10) == 0
    assert not any(alive(pid) for pid in pids)
    # Each child stopped gracefully: the parent saw it exit 0 (a child that failed on its way
    # out, or was killed, exits otherwise); the log tail says why when it did not.
    exits = [(e["pid"], e["exit_code"]) for e in fleet.find("worker_process_exited")]
    assert sorted(exits) == sorted((pid, 0) for pid in pids), fleet.tail()
    stopped = [(e["process"], e["forced"]) for e in fleet.find("worker_stopped")]
    assert sorted(stopped) == [(0, False), (1, False)], fleet.tail()


async def test_a_sigkilled_child_is_restarted_and_its_jobs_rerun_once_within_a_lease_and_a_beat(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    producer = Producer(client)
    queue = producer.queue(queue_name)
    # Eight slots per child for six jobs: whatever the split, the sibling has a free slot for
    # each job the victim held, so the rerun waits on the lease and the beat alone.
    fleet = start_fleet(workers, queue_name, redis_url, "-c", "8")
    pids = await all_ready(fleet)
    specs = [JobSpec("sleep", {"ms": 5000})] * 6
    jobs = [e.job_id for e in await producer.enqueue_many(queue_name, specs)]
    for job in jobs:
        await workers.ledger.wait_for("start", job, attempt=1, within_s=10)
    starts = workers.ledger.find("start")
    victim = max(pids, key=lambda pid: sum(e.pid == pid for e in starts))

    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    finished = {e.job_id for e in workers.ledger.find("done", pid=victim)}
    lost = [e.job_id for e in workers.ledger.find("start", pid=victim) if e.job_id not in finished]
    assert lost, "precondition: the child killed held unfinished jobs"
    for lost_job in lost:
        await workers.ledger.wait_for("start", lost_job, attempt=2, within_s=10)
    took = time.monotonic() - killed_at
    budget = (LEASE_MS + BEAT_MS) / 1000 + SLACK_S
    assert took <= budget, f"the jobs reran {took:.2f} s after the kill; budget {budget} s"

    index = pids.index(victim)
    exited = await fleet.wait_event("worker_process_exited", process=index)
    assert (exited["pid"], exited["reason"]) == (victim, "killed by SIGKILL")
    await fleet.wait_event("worker_process_restarting", process=index)
    restarted = await second_event(fleet, "worker_process_ready", process=index)
    assert restarted["pid"] != victim

    await wait_all_completed(queue, jobs)
    done = workers.ledger.find("done")
    assert sorted(e.job_id for e in done) == sorted(jobs)  # each job completed once
    assert {e.job_id for e in done if e.pid == victim} == finished
    assert (await queue.counts()).completed == len(jobs)

    fleet.send(signal.SIGTERM)
    assert await fleet.wait_exit(10) == 0


async def test_sigterm_to_the_parent_hands_back_every_child_s_held_jobs_and_exits_0(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    grace_ms = 300
    producer = Producer(client)
    queue = producer.queue(queue_name)
    fleet = start_fleet(
        workers,
        queue_name,
        redis_url,
        "-c",
        "2",
        "--grace-ms",
        str(grace_ms),
        "--lease-ms",
        "30000",
    )
    pids = await all_ready(fleet)
    specs = [JobSpec("sleep", {"ms": 10_000})] * 4
    jobs = [e.job_id for e in await producer.enqueue_many(queue_name, specs)]
    for job in jobs:
        await workers.ledger.wait_for("start", job, attempt=1, within_s=10)

    fleet.send(signal.SIGTERM)
    assert await fleet.wait_exit(15) == 0
    assert not any(alive(pid) for pid in pids)
    for job in jobs:  # long before a 30 s lease could lapse: back in pending
        assert await queue.state_of(job) == "pending"
    released = [e["released"] for e in fleet.find("leases_released")]
    assert sum(released) == 4, f"released {released}\n{fleet.tail()}"
    assert workers.ledger.find("done") == []
    assert fleet.find("worker_process_restarting") == []


async def test_sigterm_lets_held_jobs_finish_within_the_grace_period(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    producer = Producer(client)
    queue = producer.queue(queue_name)
    fleet = start_fleet(workers, queue_name, redis_url, "-c", "2", "--grace-ms", "10000")
    await all_ready(fleet)
    specs = [JobSpec("sleep", {"ms": 800})] * 4
    jobs = [e.job_id for e in await producer.enqueue_many(queue_name, specs)]
    for job in jobs:
        await workers.ledger.wait_for("start", job, attempt=1, within_s=10)
    fleet.send(signal.SIGTERM)
    assert await fleet.wait_exit(10) == 0
    assert sorted(e.job_id for e in workers.ledger.find("done")) == sorted(jobs)
    assert (await queue.counts()).completed == 4


async def test_a_wedged_child_is_killed_and_replaced_and_the_parent_speaks_for_the_fleet(
    redis_url: str, queue_name: str, workers: WorkerProcesses, tmp_path: Path
) -> None:
    """The test plays systemd: a notify socket and a 2.5 s watchdog for the parent."""
    socket_path = str(tmp_path / f"notify-{uuid.uuid4().hex[:8]}")
    with NotifyListener(socket_path) as systemd:
        env = {"NOTIFY_SOCKET": socket_path, "WATCHDOG_USEC": "2500000"}
        fleet = start_fleet(workers, queue_name, redis_url, env=env)
        await systemd.wait_for(READY, within_s=START_S)
        assert len(fleet.find("worker_process_ready")) == 2  # READY=1 only once both are
        await systemd.wait_for(WATCHDOG, times=2)
        pids = await all_ready(fleet)

        frozen = pids[1]
        os.kill(frozen, signal.SIGSTOP)
        wedged = await fleet.wait_event("worker_process_wedged", process=1)
        assert wedged["pid"] == frozen
        exited = await fleet.wait_event("worker_process_exited", process=1)
        assert (exited["reason"], exited["wedged"]) == ("killed by SIGKILL", True)
        replaced = await second_event(fleet, "worker_process_ready", process=1)
        assert replaced["pid"] != frozen

        fleet.send(signal.SIGTERM)
        assert await fleet.wait_exit(10) == 0
        await systemd.wait_for(STOPPING)
        assert systemd.count(READY) == 1


async def test_a_parent_killed_outright_takes_its_children_down_gracefully(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    """Each child asked Linux for SIGTERM when its parent dies: no orphan serves on, and its
    held jobs are handed back at once (not left to the reaper)."""
    producer = Producer(client)
    queue = producer.queue(queue_name)
    extra = ("-c", "2", "--grace-ms", "300", "--lease-ms", "30000")
    fleet = start_fleet(workers, queue_name, redis_url, *extra)
    pids = await all_ready(fleet)
    specs = [JobSpec("sleep", {"ms": 10_000})] * 4
    jobs = [e.job_id for e in await producer.enqueue_many(queue_name, specs)]
    for job in jobs:
        await workers.ledger.wait_for("start", job, attempt=1, within_s=10)

    fleet.send(signal.SIGKILL)
    assert await fleet.wait_exit(5) == -signal.SIGKILL

    async def children_gone() -> bool:
        return not any(alive(pid) for pid in pids)

    await eventually(children_gone, timeout=10, what=f"children {pids} to exit")
    released = [e["released"] for e in fleet.find("leases_released")]
    assert sum(released) == 4, f"released {released}\n{fleet.tail()}"
    for job in jobs:
        assert await queue.state_of(job) == "pending"


async def test_with_burst_each_child_exits_once_the_queue_is_drained_and_so_does_the_parent(
    client: Redis, redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    producer = Producer(client)
    queue = producer.queue(queue_name)
    jobs = [e.job_id for e in await producer.enqueue_many(queue_name, [JobSpec("noop")] * 40)]
    fleet = start_fleet(workers, queue_name, redis_url, "--burst")
    assert await fleet.wait_exit(START_S) == 0
    assert (await queue.counts()).completed == len(jobs)
    assert [e["exit_code"] for e in fleet.find("worker_process_exited")] == [0, 0]
    assert fleet.find("worker_process_restarting") == []


async def test_refused_credentials_stop_the_fleet_with_their_exit_code_instead_of_a_restart_loop(
    redis_url: str, queue_name: str, workers: WorkerProcesses
) -> None:
    wrong = redis_url.replace("redis://", "redis://nobody:wrong@", 1)
    fleet = start_fleet(workers, queue_name, wrong)
    assert await fleet.wait_exit(START_S) == 3
    failed = fleet.find("fleet_failed")
    assert failed[0]["reason"] == "exit code 3 (credentials refused)"
    assert fleet.find("worker_process_restarting") == []
