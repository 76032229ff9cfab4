"""The chaos rows, one coroutine each, sized by the caller: the tests run them at CI size, the
runner (`python -m tests.chaos --full`) at the issue's full size. Each returns a `RowResult`
(the checker's verdict plus row-specific facts); the caller asserts.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, attempts_run
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.config import WorkerSettings
from emq_worker.valkey.connection import connect
from tests.chaos.checker import Fault, Verdict
from tests.chaos.faults import Fleet, enqueue, judge, pick, unfinished, wait_drained
from tests.chaos.ledger import START, Event, read_ledger
from tests.chaos.proxy import Proxy
from tests.support.processes import WorkerProcesses
from tests.support.server import RedisServer
from tests.support.wait import eventually

SLACK_S = 2.0
SETTLE_AFTER_CUT_S = 0.010
"""Jobs released this long after a cut send their completions into it."""
"""Recovery slack over lease + beat on a loaded 2-core machine (process scheduling, a respawn)."""
STOP_WITHIN_S = 30.0
TEST_BACKOFF = ExponentialBackoff(cap=0.5, base=0.02)


@dataclass(slots=True)
class RowResult:
    row: str
    verdict: Verdict
    sizes: dict[str, Any]
    seconds: float
    facts: dict[str, Any] = field(default_factory=dict)
    bound_s: float | None = None
    """The recovery bound the row promises (lease + beat + slack), when it promises one."""

    @property
    def within_bound(self) -> bool:
        """Every recovery the row measured kept its bound (True when it promises none)."""
        longest = self.verdict.max_recovery_s
        return self.bound_s is None or longest is None or longest <= self.bound_s

    def record(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "sizes": self.sizes,
            "seconds": round(self.seconds, 1),
            "bound_s": self.bound_s,
            **self.verdict.summary(),
            "facts": self.facts,
        }


@asynccontextmanager
async def stage(
    directory: Path, *, appendonly: bool = True, queue: str = "chaos"
) -> AsyncIterator[tuple[RedisServer, Redis, WorkerProcesses]]:
    """A fresh redis-server (AOF appendfsync always unless told) and a process group."""
    with RedisServer(directory / "redis", appendonly=appendonly) as server:
        # The test's own client retries through restarts and killed connections; the workers'
        # clients are the product's, untouched.
        client = connect(server.url, DEFAULT_WIRE_VERSION, retry=Retry(TEST_BACKOFF, 20))
        try:
            with WorkerProcesses(directory / "workers") as processes:
                yield server, client, processes
        finally:
            await client.aclose()


async def stop_gracefully(fleet: Fleet) -> None:
    """SIGTERM every live worker and wait for it to exit, so its last log lines are written."""
    for worker in fleet.alive:
        worker.send(signal.SIGTERM)
    for worker in fleet.processes.started:
        if worker.returncode is None:
            await worker.wait_exit(STOP_WITHIN_S)


async def completed_count(client: Redis, queue: str) -> int:
    return int(await client.hget(QueueKeys.of(queue).completed, "count") or 0)


@dataclass(frozen=True, slots=True)
class KillSize:
    jobs: int = 10_000
    workers: int = 3
    kills: int = 20
    lease_ms: int = 1_000
    beat_ms: int = 200
    job_ms: int = 20
    concurrency: int = 20


async def sigkill_soak(directory: Path, size: KillSize, seed: int = 1) -> RowResult:
    """SIGKILL a random worker `kills` times, spread over the run by progress; respawn each."""
    rng = random.Random(seed)
    began = time.monotonic()
    queue = "chaos.kill"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        ids = await enqueue(client, queue, size.jobs, "work", ms=size.job_ms)
        await fleet.start(size.workers)
        for k in range(size.kills):
            threshold = size.jobs * (k + 1) // (size.kills + 2)

            async def progressed(at_least: int = threshold) -> bool:
                return await completed_count(client, queue) >= at_least

            await eventually(progressed, timeout=120, what=f"{threshold} jobs completed")
            fleet.kill(pick(rng, fleet.alive))
            for worker in fleet.replace_exited(size.workers):
                await worker.wait_event("worker_started", within_s=60)
        await wait_drained(client, queue, within_s=180)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
    bound = (size.lease_ms + size.beat_ms) / 1000 + SLACK_S
    return RowResult("worker SIGKILL", verdict, _sizes(size), time.monotonic() - began, {}, bound)


async def keep_alive(fleet: Fleet, count: int, client: Redis, *, within_s: float) -> int:
    """Respawn exited workers (bounded by the fleet's max_spawns) until the queue drains;
    returns how many were respawned."""
    respawned = 0

    async def drained() -> bool:
        nonlocal respawned
        respawned += len(fleet.replace_exited(count))
        return await unfinished(client, fleet.queue) == 0

    await eventually(drained, timeout=within_s, what=f"queue {fleet.queue} drained")
    return respawned


@dataclass(frozen=True, slots=True)
class PoisonSize:
    good_jobs: int = 1_000
    workers: int = 3
    concurrency: int = 1
    """1: no good job shares a process with the poison. Above 1, the jobs claimed with it die
    with it up to twice, then they are suspects and each runs alone (see test_poison.py)."""
    lease_ms: int = 1_000
    beat_ms: int = 200
    job_ms: int = 5


async def poison_job(directory: Path, size: PoisonSize) -> RowResult:
    """One job that SIGKILLs its own process on every attempt, among good jobs."""
    began = time.monotonic()
    queue = "chaos.poison"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_spawns=20)
        half = size.good_jobs // 2
        good = await enqueue(client, queue, half, "work", ms=size.job_ms)
        poison = (await enqueue(client, queue, 1, "poison"))[0]
        good += await enqueue(client, queue, size.good_jobs - half, "work", ms=size.job_ms)
        await fleet.start(size.workers)
        respawned = await keep_alive(fleet, size.workers, client, within_s=120)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, [*good, poison], must_complete=good)
        raw = await client.hgetall(QueueKeys.of(queue).job(poison))
        row = {_str(k): _str(v) for k, v in raw.items()}
    ledger = read_ledger(processes.ledger.path.parent)
    starts = [e.attempt for e in ledger if e.job == poison and e.kind == START]
    facts = {
        "poison_state": row.get("state", ""),
        # The attempts it ran: dead-lettering raises the row's count by one more to fence out a
        # late holder (protocol.md, section 6), which `fenced` records.
        "poison_attempts": attempts_run(row.get("attempts"), row.get("fenced")),
        "poison_last_error": row.get("last_error", ""),
        "good_dead": len(verdict.unexpected),
        "poison_starts": starts,
        "respawned": respawned,
        "good_completed": verdict.completed,
    }
    verdict.faults = len(starts)  # each start killed its own process
    name = f"poison job, --concurrency {size.concurrency}"
    return RowResult(name, verdict, _sizes(size), time.monotonic() - began, facts)


@dataclass(frozen=True, slots=True)
class FreezeSize:
    rounds: int = 50
    jobs_per_round: int = 4
    workers: int = 2
    concurrency: int = 8
    lease_ms: int = 500
    beat_ms: int = 100
    frozen_leases: float = 3.0
    """How long the holder stays stopped, in leases."""
    job_leases: float = 2.5
    """How long each job's handler runs, in leases: it ends while its holder is frozen, and the
    re-run started by another worker is still running at the thaw, so the thawed holder's
    completion meets a newer attempt (stale) rather than a deleted row (gone)."""


async def wait_started(processes: WorkerProcesses, ids: list[str]) -> list[Event]:
    """The first start line of each job in `ids`, once every one has started."""
    directory = processes.ledger.path.parent

    async def probe() -> list[Event] | None:
        first: dict[str, Event] = {}
        for event in read_ledger(directory):
            if event.kind == START and event.job in ids:
                first.setdefault(event.job, event)
        return list(first.values()) if len(first) == len(ids) else None

    found = await eventually(probe, timeout=60, what=f"{len(ids)} jobs started")
    assert found is not None
    return found


async def freeze_rounds(directory: Path, size: FreezeSize) -> RowResult:
    """SIGSTOP the holder of a round's jobs inside their handlers for `frozen_leases`, then
    SIGCONT; the other worker re-runs them meanwhile; the thawed holder's writes must fail."""
    began = time.monotonic()
    queue = "chaos.freeze"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        await fleet.start(size.workers)
        ids: list[str] = []
        job_ms = int(size.lease_ms * size.job_leases)
        for _ in range(size.rounds):
            batch = await enqueue(client, queue, size.jobs_per_round, "work", ms=job_ms)
            ids += batch
            started = await wait_started(processes, batch)
            holder = next(w for w in fleet.alive if w.pid == started[0].pid)
            fleet.signal(holder, signal.SIGSTOP, "sigstop")
            await anyio.sleep(size.lease_ms * size.frozen_leases / 1000)  # the fault itself
            holder.send(signal.SIGCONT)
            await wait_drained(client, queue, within_s=60)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        facts = rejections(fleet)
    bound = (size.lease_ms + size.beat_ms) / 1000 + SLACK_S
    return RowResult(
        "worker SIGSTOP 3 leases", verdict, _sizes(size), time.monotonic() - began, facts, bound
    )


def rejections(fleet: Fleet) -> dict[str, int]:
    """How the superseded holders learnt they were superseded (each one is a refused write)."""
    lost = fleet.events("lease_lost")
    return {
        "write_fenced": len(fleet.events("write_fenced")),
        "settle_refused": len(fleet.events("settle_refused")),
        "lease_lost_fenced": sum(1 for e in lost if e.get("fenced")),
        "lease_lost": len(lost),
        "self_fenced": len(fleet.events("lease_self_fenced")),
        "job_reaped": len(fleet.events("job_reaped")),
        "job_abandoned": len(fleet.events("job_abandoned")),
        "not_started": len(fleet.events("job_not_started")),
    }


@dataclass(frozen=True, slots=True)
class PauseSize:
    rounds: int = 10
    jobs_per_round: int = 4
    workers: int = 2
    concurrency: int = 8
    lease_ms: int = 3_000
    beat_ms: int = 200


async def short_freezes(directory: Path, size: PauseSize) -> RowResult:
    """SIGSTOP the holder for half a lease inside its handlers: nobody else may take its jobs."""
    began = time.monotonic()
    queue = "chaos.pause"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size)
        await fleet.start(size.workers)
        ids: list[str] = []
        for _ in range(size.rounds):
            batch = await enqueue(client, queue, size.jobs_per_round, "work", ms=size.lease_ms)
            ids += batch
            started = await wait_started(processes, batch)
            holder = next(w for w in fleet.alive if w.pid == started[0].pid)
            fleet.signal(holder, signal.SIGSTOP, "sigstop")
            await anyio.sleep(size.lease_ms / 2000)  # the fault itself: half a lease
            holder.send(signal.SIGCONT)
            await wait_drained(client, queue, within_s=60)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        facts = rejections(fleet)
    return RowResult(
        "worker SIGSTOP half a lease", verdict, _sizes(size), time.monotonic() - began, facts
    )


