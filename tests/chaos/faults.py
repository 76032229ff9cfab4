"""Fault injection on real processes: a fleet of `emq-worker run` daemons running the chaos app
(respawned after a kill, bounded), plus the pieces every row shares: enqueue, wait for the queue
to drain, and judge the run with checker.py.

Every fault targets a process this module started or a loopback connection; every loop is bounded
in count and time.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.asyncio import Redis

from emq_worker import JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys
from tests.chaos.checker import Fault, Verdict, check, read_final
from tests.chaos.ledger import read_ledger
from tests.support.processes import REPO_ROOT, WorkerProcess, WorkerProcesses
from tests.support.wait import eventually

CHAOS_APP = "tests.chaos.app:app"
START_WITHIN_S = 60.0
ENQUEUE_BATCH = 500


class Cadence(Protocol):
    """What every row's size says about its workers."""

    @property
    def lease_ms(self) -> int: ...
    @property
    def beat_ms(self) -> int: ...
    @property
    def concurrency(self) -> int: ...


@dataclass(slots=True)
class Fleet:
    """Worker daemons on one queue; `spawn` adds one, `replace_exited` respawns the dead."""

    processes: WorkerProcesses
    queue: str
    redis_url: str
    lease_ms: int
    beat_ms: int
    extra: Sequence[str] = ()
    max_spawns: int = 100
    name: str = "w"
    """Log file prefix: fleets sharing one WorkerProcesses need distinct ones."""
    faults: list[Fault] = field(default_factory=list)
    _spawned: int = 0

    @classmethod
    def sized(
        cls,
        processes: WorkerProcesses,
        queue: str,
        redis_url: str,
        size: Cadence,
        *,
        max_attempts: int | None = None,
        max_spawns: int = 100,
    ) -> Fleet:
        """A fleet at the row's lease, beat and concurrency (and crash-loop cap, when given)."""
        extra = ["--concurrency", str(size.concurrency)]
        if max_attempts is not None:
            extra += ["--max-attempts", str(max_attempts)]
        return cls(
            processes, queue, redis_url, size.lease_ms, size.beat_ms, extra, max_spawns=max_spawns
        )

    def spawn(self) -> WorkerProcess:
        if self._spawned >= self.max_spawns:
            raise AssertionError(f"more than {self.max_spawns} workers spawned")
        self._spawned += 1
        return self.processes.start(
            f"{self.name}{self._spawned}",
            queue=self.queue,
            redis_url=self.redis_url,
            lease_ms=self.lease_ms,
            beat_ms=self.beat_ms,
            extra=["--app", CHAOS_APP, "--app-dir", str(REPO_ROOT), *self.extra],
        )

    async def start(self, count: int) -> list[WorkerProcess]:
        started = [self.spawn() for _ in range(count)]
        for worker in started:
            await worker.wait_event("worker_started", within_s=START_WITHIN_S)
        return started

    @property
    def alive(self) -> list[WorkerProcess]:
        return [w for w in self.processes.started if w.returncode is None]

    def replace_exited(self, keep: int) -> list[WorkerProcess]:
        """Spawn workers until `keep` are alive (not waiting for them to start)."""
        return [self.spawn() for _ in range(max(0, keep - len(self.alive)))]

    def signal(self, worker: WorkerProcess, sig: signal.Signals, kind: str) -> Fault:
        fault = Fault(kind, time.monotonic(), worker.pid)
        worker.send(sig)
        self.faults.append(fault)
        return fault

    def kill(self, worker: WorkerProcess) -> Fault:
        fault = self.signal(worker, signal.SIGKILL, "sigkill")
        worker.kill()  # reap it
        return fault

    def logs(self) -> dict[int, list[dict[str, Any]]]:
        return {w.pid: w.events() for w in self.processes.started}

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for w in self.processes.started for e in w.find(name)]

    def tails(self) -> str:
        return "\n".join(w.tail() for w in self.processes.started)

    def stop_all(self) -> None:
        for worker in self.processes.started:
            worker.kill()


async def enqueue(client: Redis, queue: str, count: int, task: str, **kwargs: Any) -> list[str]:
    """Enqueue `count` jobs of `task(**kwargs)`; the ids whose enqueue was acknowledged."""
    producer = Producer(client)
    ids: list[str] = []
    for first in range(0, count, ENQUEUE_BATCH):
        specs = [JobSpec(task, kwargs) for _ in range(min(ENQUEUE_BATCH, count - first))]
        ids += [str(e.job_id) for e in await producer.enqueue_many(queue, specs)]
    return ids


async def unfinished(client: Redis, queue: str) -> int:
    """Jobs pending, active or scheduled."""
    keys = QueueKeys.of(queue)
    async with client.pipeline(transaction=False) as pipe:
        for key in (keys.pending, keys.active, keys.schedule):
            pipe.zcard(key)
        counts = await pipe.execute()
    return int(sum(counts))


async def wait_drained(client: Redis, queue: str, *, within_s: float, what: str = "") -> None:
    async def probe() -> bool:
        return await unfinished(client, queue) == 0

    await eventually(probe, timeout=within_s, what=f"queue {queue} drained {what}")


async def judge(
    client: Redis,
    fleet: Fleet,
    ids: Sequence[str],
    *,
    must_complete: Sequence[str] = (),
) -> Verdict:
    """The checker's verdict once the run is over (workers may still be alive)."""
    final = await read_final(client, fleet.queue, ids)
    events = read_ledger(fleet.processes.ledger.path.parent)
    return check(ids, events, fleet.logs(), final, fleet.faults, must_complete=must_complete)


def pick(rng: random.Random, workers: Sequence[WorkerProcess]) -> WorkerProcess:
    return workers[rng.randrange(len(workers))]
