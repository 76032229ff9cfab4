"""The recovery row: SIGKILL a random worker every few seconds while a mixed load runs (short
jobs, and a few running past 3 leases, which deaths turn into suspects), and measure recovery
per job from its lease deadline: the time from a reaped lease's deadline (on the server clock,
as the reaper judges it) to the job's next handler start.

The deadlines are sampled by polling `active` (every job's deadline score and attempts) a few
times per renewal interval: a lease's last score before it is reaped is its deadline.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from redis.asyncio import Redis

from emq_worker import JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys
from tests.chaos.faults import Fleet, judge, pick, wait_drained
from tests.chaos.ledger import START, Event, read_ledger
from tests.chaos.rows import RowResult, _sizes, stage, stop_gracefully

SAMPLE_S = 0.05
"""How often `active` is polled for deadlines (a renewal moves one every lease / 3)."""
RECOVERY_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class RecoverySize:
    jobs: int = 4_000
    workers: int = 3
    concurrency: int = 20
    lease_ms: int = 1_200
    beat_ms: int = 200
    fault_s: float = 20.0
    """Kills happen over this window, while the jobs are fed in over it."""
    kill_every_s: float = 3.0
    long_share: float = 0.02
    long_leases: float = 3.5
    """A long job runs this many leases: past 3, as in the issue's harness."""
    short_ms: tuple[int, int] = (5, 80)


@dataclass(slots=True)
class Deadlines:
    """The last deadline seen for each (job, attempts), as time.monotonic() in this process."""

    seen: dict[tuple[str, int], float] = field(default_factory=dict)

    async def sample(self, client: Redis, queue: str) -> None:
        keys = QueueKeys.of(queue)
        async with client.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.zrange(keys.active, 0, -1, withscores=True)
            (seconds, micros), active = await pipe.execute()
        offset = int(seconds) + int(micros) / 1e6 - time.monotonic()
        if not active:
            return
        async with client.pipeline(transaction=False) as pipe:
            for member, _ in active:
                pipe.hget(keys.job(_text(member)), "attempts")
            attempts = await pipe.execute()
        for (member, score), tokens in zip(active, attempts, strict=True):
            if tokens is not None:
                self.seen[(_text(member), int(tokens))] = score / 1000 - offset

    def recovery(self, events: Sequence[Event]) -> tuple[list[float], int]:
        """Per lease that ended without its job completing (a later attempt started): seconds
        from its deadline to the next start; and how many such leases had no deadline seen."""
        starts: dict[str, list[Event]] = {}
        for event in events:
            if event.kind == START:
                starts.setdefault(event.job, []).append(event)
        times, unseen = [], 0
        for (job, attempts), deadline in self.seen.items():
            later = [e for e in starts.get(job, []) if e.attempt > attempts]
            if later:
                times.append(later[0].mono - deadline)
        for job, runs in starts.items():
            unseen += sum(
                1 for e in runs if e.attempt > 1 and (job, e.attempt - 1) not in self.seen
            )
        return times, unseen


async def feed(client: Redis, queue: str, size: RecoverySize, rng: random.Random) -> list[str]:
    """Enqueue the jobs in ten slices a second over the fault window."""
    producer = Producer(client)
    ids: list[str] = []
    slices = max(1, int(size.fault_s * 10))
    long_ms = int(size.lease_ms * size.long_leases)
    for n in range(slices):
        count = size.jobs * (n + 1) // slices - len(ids)
        specs = [
            JobSpec(
                "work",
                {"ms": long_ms if rng.random() < size.long_share else rng.randint(*size.short_ms)},
            )
            for _ in range(count)
        ]
        ids += [str(e.job_id) for e in await producer.enqueue_many(queue, specs)]
        await anyio.sleep(0.1)  # the feed's own pace, not a settle wait
    return ids


async def kill_now_and_then(fleet: Fleet, size: RecoverySize, rng: random.Random) -> None:
    """SIGKILL a random live worker every `kill_every_s` over the fault window; respawn it."""
    ends = time.monotonic() + size.fault_s
    while time.monotonic() + size.kill_every_s <= ends:
        await anyio.sleep(size.kill_every_s)  # the fault's cadence
        if fleet.alive:
            fleet.kill(pick(rng, fleet.alive))
        fleet.replace_exited(size.workers)


async def kill_recovery(directory: Path, size: RecoverySize, seed: int = 7) -> RowResult:
    rng = random.Random(seed)
    began = time.monotonic()
    queue = "chaos.recovery"
    deadlines = Deadlines()
    async with stage(directory) as (server, client, processes):
        fleet = Fleet.sized(processes, queue, server.url, size, max_attempts=20)
        await fleet.start(size.workers)
        ids: list[str] = []
        async with anyio.create_task_group() as group:

            async def sampler() -> None:
                while True:
                    await deadlines.sample(client, queue)
                    await anyio.sleep(SAMPLE_S)  # the poll's own pace

            group.start_soon(sampler)
            group.start_soon(kill_now_and_then, fleet, size, rng)
            ids = await feed(client, queue, size, rng)
            await wait_drained(client, queue, within_s=180)
            group.cancel_scope.cancel()
        await stop_gracefully(fleet)
        verdict = await judge(client, fleet, ids)
    events = read_ledger(processes.ledger.path.parent)
    times, unseen = deadlines.recovery(events)
    verdict.recovery_s = times
    facts = {
        "kills": len(fleet.faults),
        "leases_recovered": len(times),
        "deadline_unseen": unseen,
        "suspect_claims": sum(1 for e in fleet.events("job_claimed") if e.get("suspect")),
        "suspects_side_by_side": side_by_side(fleet, events),
        "not_started": len(fleet.events("job_not_started")),
    }
    bound = (size.lease_ms + size.beat_ms) / 1000 + RECOVERY_SLACK_S
    name = "SIGKILL every ~3 s, from deadline"
    return RowResult(name, verdict, _sizes(size), time.monotonic() - began, facts, bound)


def side_by_side(fleet: Fleet, events: Sequence[Event]) -> int:
    """Pairs of suspects whose handlers overlapped in one process (a suspect leased beside
    another once it had waited half a lease); a run without `done` lasts to the process's last
    ledger line (it was killed)."""
    spans: dict[tuple[str, int, int], list[float]] = {}
    last: dict[int, float] = {}
    for event in events:
        spans.setdefault((event.job, event.attempt, event.pid), []).append(event.mono)
        last[event.pid] = max(last.get(event.pid, event.mono), event.mono)
    pairs = 0
    for worker in fleet.processes.started:
        runs = []
        for claimed in worker.find("job_claimed", suspect=True):
            marks = spans.get((str(claimed["job_id"]), int(claimed["attempts"]), worker.pid))
            if marks:
                runs.append((marks[0], marks[1] if len(marks) > 1 else last[worker.pid]))
        runs.sort()
        pairs += sum(1 for i, a in enumerate(runs) for b in runs[i + 1 :] if b[0] < a[1])
    return pairs


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