@dataclass(frozen=True, slots=True)
class RestartSize:
    jobs: int = 5_000
    restarts: int = 10
    workers: int = 3
    concurrency: int = 10
    lease_ms: int = 2_000
    beat_ms: int = 200
    job_ms: int = 10


async def redis_restarts(directory: Path, size: RestartSize) -> RowResult:
    """SIGKILL redis-server (AOF appendfsync always) and start it again on the same port and
    directory `restarts` times, spread over the run by progress."""
    began = time.monotonic()
    queue = "chaos.restart"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        ids = await enqueue(client, queue, size.jobs, "work", ms=size.job_ms)
        await fleet.start(size.workers)
        for k in range(size.restarts):
            threshold = size.jobs * (k + 1) // (size.restarts + 2)
            await _progress(client, queue, threshold)
            fleet.faults.append(Fault("redis sigkill", time.monotonic()))
            server.restart(crash=True)
        await wait_drained(client, queue, within_s=180)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        failures = fleet.events("beat_failed")
        facts = {
            "workers_exited_early": sum(1 for w in processes.started if w.find("worker_failed")),
            "beat_failed": len(failures),
            "max_retry_in_ms": max((int(e.get("retry_in_ms", 0)) for e in failures), default=0),
            "server_restarted_logged": len(fleet.events("server_restarted")),
            **rejections(fleet),
        }
    return RowResult(
        "Redis SIGKILL+restart (AOF always)", verdict, _sizes(size), time.monotonic() - began, facts
    )


