"""The producer API: enqueue jobs now, in N ms, or at a time; many in one round trip; wait for
a job's result.

Job ids are EchoMQ branded `JOB` ids minted from this process's node id. A caller-chosen id is
idempotent: enqueueing it again reports a duplicate and keeps the original row, while the job
lives and for the workers' completion window after it completed (`completed_ttl_ms`, a day by
default), so re-sending an enqueue whose reply was lost never runs the job twice. A `dedup_id`
makes any enqueue idempotent the same way: enqueueing again returns the id of the job parked
under the key (until the window after its completion ends, it is removed, or `dedup_ttl_ms`).
Each script call carries a nonce: a call the client library re-sends (its reply was lost) is
answered from the first copy's memo, so a minted id is never minted again for it.

Every call waits at most `socket_timeout_s` (5 s by default) for the server's reply: a frozen
server, or another service on the port, ends it with ServerUnreachableError (ServerTimeoutError
for no answer) naming the server, never hangs the caller (jobs/enqueue_resend.py bounds the
re-sends).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, NamedTuple, Unpack

from redis.asyncio import Redis

from emq_worker.errors import ConfigError
from emq_worker.jobs import codec, tracing
from emq_worker.jobs.enqueue_resend import send_enqueue
from emq_worker.jobs.flow_tree import Flow, FlowJob, write_flow
from emq_worker.jobs.options import (
    ENQUEUE_NAMES,
    PLACEMENT_NAMES,
    EnqueueOptions,
    Placement,
    check_names,
    one_policy,
    split_options,
)
from emq_worker.jobs.partition_route import PartitionRouter, send_split
from emq_worker.jobs.policy import JobPolicy
from emq_worker.jobs.repeat import RepeatInfo, Schedule, encode_payload, register
from emq_worker.jobs.results import wait_result
from emq_worker.protocol.ids import DEFAULT_NODE_ID, SnowflakeMinter, job_id
from emq_worker.protocol.lane_verbs import validate_group, validate_priority
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.protocol.payload_limits import check_payload_size
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.queue_names import ProducerNames
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import NewJob, ScheduleMode
from emq_worker.valkey.address import RedisAddress, address_of
from emq_worker.valkey.connection import DEFAULT_TIMEOUT_S, DEFAULT_URL, connect
from emq_worker.valkey.reach import naming_server

MAX_REMINTS = 3
NOW: tuple[ScheduleMode, int] = ("now", 0)
_DEDUP_ID = re.compile(r"[A-Za-z0-9._-]{1,255}")


@dataclass(frozen=True, slots=True, init=False)
class JobSpec:
    """One job for `enqueue_many`: a task and its JSON kwargs, or a raw payload, with the same
    keyword options as `Producer.enqueue` (`EnqueueOptions`). The task's policy may also be
    overridden with `options=JobPolicy(...)`."""

    task: str
    kwargs: Mapping[str, Any]
    payload: bytes | None
    options: JobPolicy | None
    """Per-job overrides of the task's max_attempts, backoff, timeout_ms and result_ttl_ms
    (carried in the JSON envelope; not for raw payloads)."""
    placement: Placement
    """Where, when and under which identity it waits (delay, id, dedup id, lane, priority)."""

    def __init__(
        self,
        task: str = "",
        kwargs: Mapping[str, Any] | None = None,
        *,
        payload: bytes | None = None,
        options: JobPolicy | None = None,
        **given: Unpack[EnqueueOptions],
    ) -> None:
        check_names(given, ENQUEUE_NAMES, "JobSpec")
        placement, overrides = split_options(given)
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "kwargs", {} if kwargs is None else kwargs)
        object.__setattr__(self, "payload", payload)
        object.__setattr__(self, "options", one_policy(options, overrides))
        object.__setattr__(self, "placement", placement)


class Enqueued(NamedTuple):
    job_id: JobId
    """The job that holds the place: the new one, or the one already there on a duplicate."""
    duplicate: bool
    """True when nothing was enqueued: a job with this (caller-chosen) id exists or completed
    within the completion window, or a job is parked under the dedup id, live or completed
    within the window (then `job_id` is that job's id). A completed job is `absent` to
    `state_of`; its result, if it stored one, is there while its `result_ttl_ms` lasts."""


_checked_id = job_id


def check_dedup_id(dedup_id: str) -> str:
    """The dedup id as given, or ConfigError naming it (the CLI checks it before connecting)."""
    if not isinstance(dedup_id, str) or not _DEDUP_ID.fullmatch(dedup_id):
        raise ConfigError(f"dedup_id must match [A-Za-z0-9._-]{{1,255}}; got {dedup_id!r}")
    return dedup_id


def _dedup(dedup_id: str, ttl_ms: int | None) -> tuple[str, int]:
    check_dedup_id(dedup_id)
    if ttl_ms is None:
        return dedup_id, 0
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        raise ConfigError(f"dedup_ttl_ms must be an integer >= 1 (or None); got {ttl_ms!r}")
    return dedup_id, ttl_ms


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
    def __init__(
        self,
        client: Redis,
        *,
        node_id: int = DEFAULT_NODE_ID,
        url: str | RedisAddress | None = None,
    ) -> None:
        """`url`, the server `client` talks to, is named (password redacted) in the error a
        call the server did not answer raises; without it redis-py's own error is raised."""
        self.client = client
        self.scripts = Scripts()
        self.minter = SnowflakeMinter(node_id)
        self.address = None if url is None else address_of(url)
        self._queues: dict[str, Queue] = {}
        self._names = ProducerNames(client)
        self.router = PartitionRouter(client)

    @classmethod
    def from_url(
        cls,
        url: str | RedisAddress = DEFAULT_URL,
        *,
        node_id: int = DEFAULT_NODE_ID,
        wire_version: str = DEFAULT_WIRE_VERSION,
        socket_timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> Producer:
        """A producer on its own client. `socket_timeout_s` bounds each wait for the server's
        reply and for a connection to open (at most 5 s); None waits for ever."""
        address = address_of(url)
        client = connect(address, wire_version, socket_timeout_s=socket_timeout_s)
        return cls(client, node_id=node_id, url=address)

    def _naming_server(self) -> AbstractContextManager[None]:
        return nullcontext() if self.address is None else naming_server(self.address)

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
        **options: Unpack[EnqueueOptions],
    ) -> Enqueued:
        """Enqueue `task(**kwargs)` on `queue`, now or later (server clock for delay_ms).

        The options (`EnqueueOptions`): `delay_ms` or `run_at`; `job_id`, a caller-chosen id;
        `dedup_id`: enqueue only if no job is parked under this key, live or completed within
        the completion window (else the result is a duplicate naming that job).
        `max_attempts`, `backoff`, `timeout_ms` and `result_ttl_ms` override the task's own
        for this job (`result_ttl_ms=0` stores no result).
        `group`: the fair lane it waits in (docs/guide/lanes.md); `priority`: lower is claimed
        first (docs/guide/priorities.md). `key`: on a partitioned queue, the jobs of one key go
        to one partition (docs/how-to/partitions.md).
        """
        check_names(options, ENQUEUE_NAMES, "enqueue")
        spec = JobSpec(task, kwargs, **options)
        return (await self.enqueue_many(queue, [spec]))[0]

    async def enqueue_raw(
        self, queue: str, payload: bytes, **options: Unpack[Placement]
    ) -> Enqueued:
        """Enqueue opaque bytes, for a queue bound to a raw handler or a non-Python consumer."""
        check_names(options, PLACEMENT_NAMES, "enqueue_raw")
        spec = JobSpec(payload=payload, **options)
        return (await self.enqueue_many(queue, [spec]))[0]

    async def enqueue_many(self, queue: str, specs: Sequence[JobSpec]) -> list[Enqueued]:
        """Enqueue all of `specs` in one script call (one round trip), all or none; on a
        partitioned queue, one call per partition (each all or none, sent at once)."""
        with self._naming_server(), tracing.send_span(queue, len(specs)) as trace:
            return await self._enqueue_many(queue, specs, trace)

    async def _enqueue_many(
        self, queue: str, specs: Sequence[JobSpec], trace: Mapping[str, str] | None
    ) -> list[Enqueued]:
        """On a partitioned queue, one call per partition the jobs go to, all at once."""
        plan = await self.router.plan(queue)
        if plan is None:
            return await self._enqueue_on(queue, specs, trace)
        groups = self.router.split(plan, [spec.placement for spec in specs])
        return await send_split(
            groups, lambda name, part: self._enqueue_on(name, [specs[i] for i in part], trace)
        )

    async def _enqueue_on(
        self, queue: str, specs: Sequence[JobSpec], trace: Mapping[str, str] | None
    ) -> list[Enqueued]:
        minted = iter(
            self.minter.job_ids(sum(spec.placement.get("job_id") is None for spec in specs))
        )
        jobs = [self._new_job(spec, minted, trace) for spec in specs]
        await self._names.note(queue)
        chosen = [spec.placement.get("job_id") is not None for spec in specs]
        results: list[Enqueued | None] = [None] * len(jobs)
        todo = list(range(len(jobs)))
        for _ in range(MAX_REMINTS + 1):
            flags = await send_enqueue(self.queue(queue), [jobs[i] for i in todo])
            retry = []
            for i, enqueued in zip(todo, flags, strict=True):
                if isinstance(enqueued, str):  # a live job is parked under its dedup id
                    results[i] = Enqueued(enqueued, True)
                elif enqueued or chosen[i]:
                    results[i] = Enqueued(jobs[i].id, not enqueued)
                else:
                    # A freshly minted id collided with another producer's (the same node id).
                    # Never this call's own first copy: a call the client re-sent is answered
                    # from its memo (same nonce) as the first copy was. Mint again rather than
                    # lose the job.
                    jobs[i] = jobs[i]._replace(id=self.minter.job_id())
                    retry.append(i)
            if not retry:
                return [result for result in results if result is not None]
        raise ConfigError(
            f"minted job ids kept colliding; is another producer using node_id "
            f"{self.minter.node_id}?"
        )

    async def enqueue_flow(self, queue: str, root: FlowJob) -> Flow:
        """Enqueue a flow: `root` runs in `queue` once its children are done (each child may
        have children of its own, to EchoMQ's cap of 8 levels, and run in another queue). A
        flow in one queue is written in one script call, all or none; across queues, parents
        first. Returns the ids in the shape of the tree. Raises FlowError for a tree that
        cannot be written (before anything is), FlowWriteError when a job with one of its ids
        exists, or a later part in another queue failed (the message says what was written)."""
        with self._naming_server(), tracing.send_span(queue, 1) as trace:
            await self._names.note(queue)
            return await write_flow(self.queue, self.minter.job_id, queue, root, trace)

    async def repeat(
        self,
        queue: str,
        name: str,
        task: str,
        kwargs: Mapping[str, Any] | None = None,
        *,
        every_ms: int | None = None,
        cron: str | None = None,
    ) -> RepeatInfo:
        """Register (or update) the repeatable job `name` on `queue`: a `task(**kwargs)` job is
        minted every `every_ms` ms, or at each time the cron expression names (UTC), on the
        server clock, by whichever worker's beat finds it due; each occurrence exactly once.
        Registering the same task, kwargs and schedule again changes nothing."""
        schedule = Schedule(every_ms=every_ms, cron=cron)
        with self._naming_server():
            return await register(self.client, queue, name, encode_payload(task, kwargs), schedule)

    def _new_job(
        self, spec: JobSpec, minted: Iterator[JobId], trace: Mapping[str, str] | None = None
    ) -> NewJob:
        """The job to send for `spec`; `minted` holds the ids reserved for specs without one;
        `trace` goes into a JSON envelope (a raw payload has no room for it)."""
        if spec.payload is None:
            payload = codec.encode(spec.task, spec.kwargs, spec.options, trace)
        elif spec.options is not None:
            raise ConfigError("job options travel in the JSON envelope; a raw payload has none")
        else:
            payload = spec.payload
        check_payload_size(payload)
        place = spec.placement
        key = place.get("key")
        if key is not None and not isinstance(key, str):
            raise ConfigError(f"key must be a string; got {key!r}")
        delay_ms, run_at = place.get("delay_ms"), place.get("run_at")
        mode, ms = NOW if delay_ms is None and run_at is None else _when(delay_ms, run_at)
        chosen_id = place.get("job_id")
        new_id = job_id(chosen_id) if chosen_id is not None else next(minted)
        group = place.get("group")
        group = None if group is None else validate_group(group)
        priority = validate_priority(place.get("priority", 0))
        dedup_id, dedup_ttl_ms = place.get("dedup_id"), place.get("dedup_ttl_ms")
        chosen = chosen_id is not None
        if dedup_id is None:
            if dedup_ttl_ms is not None:
                raise ConfigError("dedup_ttl_ms needs a dedup_id")
            return NewJob(new_id, payload, mode, ms, chosen=chosen, group=group, priority=priority)
        did, ttl = _dedup(dedup_id, dedup_ttl_ms)
        return NewJob(new_id, payload, mode, ms, did, ttl, chosen, group, priority)

    async def result(self, job_id: str, *, queue: str, timeout: float = 30.0) -> Any:  # noqa: ASYNC109
        """Wait up to `timeout` seconds for the return value of a job whose task (or enqueue)
        set `result_ttl_ms`, and return it (decoded JSON). Blocks on the server, not a poll.

        On a partitioned queue `queue` may be the logical name: the partition holding the job
        is found first. Raises ResultTimeoutError when the job has not completed by then (it
        may still);
        JobFailedError, with `last_error`, when the job is dead; ResultUnavailableError when
        no result exists and none will come (completed without storing one, expired, removed,
        never enqueued on `queue`, or a return value JSON cannot hold).
        """
        if timeout < 0:
            raise ConfigError(f"timeout must be >= 0 seconds; got {timeout}")
        with self._naming_server():
            found = await self.router.holding(queue, _checked_id(job_id), self.queue)
            return await wait_result(self.queue(found), _checked_id(job_id), timeout)
