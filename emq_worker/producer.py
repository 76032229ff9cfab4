"""The producer API: enqueue jobs now, in N ms, or at a time; many in one round trip.

Job ids are EchoMQ branded `JOB` ids minted from this process's node id. A caller-chosen id is
idempotent: enqueueing it again reports a duplicate and keeps the original row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import anyio.from_thread
from redis.asyncio import Redis

from emq_worker import codec
from emq_worker.config import DEFAULT_URL
from emq_worker.connection import connect
from emq_worker.errors import ConfigError
from emq_worker.ids import DEFAULT_NODE_ID, SnowflakeMinter, job_id
from emq_worker.protocol import DEFAULT_WIRE_VERSION, JobId
from emq_worker.queue import NewJob, Queue, ScheduleMode
from emq_worker.scripts import Scripts

MAX_REMINTS = 3


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job for `enqueue_many`: a task and its JSON kwargs, or a raw payload."""

    task: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    payload: bytes | None = None
    delay_ms: int | None = None
    run_at: dt.datetime | None = None
    job_id: str | None = None


class Enqueued(NamedTuple):
    job_id: JobId
    duplicate: bool
    """True when a job with this (caller-chosen) id already existed; the original is kept."""


def _when(delay_ms: int | None, run_at: dt.datetime | None) -> tuple[ScheduleMode, int]:
    if delay_ms is not None and run_at is not None:
        raise ConfigError("give delay_ms or run_at, not both")
    if delay_ms is not None:
        if delay_ms < 0:
            raise ConfigError(f"delay_ms must be >= 0; got {delay_ms}")
        return ("in", delay_ms) if delay_ms else ("now", 0)
    if run_at is not None:
        if run_at.tzinfo is None:
            raise ConfigError(f"run_at must be timezone-aware; got {run_at.isoformat()}")
        return "at", int(run_at.timestamp() * 1000)
    return "now", 0


class Producer:
    def __init__(self, client: Redis, *, node_id: int = DEFAULT_NODE_ID) -> None:
        self.client = client
        self.scripts = Scripts()
        self.minter = SnowflakeMinter(node_id)
        self._queues: dict[str, Queue] = {}

    @classmethod
    def from_url(
        cls,
        url: str = DEFAULT_URL,
        *,
        node_id: int = DEFAULT_NODE_ID,
        wire_version: str = DEFAULT_WIRE_VERSION,
    ) -> Producer:
        return cls(connect(url, wire_version), node_id=node_id)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def queue(self, name: str) -> Queue:
        if name not in self._queues:
            self._queues[name] = Queue(self.client, self.scripts, name)
        return self._queues[name]

    async def enqueue(
        self,
        queue: str,
        task: str,
        kwargs: Mapping[str, Any] | None = None,
        *,
        delay_ms: int | None = None,
        run_at: dt.datetime | None = None,
        job_id: str | None = None,
    ) -> Enqueued:
        """Enqueue `task(**kwargs)` on `queue`, now or later (server clock for delay_ms)."""
        spec = JobSpec(task, kwargs or {}, None, delay_ms, run_at, job_id)
        return (await self.enqueue_many(queue, [spec]))[0]

    async def enqueue_raw(
        self,
        queue: str,
        payload: bytes,
        *,
        delay_ms: int | None = None,
        run_at: dt.datetime | None = None,
        job_id: str | None = None,
    ) -> Enqueued:
        """Enqueue opaque bytes, for a queue bound to a raw handler or a non-Python consumer."""
        spec = JobSpec(payload=payload, delay_ms=delay_ms, run_at=run_at, job_id=job_id)
        return (await self.enqueue_many(queue, [spec]))[0]

    async def enqueue_many(self, queue: str, specs: Sequence[JobSpec]) -> list[Enqueued]:
        """Enqueue all of `specs` in one script call (one round trip), all or none."""
        jobs = [self._new_job(spec) for spec in specs]
        chosen = [spec.job_id is not None for spec in specs]
        results: list[Enqueued | None] = [None] * len(jobs)
        todo = list(range(len(jobs)))
        for _ in range(MAX_REMINTS + 1):
            flags = await self.queue(queue).enqueue([jobs[i] for i in todo])
            retry = []
            for i, enqueued in zip(todo, flags, strict=True):
                if enqueued or chosen[i]:
                    results[i] = Enqueued(jobs[i].id, not enqueued)
                else:
                    # A freshly minted id collided (another producer on the same node id):
                    # mint again rather than lose the job.
                    jobs[i] = NewJob(
                        self.minter.job_id(), jobs[i].payload, jobs[i].mode, jobs[i].ms
                    )
                    retry.append(i)
            if not retry:
                return [result for result in results if result is not None]
            todo = retry
        raise ConfigError(
            f"minted job ids kept colliding; is another producer using node_id "
            f"{self.minter.node_id}?"
        )

    def _new_job(self, spec: JobSpec) -> NewJob:
        payload = spec.payload if spec.payload is not None else codec.encode(spec.task, spec.kwargs)
        mode, ms = _when(spec.delay_ms, spec.run_at)
        new_id = job_id(spec.job_id) if spec.job_id is not None else self.minter.job_id()
        return NewJob(new_id, payload, mode, ms)


class SyncProducer:
    """A blocking facade over Producer for code without an event loop (a portal thread)."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, producer: Producer) -> None:
        self._portal = portal
        self._producer = producer

    def enqueue(
        self, queue: str, task: str, kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Enqueued:
        return self._portal.call(lambda: self._producer.enqueue(queue, task, kwargs, **options))

    def enqueue_raw(self, queue: str, payload: bytes, **options: Any) -> Enqueued:
        return self._portal.call(lambda: self._producer.enqueue_raw(queue, payload, **options))

    def enqueue_many(self, queue: str, specs: Sequence[JobSpec]) -> list[Enqueued]:
        return self._portal.call(self._producer.enqueue_many, queue, specs)


@contextmanager
def sync_producer(
    url: str = DEFAULT_URL,
    *,
    node_id: int = DEFAULT_NODE_ID,
    wire_version: str = DEFAULT_WIRE_VERSION,
) -> Iterator[SyncProducer]:
    """`with sync_producer(url) as p: p.enqueue("orders", "charge", {...})`."""
    with anyio.from_thread.start_blocking_portal() as portal:
        producer = portal.call(lambda: _make(url, node_id, wire_version))
        try:
            yield SyncProducer(portal, producer)
        finally:
            portal.call(producer.aclose)


async def _make(url: str, node_id: int, wire_version: str) -> Producer:
    return Producer.from_url(url, node_id=node_id, wire_version=wire_version)