async def _progress(client: Redis, queue: str, at_least: int) -> None:
    """Wait until `at_least` completions are counted, through server restarts."""

    async def probe() -> bool:
        try:
            return await completed_count(client, queue) >= at_least
        except (RedisConnectionError, RedisTimeoutError):
            return False

    await eventually(probe, timeout=120, what=f"{at_least} jobs completed")


@dataclass(frozen=True, slots=True)
class AmnesiaSize:
    jobs_before: int = 40
    jobs_after: int = 200
    workers: int = 2
    concurrency: int = 10
    lease_ms: int = 2_000
    beat_ms: int = 200
    job_ms: int = 500


async def redis_amnesia(directory: Path, size: AmnesiaSize) -> RowResult:
    """SIGKILL a redis-server without persistence while jobs are held and restart it empty:
    the workers live on, log the restart, and write nothing stale; later jobs all complete."""
    began = time.monotonic()
    queue = "chaos.amnesia"
    async with stage(directory, appendonly=False) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size)
        await fleet.start(size.workers)
        before = await enqueue(client, queue, size.jobs_before, "work", ms=size.job_ms)
        await wait_started(processes, before[:1])
        fleet.faults.append(Fault("redis sigkill, data gone", time.monotonic()))
        server.restart(crash=True)
        after = await _enqueue_through(client, queue, size.jobs_after, size.job_ms)
        await wait_drained(client, queue, within_s=120)
        for worker in fleet.alive:
            await worker.wait_event("server_restarted", within_s=30)
        alive = len(fleet.alive)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, [*before, *after])
        after_verdict = await judge(client, fleet, after)
        facts = {
            "workers_alive_after": alive,
            "server_restarted_logged": len(fleet.events("server_restarted")),
            "lost_after_restart": after_verdict.lost_count,
            "completed_after_restart": after_verdict.completed,
            **rejections(fleet),
        }
    return RowResult(
        "Redis SIGKILL+restart (no persistence)",
        verdict,
        _sizes(size),
        time.monotonic() - began,
        facts,
    )


