"""The server itself misbehaves under running workers.

- A stall longer than a lease (`DEBUG SLEEP`, `CLIENT PAUSE WRITE`): nothing is lost or completed
  twice, every write from a superseded holder is fenced; the spurious re-runs are reported.
- A primary demoted to a replica (`READONLY`, and `UNBLOCKED` for a parked BLPOP), a worker
  pointed at a replica, and a failed background save (`MISCONF`): enqueue gets a clear error, the
  worker backs off (a few requests a second at most), stays up and resumes once writes are
  accepted again.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ReadOnlyError, ResponseError

from emq_worker import JobSpec, Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.connection import connect
from tests.chaos.faults import Fleet, enqueue, judge, wait_drained
from tests.chaos.rows import completed_count, stop_gracefully
from tests.support.processes import WorkerProcess, WorkerProcesses
from tests.support.server import RedisServer, free_port
from tests.support.serverfaults import command, command_calls, worker_requests
from tests.support.wait import eventually

QUEUE = "srv"
LEASE_MS = 1_000
BEAT_MS = 200
STALL_S = 2.5
"""Longer than two leases: every lease held when the stall begins has expired when it ends."""
LONG_JOBS = 4
LONG_JOB_MS = 6_000
"""Longer than the time to a third of the jobs plus the stall: running across the whole stall."""
MAX_REQUESTS_PER_S = 10.0
FAILED_BEATS = 5


@asynccontextmanager
async def staged(
    directory: Path, *extra: str
) -> AsyncIterator[tuple[RedisServer, Redis, WorkerProcesses]]:
    with RedisServer(directory / "redis", extra=extra) as server:
        client = connect(server.url, DEFAULT_WIRE_VERSION)
        try:
            with WorkerProcesses(directory / "workers") as processes:
                yield server, client, processes
        finally:
            await client.aclose()


async def _stall(client: Redis, kind: str) -> None:
    if kind == "debug-sleep":
        await command(client, "DEBUG", "SLEEP", STALL_S)  # returns when the server wakes
    else:
        await command(client, "CLIENT", "PAUSE", int(STALL_S * 1000), "WRITE")


@pytest.mark.soak
@pytest.mark.parametrize("kind", ["debug-sleep", "client-pause-write"])
async def test_a_server_stall_longer_than_a_lease_loses_nothing_and_fences_stale_writes(
    tmp_path: Path, kind: str
) -> None:
    jobs = 300
    async with staged(tmp_path, "--enable-debug-command", "local") as (server, client, procs):
        fleet = Fleet(procs, QUEUE, server.url, LEASE_MS, BEAT_MS, extra=["--concurrency", "10"])
        # The long jobs, claimed first, are still running when the stall ends, so their leases
        # must lapse and come back through the reaper. The short ones may all finish inside the
        # stall: their settles, queued behind the pause, are then written late but uncontested,
        # and nothing of theirs needs reaping.
        ids = await enqueue(client, QUEUE, LONG_JOBS, "work", ms=LONG_JOB_MS)
        ids += await enqueue(client, QUEUE, jobs - LONG_JOBS, "work", ms=150)
        await fleet.start(2)

        async def a_third_done() -> bool:
            return await completed_count(client, QUEUE) >= jobs // 3

        await eventually(a_third_done, timeout=60, what="a third of the jobs completed")
        watcher = connect(server.url, DEFAULT_WIRE_VERSION)
        try:
            await _stall(watcher, kind)
        finally:
            await watcher.aclose()
        await wait_drained(client, QUEUE, within_s=60, what=f"after a {kind} stall")
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
    stopped = fleet.events("worker_stopped")
    reaped = sum(int(e.get("reaped", 0)) for e in stopped)
    given_up = sum(int(e.get("leases_lost", 0)) + int(e.get("self_fenced", 0)) for e in stopped)
    facts = {"reaped": reaped, "leases_given_up": given_up}
    print({"row": f"stall {kind} {STALL_S}s", **facts, **verdict.summary()})
    assert len(stopped) == 2, fleet.tails()
    assert verdict.ok, verdict.summary()
    assert verdict.completed == jobs
    # The stall outlasted every lease then held: the server's clock moved past their deadlines
    # and the reaper handed back those still running (the long jobs at least). A holder whose
    # late settle found its job still unclaimed wrote it (late but uncontested); any other
    # re-run is the price, never a loss.
    assert reaped > 0, fleet.tails()


@pytest.mark.fault
async def test_a_demoted_primary_makes_the_worker_back_off_and_resume_when_promoted(
    tmp_path: Path,
) -> None:
    async with staged(tmp_path) as (server, client, procs):
        fleet = Fleet(procs, QUEUE, server.url, LEASE_MS, BEAT_MS)
        [worker] = await fleet.start(1)
        await worker.wait_event("worker_started")
        # A primary that no longer is: REPLICAOF a port nobody listens on keeps the data, ends
        # the worker's parked BLPOP (UNBLOCKED) and refuses every write (READONLY).
        await command(client, "REPLICAOF", "127.0.0.1", free_port())
        with pytest.raises(ReadOnlyError):
            await Producer(client).enqueue_many(QUEUE, [JobSpec("work", {})])
        rate = await _refusing_rate(client, worker, "READONLY")
        await command(client, "REPLICAOF", "NO", "ONE")
        ids = await enqueue(client, QUEUE, 20, "work", ms=10)
        await wait_drained(client, QUEUE, within_s=30, what="after the promotion")
        verdict = await judge(client, fleet, ids)
    print({"row": "READONLY (demoted)", "requests_per_s_while_refused": rate, **verdict.summary()})
    assert verdict.ok, verdict.summary()
    assert verdict.completed == 20


@pytest.mark.soak
async def test_a_worker_pointed_at_a_replica_backs_off_then_serves_it_once_promoted(
    tmp_path: Path,
) -> None:
    async with staged(tmp_path) as (primary, client, procs):
        ids = await enqueue(client, QUEUE, 20, "work", ms=10)
        with RedisServer(
            tmp_path / "replica", extra=("--replicaof", "127.0.0.1", str(primary.port))
        ) as replica:
            # Not fenced: the fence would SET the version on a replica not yet in sync.
            mirror = Redis(host="127.0.0.1", port=replica.port)
            try:
                await eventually(_synced(mirror, QUEUE), timeout=30, what="the replica in sync")
                fleet = Fleet(procs, QUEUE, replica.url, LEASE_MS, BEAT_MS)
                [worker] = await fleet.start(1)
                rate = await _refusing_rate(mirror, worker, "READONLY")
                assert await mirror.zcard(f"emq:{{{QUEUE}}}:pending") == 20  # nothing claimed
                await command(mirror, "REPLICAOF", "NO", "ONE")
                await wait_drained(mirror, QUEUE, within_s=30, what="on the promoted replica")
                verdict = await judge(mirror, fleet, ids)
            finally:
                await mirror.aclose()
    print({"row": "READONLY (replica)", "requests_per_s_while_refused": rate, **verdict.summary()})
    assert verdict.ok, verdict.summary()
    assert verdict.completed == 20


@pytest.mark.fault
async def test_a_failed_background_save_makes_the_worker_back_off_and_resume(
    tmp_path: Path,
) -> None:
    async with staged(tmp_path, "--enable-protected-configs", "local") as (server, client, procs):
        fleet = Fleet(procs, QUEUE, server.url, LEASE_MS, BEAT_MS)
        [worker] = await fleet.start(1)
        await _break_background_saves(client, tmp_path / "gone")
        with pytest.raises(ResponseError, match="MISCONF"):
            await Producer(client).enqueue_many(QUEUE, [JobSpec("work", {})])
        rate = await _refusing_rate(client, worker, "MISCONF")
        await client.config_set("dir", str(server.directory))
        await client.bgsave()
        await eventually(_saved(client), timeout=30, what="a background save that succeeds")
        ids = await enqueue(client, QUEUE, 20, "work", ms=10)
        await wait_drained(client, QUEUE, within_s=30, what="after the disk was fixed")
        verdict = await judge(client, fleet, ids)
    print({"row": "MISCONF", "requests_per_s_while_refused": rate, **verdict.summary()})
    assert verdict.ok, verdict.summary()
    assert verdict.completed == 20


async def _refusing_rate(client: Redis, worker: WorkerProcess, code: str) -> float:
    """Watch the worker's beats fail with `code` a few times; its requests per second meanwhile.
    Fails if it exits or spins."""
    before = await command_calls(client)
    began = time.monotonic()
    seen = len(worker.find("beat_failed"))

    async def backed_off() -> bool:
        assert worker.returncode is None, worker.tail()
        return len(worker.find("beat_failed")) >= seen + FAILED_BEATS

    await eventually(backed_off, timeout=30, what=f"{FAILED_BEATS} failed beats")
    refused = [e for e in worker.find("beat_failed") if code in str(e.get("error"))]
    assert refused, worker.tail()
    rate = worker_requests(await command_calls(client) - before) / (time.monotonic() - began)
    assert rate < MAX_REQUESTS_PER_S
    return round(rate, 1)


async def _break_background_saves(client: Redis, directory: Path) -> None:
    """Point the server's working directory at one that then disappears: the next BGSAVE fails,
    and with stop-writes-on-bgsave-error (the default) and a save policy in force, every write is
    refused with MISCONF."""
    await anyio.Path(directory).mkdir()
    await client.config_set("dir", str(directory))
    await anyio.to_thread.run_sync(shutil.rmtree, directory)
    await client.config_set("stop-writes-on-bgsave-error", "yes")
    await client.config_set("save", "3600 1")  # MISCONF needs a save policy to be in force
    await client.bgsave()

    async def failed() -> bool:
        info = await client.info("persistence")
        return bool(info["rdb_bgsave_in_progress"] == 0 and info["rdb_last_bgsave_status"] == "err")

    await eventually(failed, timeout=30, what="the background save to fail")


def _saved(client: Redis) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        info = await client.info("persistence")
        return bool(info["rdb_bgsave_in_progress"] == 0 and info["rdb_last_bgsave_status"] == "ok")

    return probe


def _synced(replica: Redis, queue: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        info = await replica.info("replication")
        pending = await replica.zcard(f"emq:{{{queue}}}:pending")
        return info.get("master_link_status") == "up" and pending > 0

    return probe
