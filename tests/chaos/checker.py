"""The loss checker: merges the handlers' ledgers, the workers' JSON logs and the final Redis
state of one queue into a verdict, in the terms of Jepsen's queue checker.

Inputs
- `enqueued`: every job id whose enqueue the producer saw acknowledged (ids are unique per run).
- `events`: the ledger (ledger.py): `start`/`done` lines with (job, attempt, pid, mono).
- `logs`: per worker process, its JSON log events (`WorkerProcess.events()`); the worker logs
  `job_completed` (job_id, attempts, repeated) after a completion is accepted, `job_dead` after a
  dead-letter is accepted, and `write_fenced` (stale_token, current) when the server refused a
  write from a superseded holder.
- `final`: `FinalState` read from Redis after the run drained (`read_final`).
- `faults`: `Fault`s injected (kind, monotonic time, target pid).

Verdicts (each a sorted list of job ids, except counts)
- lost: enqueued, and at the end neither completed nor dead-lettered. A job counts as completed
  when its row is gone (settle deletes the row of an accepted completion, in the same script that
  counts it in metrics:completed) AND a `done` line exists for it (a completion is only sent after
  the handler returned); a row still pending/active/scheduled, or a row gone without any `done`,
  is lost. If metrics:completed is smaller than the number of rows gone, the difference is lost
  too (`lost_count` takes the larger of the two measures).
- duplicated: a job with two accepted completions: two non-repeated `job_completed` log events
  for it, or (count level) metrics:completed greater than the number of enqueued rows gone, whose
  excess is reported in `duplicated_count`.
- stale: an accepted completion or dead-letter (logged `job_completed`/`job_dead`, not repeated)
  from attempt `a` of a job that also has a `start` at an attempt `b > a`. Once a completion is
  accepted the row is deleted, so no later claim can exist; a higher attempt therefore means the
  writer had been superseded when its write was accepted. This needs no clocks.
- unexpected: a job id seen in the ledger, a log or Redis that was never enqueued; and a job that
  `must_complete` names that ended dead.
- extra_runs: starts beyond the first, over all jobs (allowed under at-least-once; counted).
- fenced: `write_fenced` events (stale writes the server rejected; good, counted).
- double_claimed: a job with two `start` lines at the same attempt (one claim ran twice).
- regressed: a job whose `start` attempts, in time order, ever fail to increase (attempts went
  backwards: the server lost a claim it had acknowledged). Expected only without persistence.
- stranded: leases left at the end (members of active, `:lock` keys) once the run drained.
- recovery_s: per (fault, orphaned job): the first `start` of the job at a higher attempt after
  the fault, minus the fault's time; an orphan is a job whose latest start before the fault was by
  the fault's target pid and which was started again after the fault.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from emq_worker.protocol.keys import QueueKeys
from tests.chaos.ledger import DONE, START, Event

READ_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    at: float
    """time.monotonic() when the fault was injected (system-wide clock)."""
    pid: int | None = None
    """The worker process the fault targeted; None for faults on the server or network."""


@dataclass(frozen=True, slots=True)
class JobRow:
    state: str | None
    """The row's state field; None when the row is gone."""
    attempts: int


@dataclass(slots=True)
class FinalState:
    rows: dict[str, JobRow]
    completed_count: int
    dead: set[str]
    active: int
    locks: int
    extra_ids: set[str] = field(default_factory=set)
    """Ids in pending/active/scheduled/dead that were not asked about."""