async def _enqueue_through(client: Redis, queue: str, count: int, job_ms: int) -> list[str]:
    """Enqueue once the restarted server answers (the client reconnects on its own)."""

    async def probe() -> list[str] | None:
        try:
            return await enqueue(client, queue, count, "work", ms=job_ms)
        except (RedisConnectionError, RedisTimeoutError):
            return None

    ids = await eventually(probe, timeout=30, what="an enqueue after the restart")
    assert ids is not None
    return ids


@dataclass(frozen=True, slots=True)
class ClientKillSize:
    jobs: int = 40_000
    kill_every_ms: int = 2_000
    max_kills: int = 30
    workers: int = 3
    concurrency: int = 10
    lease_ms: int = 1_000
    beat_ms: int = 200
    job_ms: int = 50


async def client_kills(directory: Path, size: ClientKillSize) -> RowResult:
    """Every `kill_every_ms`, kill connections: alternately every normal client (`CLIENT KILL
    TYPE normal`) and, by id, those whose last command is a script call (mid-claim, mid-ack)."""
    began = time.monotonic()
    queue = "chaos.clientkill"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        ids = await enqueue(client, queue, size.jobs, "work", ms=size.job_ms)
        await fleet.start(size.workers)
        killer = Redis(port=server.port)
        killed = 0
        try:
            for k in range(size.max_kills):
                if await unfinished(client, queue) == 0:
                    break
                await anyio.sleep(size.kill_every_ms / 1000)  # the fault's cadence
                fleet.faults.append(Fault("client kill", time.monotonic()))
                killed += await _kill_clients(killer, scripts_only=k % 2 == 1)
        finally:
            await killer.aclose()
        await wait_drained(client, queue, within_s=180)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        facts = {"connections_killed": killed, "rounds": len(fleet.faults), **rejections(fleet)}
        facts["beat_failed"] = len(fleet.events("beat_failed"))
        facts["settle_retrying"] = len(fleet.events("settle_retrying"))
        facts["renew_failed"] = len(fleet.events("renew_failed"))
    return RowResult("connections killed", verdict, _sizes(size), time.monotonic() - began, facts)


async def _kill_clients(killer: Redis, *, scripts_only: bool) -> int:
    if not scripts_only:
        return int(await killer.client_kill_filter(_type="normal", skipme=True))
    count = 0
    for entry in await killer.client_list():
        if entry.get("cmd") in ("evalsha", "eval", "blpop") and entry.get("name") != "killer":
            with contextlib.suppress(ResponseError):
                count += int(await killer.client_kill_filter(_id=entry["id"]))
    return count


@dataclass(frozen=True, slots=True)
class HeldKillSize:
    jobs: int = 240
    kill_every_ms: int = 500
    max_kills: int = 400
    workers: int = 3
    concurrency: int = 4
    lease_ms: int = 1_000
    beat_ms: int = 200
    job_ms: int = 3_500
    """Longer than 3 leases: each lease must be renewed about ten times under the kills."""


async def held_kills(directory: Path, size: HeldKillSize) -> RowResult:
    """Workers hold long jobs while `CLIENT KILL TYPE normal` drops every connection each
    `kill_every_ms`: a dropped idle connection must cost no renewal tick, so no lease is
    self-fenced and no job runs twice while the server is up."""
    began = time.monotonic()
    queue = "chaos.heldkill"
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        ids = await enqueue(client, queue, size.jobs, "work", ms=size.job_ms)
        await fleet.start(size.workers)
        killer = Redis(port=server.port)
        killed = 0
        try:
            for _ in range(size.max_kills):
                if await unfinished(client, queue) == 0:
                    break
                await anyio.sleep(size.kill_every_ms / 1000)  # the fault's cadence
                fleet.faults.append(Fault("client kill", time.monotonic()))
                killed += await _kill_clients(killer, scripts_only=False)
        finally:
            await killer.aclose()
        await wait_drained(client, queue, within_s=60)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        facts = {"connections_killed": killed, "rounds": len(fleet.faults), **rejections(fleet)}
        facts["renew_failed"] = len(fleet.events("renew_failed"))
        facts["beat_failed"] = len(fleet.events("beat_failed"))
        # A self-fence with the loop stalled near a lease is the machine's, not the kills'.
        facts["max_loop_stall_ms"] = max(
            (int(e.get("lag_ms", 0)) for e in fleet.events("event_loop_blocked")), default=0
        )
    return RowResult(
        "held jobs, connections killed", verdict, _sizes(size), time.monotonic() - began, facts
    )


@dataclass(frozen=True, slots=True)
class LostReplySize:
    jobs: int = 8_000
    replies_to_lose: int = 200
    lose_rate: float = 0.15
    """The chance that a claim or settle loses its reply (a re-sent one too) until the budget
    is spent: lost replies strike at random, not back to back."""
    workers: int = 3
    concurrency: int = 10
    lease_ms: int = 1_000
    beat_ms: int = 200
    job_ms: int = 10


def script_call_of(*verbs: str) -> Callable[[bytes], bool]:
    """Matches a request chunk that calls one of `verbs`' scripts (by their SHA)."""
    scripts = Scripts()
    shas = [scripts.by_name[verb].sha.encode() for verb in verbs]
    return lambda chunk: any(sha in chunk for sha in shas)


async def lost_replies(directory: Path, size: LostReplySize) -> RowResult:
    """A proxy forwards claim and settle calls, then drops their replies and closes the
    connection, `replies_to_lose` times: the server did the work, the worker never heard."""
    began = time.monotonic()
    queue = "chaos.lostreply"
    async with stage(directory) as (server, client, processes), Proxy(server.port) as proxy:
        fleet = Fleet.sized(processes, queue, proxy.url, size, max_attempts=20)
        ids = await enqueue(client, queue, size.jobs, "work", ms=size.job_ms)
        proxy.lose_replies(script_call_of("claim", "settle"), size.replies_to_lose, size.lose_rate)
        await fleet.start(size.workers)
        await wait_drained(client, queue, within_s=180)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        facts = {"replies_lost": proxy.replies_lost, **rejections(fleet)}
        facts["beat_failed"] = len(fleet.events("beat_failed"))
        facts["settle_retrying"] = len(fleet.events("settle_retrying"))
        facts["repeated_settles"] = sum(
            1 for e in fleet.events("job_completed") if e.get("repeated")
        )
    fleet.faults.extend(Fault("lost reply", began) for _ in range(facts["replies_lost"]))
    verdict.faults = facts["replies_lost"]
    return RowResult("lost replies", verdict, _sizes(size), time.monotonic() - began, facts)