async def read_final(client: Redis, queue: str, ids: Collection[str]) -> FinalState:
    """The state of every job in `ids` and the queue's counters, read after the run."""
    keys = QueueKeys.of(queue)
    rows: dict[str, JobRow] = {}
    ordered = list(ids)
    for start in range(0, len(ordered), READ_CHUNK):
        chunk = ordered[start : start + READ_CHUNK]
        async with client.pipeline(transaction=False) as pipe:
            for job in chunk:
                pipe.hmget(keys.job(job), "state", "attempts")
            replies = await pipe.execute()
        for job, (state, attempts) in zip(chunk, replies, strict=True):
            rows[job] = JobRow(_text(state), int(attempts or 0))
    completed = int(await client.hget(keys.completed, "count") or 0)
    dead = {_text(m) or "" for m in await client.zrange(keys.dead, 0, -1)}
    seen: set[str] = set(dead)
    for key in (keys.pending, keys.active, keys.schedule):
        seen |= {_text(m) or "" for m in await client.zrange(key, 0, -1)}
    locks = 0
    async for _ in client.scan_iter(match=f"{keys.prefix}job:*:lock", count=1000):
        locks += 1
    active = int(await client.zcard(keys.active))
    return FinalState(rows, completed, dead, active, locks, seen - set(ids))


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(slots=True)
class Verdict:
    jobs: int
    completed: int
    dead: int
    lost: list[str]
    lost_count: int
    duplicated: list[str]
    duplicated_count: int
    stale: list[str]
    unexpected: list[str]
    extra_runs: int
    fenced: int
    double_claimed: list[str]
    regressed: list[str]
    stranded: int
    recovery_s: list[float]
    faults: int

    @property
    def max_recovery_s(self) -> float | None:
        return max(self.recovery_s) if self.recovery_s else None

    @property
    def p99_recovery_s(self) -> float | None:
        return percentile(self.recovery_s, 0.99)

    @property
    def ok(self) -> bool:
        """The safety verdict: nothing lost, duplicated, stale, unexpected or stranded."""
        return not (
            self.lost_count
            or self.duplicated_count
            or self.stale
            or self.unexpected
            or self.double_claimed
            or self.stranded
        )

    def summary(self) -> dict[str, Any]:
        """The figures for a table row or a JSON record (job lists truncated to 10)."""
        return {
            "faults": self.faults,
            "jobs": self.jobs,
            "completed": self.completed,
            "dead": self.dead,
            "lost": self.lost_count,
            "duplicated": self.duplicated_count,
            "stale": len(self.stale),
            "unexpected": len(self.unexpected),
            "extra_runs": self.extra_runs,
            "fenced": self.fenced,
            "double_claimed": len(self.double_claimed),
            "regressed": len(self.regressed),
            "stranded": self.stranded,
            "max_recovery_s": _round(self.max_recovery_s),
            "p99_recovery_s": _round(self.p99_recovery_s),
            "examples": {
                "lost": self.lost[:10],
                "duplicated": self.duplicated[:10],
                "stale": self.stale[:10],
                "unexpected": self.unexpected[:10],
            },
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (q in (0, 1]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def check(
    enqueued: Collection[str],
    events: Sequence[Event],
    logs: Mapping[int, Iterable[Mapping[str, Any]]],
    final: FinalState,
    faults: Sequence[Fault] = (),
    *,
    must_complete: Collection[str] = (),
) -> Verdict:
    """The verdict for one run (see the module docstring for each definition)."""
    wanted = set(enqueued)
    starts: dict[str, list[Event]] = defaultdict(list)
    done: set[str] = set()
    for event in events:
        if event.kind == START:
            starts[event.job].append(event)
        elif event.kind == DONE:
            done.add(event.job)
    accepted, dead_written, fenced, logged_ids = _read_logs(logs)

    gone = {job for job in wanted if final.rows.get(job, JobRow(None, 0)).state is None}
    gone_unrun = {job for job in gone if job not in done}
    unfinished = {
        job for job in wanted - gone if job not in final.dead and final.rows[job].state != "dead"
    }
    lost = gone_unrun | unfinished
    # Each accepted completion deletes one row and counts one in metrics:completed, in one
    # script: rows gone beyond that count vanished without a completion.
    lost_count = len(unfinished) + max(len(gone_unrun), len(gone) - final.completed_count)
    duplicated = sorted(job for job, attempts in accepted.items() if len(attempts) > 1)
    duplicated_count = max(len(duplicated), final.completed_count - len(gone))

    stale = []
    for job, attempts in [*accepted.items(), *dead_written.items()]:
        highest = max((event.attempt for event in starts.get(job, [])), default=0)
        if any(attempt < highest for attempt in attempts):
            stale.append(job)

    seen = set(starts) | logged_ids | final.extra_ids
    unexpected = sorted(seen - wanted) + sorted(set(must_complete) & final.dead)

    extra_runs = sum(max(0, len(runs) - 1) for runs in starts.values())
    double_claimed = sorted(
        job
        for job, runs in starts.items()
        if any(n > 1 for n in Counter(event.attempt for event in runs).values())
    )
    return Verdict(
        jobs=len(wanted),
        completed=final.completed_count,
        dead=len(final.dead & wanted),
        lost=sorted(lost),
        lost_count=lost_count,
        duplicated=duplicated,
        duplicated_count=duplicated_count,
        stale=sorted(set(stale)),
        unexpected=unexpected,
        extra_runs=extra_runs,
        fenced=fenced,
        double_claimed=double_claimed,
        regressed=sorted(
            job
            for job, runs in starts.items()
            if any(b.attempt <= a.attempt for a, b in itertools.pairwise(runs))
        ),
        stranded=final.active + final.locks,
        recovery_s=recovery_times(starts, faults),
        faults=len(faults),
    )


@dataclass(slots=True)
class _Writes:
    accepted: dict[str, list[int]]
    dead_written: dict[str, list[int]]
    fenced: int
    logged_ids: set[str]

    def __iter__(self) -> Iterator[Any]:
        return iter((self.accepted, self.dead_written, self.fenced, self.logged_ids))


def _read_logs(logs: Mapping[int, Iterable[Mapping[str, Any]]]) -> _Writes:
    """Accepted completions and dead-letters (attempts per job), and the fenced-write count."""
    writes = _Writes(defaultdict(list), defaultdict(list), 0, set())
    for entries in logs.values():
        for entry in entries:
            name, job = entry.get("event"), entry.get("job_id")
            if name == "write_fenced":
                writes.fenced += 1
            if not isinstance(job, str):
                continue
            writes.logged_ids.add(job)
            if entry.get("repeated"):
                continue
            if name == "job_completed":
                writes.accepted[job].append(int(entry.get("attempts", 0)))
            elif name == "job_dead":
                writes.dead_written[job].append(int(entry.get("attempts", 0)))
    return writes


def recovery_times(starts: Mapping[str, Sequence[Event]], faults: Sequence[Fault]) -> list[float]:
    """Per fault and orphaned job: seconds from the fault to the job's next start."""
    times = []
    for fault in faults:
        if fault.pid is None:
            continue
        for runs in starts.values():
            before = [event for event in runs if event.mono <= fault.at]
            if not before or before[-1].pid != fault.pid:
                continue
            orphan = before[-1]
            after = [e for e in runs if e.mono > fault.at and e.attempt > orphan.attempt]
            if after:
                times.append(after[0].mono - fault.at)
    return times