@dataclass(frozen=True, slots=True)
class PartitionSize:
    rounds: int = 3
    jobs_per_round: int = 6
    lease_ms: int = 1_500
    beat_ms: int = 200
    concurrency: int = 10


@asynccontextmanager
async def two_sides(
    directory: Path, queue: str, size: PartitionSize, extra: Sequence[str] = ()
) -> AsyncIterator[tuple[Redis, Fleet, Fleet, Proxy]]:
    """A worker behind its own proxy (the one to cut off) and one connected directly."""
    async with stage(directory) as (server, client, processes), Proxy(server.port) as proxy:
        args = ["--concurrency", str(size.concurrency), "--max-attempts", "20", *extra]
        cut = Fleet(processes, queue, proxy.url, size.lease_ms, size.beat_ms, args, name="cut")
        other = Fleet(processes, queue, server.url, size.lease_ms, size.beat_ms, args, name="ok")
        await cut.start(1)
        yield client, cut, other, proxy


async def short_partitions(directory: Path, size: PartitionSize) -> RowResult:
    """Cut one worker off (packets held, as TCP would retransmit them) for half a lease while it
    runs jobs, with another worker ready to take them: nothing may be reclaimed."""
    began = time.monotonic()
    async with two_sides(directory, "chaos.shortcut", size) as (client, cut, other, proxy):
        ids: list[str] = []
        job_ms = int(size.lease_ms * 1.5)
        for _ in range(size.rounds):
            batch = await enqueue(client, cut.queue, size.jobs_per_round, "work", ms=job_ms)
            ids += batch
            await wait_started(cut.processes, batch)
            rescuer = (await other.start(1))[0]  # started now, so the cut worker holds all
            cut.faults.append(Fault("partition", time.monotonic(), cut.processes.started[0].pid))
            proxy.partition()
            await anyio.sleep(size.lease_ms / 2000)  # the fault itself: half a lease
            proxy.heal()
            await wait_drained(client, cut.queue, within_s=60)
            rescuer.send(signal.SIGTERM)
            await rescuer.wait_exit(STOP_WITHIN_S)
        await stop_gracefully(cut)
        verdict = await judge(client, cut, ids)
        facts = rejections(cut)
    return RowResult("partition < lease", verdict, _sizes(size), time.monotonic() - began, facts)


async def long_partitions(directory: Path, size: PartitionSize) -> RowResult:
    """Cut one worker off for 3 leases while it runs jobs: some end inside the cut (their
    completions wait in the held pipe), some run on. The other worker takes them all over; the
    cut-off worker stops the long ones itself within about a lease; every late write it makes
    after the heal is refused."""
    began = time.monotonic()
    async with two_sides(directory, "chaos.longcut", size) as (client, cut, other, proxy):
        ids: list[str] = []
        cut_offs: list[float] = []
        for _ in range(size.rounds):
            # Half the jobs end 10 ms into the cut (their completions go into it), half run
            # on until 2 leases past its end; both wait for a time written at the cut, so the
            # rescuer's start (seconds on a loaded machine) ends none of them before it.
            release = directory / f"release-{len(cut_offs)}"
            long_release = release.with_name(f"{release.name}-long")
            half = size.jobs_per_round // 2
            batch = await enqueue(client, cut.queue, half, "hold", release=str(release))
            batch += await enqueue(
                client, cut.queue, size.jobs_per_round - half, "hold", release=str(long_release)
            )
            ids += batch
            await wait_started(cut.processes, batch)
            # The rescuer is up before the cut (with nothing left to claim): recovery counts
            # from the cut, and a process start is no part of it.
            rescuer = (await other.start(1))[0]
            holder = cut.processes.started[0]
            cut.faults.append(Fault("partition", time.monotonic(), holder.pid))
            cut_offs.append(time.time())
            proxy.partition()
            release.write_text(str(time.time() + SETTLE_AFTER_CUT_S), encoding="utf-8")
            long_end = time.time() + 5 * size.lease_ms / 1000
            long_release.write_text(str(long_end), encoding="utf-8")
            await anyio.sleep(max(0.0, 3 * size.lease_ms / 1000 - (time.time() - cut_offs[-1])))
            proxy.heal()
            await wait_drained(client, cut.queue, within_s=60)
            rescuer.send(signal.SIGTERM)
            await rescuer.wait_exit(STOP_WITHIN_S)
        await stop_gracefully(cut)
        verdict = await judge(client, cut, ids)
        holder = cut.processes.started[0]
        facts: dict[str, Any] = {
            **rejections(cut),
            "cut_off_write_fenced": len(holder.find("write_fenced")),
            "cut_off_settle_refused": len(holder.find("settle_refused")),
            "cut_off_self_fenced": len(holder.find("lease_self_fenced")),
            "self_fence_after_s": _self_fence_delays(holder.find("lease_self_fenced"), cut_offs),
            "running_at_cut": running_at(read_ledger(cut.processes.ledger.path.parent), cut.faults),
        }
    bound = (size.lease_ms + size.beat_ms) / 1000 + SLACK_S
    return RowResult(
        "partition > lease", verdict, _sizes(size), time.monotonic() - began, facts, bound
    )


def running_at(events: Sequence[Event], faults: Sequence[Fault]) -> int:
    """(fault, job) pairs where the fault's target was running the job's handler at the fault:
    it had started the job and not yet finished it."""
    count = 0
    for fault in faults:
        latest: dict[str, Event] = {}
        for event in events:
            if event.mono <= fault.at:
                latest[event.job] = event
        count += sum(1 for e in latest.values() if e.kind == START and e.pid == fault.pid)
    return count


def _self_fence_delays(events: list[dict[str, Any]], cut_offs: list[float]) -> list[float]:
    """Per self-fence log line: seconds since the latest cut-off before it (wall clock)."""
    delays = []
    for event in events:
        at = dt.datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00"))
        seconds = at.timestamp()
        before = [c for c in cut_offs if c <= seconds]
        if before:
            delays.append(round(seconds - before[-1], 3))
    return delays


@dataclass(frozen=True, slots=True)
class LatencySize:
    jobs: int = 3_000
    workers: int = 2
    delay_ms: int = 100
    jitter_ms: int = 50
    job_ms: int = 50
    concurrency: int = 20


async def slow_network(directory: Path, size: LatencySize) -> RowResult:
    """Every byte between workers and Redis delayed 100 +/- 50 ms, at the default lease and beat:
    no lease may be reclaimed, lost or self-fenced."""
    began = time.monotonic()
    defaults = WorkerSettings(queues=("q",))
    queue = "chaos.latency"
    async with stage(directory) as (server, client, processes), Proxy(server.port) as proxy:
        proxy.latency(size.delay_ms / 1000, size.jitter_ms / 1000)
        fleet = Fleet(
            processes,
            queue,
            proxy.url,
            defaults.lease_ms,
            defaults.beat_ms,
            extra=["--concurrency", str(size.concurrency)],
        )
        await fleet.start(size.workers)
        ids = await enqueue(client, queue, size.jobs, "work", ms=size.job_ms)
        await wait_drained(client, queue, within_s=240)
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
        facts = rejections(fleet)
    sizes = {**_sizes(size), "lease_ms": defaults.lease_ms, "beat_ms": defaults.beat_ms}
    return RowResult("latency 100±50 ms", verdict, sizes, time.monotonic() - began, facts)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sizes(size: Any) -> dict[str, Any]:
    return {name: getattr(size, name) for name in size.__slots__}


__all__ = ["KillSize", "RowResult", "sigkill_soak", "unfinished"]
