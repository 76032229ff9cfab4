"""The four stories: no renewal, renewal, a worker killed mid-job, a frozen worker fenced out."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from emq_worker.cli.demo.recorder import RECORDER, Event, LeaseWatch
from emq_worker.cli.demo.timing import (
    HOLDER_BEAT_MS,
    LEASE_MS,
    LONG_JOB_MS,
    SHORT_JOB_MS,
    STORY_TIMEOUT_S,
)
from emq_worker.cli.demo.workers import Subprocess, in_process, settings, subprocess_worker
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.keys import QueueKeys


@dataclass(slots=True)
class Story:
    number: int
    title: str
    queue: str
    client: Redis
    producer: Producer
    lines: list[tuple[float, str]] = field(default_factory=list)
    job_id: str = ""
    watch: LeaseWatch | None = None
    first_event: int = 0
    every_renewal: bool = False
    _poller: asyncio.Task[None] | None = None

    async def enqueue(self, ms: int) -> str:
        server_ms = await self._server_ms()
        self.watch = LeaseWatch(time.monotonic(), server_ms)
        self.first_event = len(RECORDER.events)
        self.job_id = (await self.producer.enqueue(self.queue, "sleep", {"ms": ms})).job_id
        keys = QueueKeys.of(self.queue)
        self._poller = asyncio.create_task(self.watch.run(self.client, keys, self.job_id))
        return self.job_id

    async def _server_ms(self) -> int:
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def note(self, text: str) -> None:
        assert self.watch is not None
        self.lines.append((self.watch.rel(time.monotonic()), text))

    def events(self, name: str | None = None, worker: str | None = None) -> list[Event]:
        mine = RECORDER.events[self.first_event :]
        return [
            e
            for e in mine
            if (name is None or e.name == name)
            and worker in (None, e.worker)
            and e.facts.get("job_id", self.job_id) == self.job_id
            and e.facts.get("queue", self.queue) == self.queue
        ]

    async def until(self, done: Callable[[], bool], within_s: float = STORY_TIMEOUT_S) -> bool:
        return await RECORDER.until(done, within_s)

    async def finish(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    def runs(self) -> list[tuple[str, int]]:
        return [(e.worker, int(e.facts["attempts"])) for e in self.events("demo_job_started")]

    def timeline(self) -> list[str]:
        watch = self.watch
        assert watch is not None
        holder: dict[int, str] = {}
        rows = list(self.lines)
        for e in self.events():
            at = watch.rel(e.at)
            text = self._describe(e, watch, holder)
            if text:
                rows.append((at, text))
        rows += self._renewal_rows(watch, holder)
        for attempt, deadline in watch.lapses:
            who = holder.get(attempt, "?")
            rows.append((deadline, f"{who}'s lease (attempt {attempt}) lapses: not renewed"))
        rows.sort(key=lambda row: row[0])
        return [f"  {'+' + format(at, '.0f'):>6}  {text}" for at, text in rows]

    def _renewal_rows(self, watch: LeaseWatch, holder: dict[int, str]) -> list[tuple[float, str]]:
        """Each renewal of the story's subject (every_renewal); the others' as one line each."""
        rows: list[tuple[float, str]] = []
        by_attempt: dict[int, list[tuple[float, float]]] = {}
        for at, attempt, deadline in watch.renewals:
            by_attempt.setdefault(attempt, []).append((at, deadline))
        for attempt, seen in by_attempt.items():
            who = holder.get(attempt, "?")
            if self.every_renewal or len(seen) < 3:
                rows += [
                    (at, f"{who} renews: lease until +{deadline:.0f}") for at, deadline in seen
                ]
            else:
                (first, _), (last, deadline) = seen[0], seen[-1]
                rows.append(
                    (
                        first,
                        f"{who} renews {len(seen)} times, +{first:.0f} to +{last:.0f}: "
                        f"lease until +{deadline:.0f}",
                    )
                )
        return rows

    def _describe(self, e: Event, watch: LeaseWatch, holder: dict[int, str]) -> str | None:
        f, w, short = e.facts, e.worker, f"{self.job_id[:10]}…"
        if e.name == "job_claimed":
            attempt = int(f["attempts"])
            holder[attempt] = w
            deadline = watch.claims.get(attempt)
            until = f", lease until +{deadline:.0f}" if deadline is not None else ""
            return f"{w} claims job {short} (attempt {attempt}{until})"
        if e.name == "beat_reaped":
            return f"{w}'s reaper returns the expired lease to pending"
        if e.name == "job_completed":
            return f"{w} completes attempt {f['attempts']} → written"
        if e.name == "write_fenced":
            return (
                f"{w} completes attempt {f['attempts']} → refused: stale token "
                f"{f['stale_token']}, current {f['current']}"
            )
        if e.name == "lease_lost":
            return (
                f"{w} renews attempt {f['stale_token']} → refused: lease lost "
                f"(current {f['current']}); its job is cancelled"
            )
        if e.name == "lease_self_fenced":
            return f"{w} gives its lease up itself: unconfirmed for the lease less its margin"
        if e.name == "job_abandoned":
            return f"{w} abandons attempt {f['attempts']}: its result is not written"
        if e.name == "settle_refused":
            detail = f" ({f['detail']})" if f.get("detail") else ""
            why = (
                " (its new holder completed it; the row is deleted)"
                if f["status"] == "gone"
                else ""
            )
            return f"{w} completes attempt {f['attempts']} → refused: {f['status']}{detail}{why}"
        return None


# --- the four stories -------------------------------------------------------------------------


async def no_renewal(story: Story, url: str) -> tuple[bool, str]:
    a_settings = settings(story.queue, url, beat_ms=HOLDER_BEAT_MS, renew=False)
    async with in_process("A", a_settings):
        await story.enqueue(LONG_JOB_MS)
        await story.until(lambda: bool(story.events("job_claimed", "A")))
        async with in_process("B", settings(story.queue, url)):
            await story.until(
                lambda: (
                    bool(story.events("job_completed", "B"))
                    and bool(story.events("write_fenced", "A"))
                )
            )
    runs, fenced = story.runs(), story.events("write_fenced", "A")
    if runs == [("A", 1), ("B", 2)] and fenced and story.events("job_completed", "B"):
        f = fenced[0].facts
        return True, (
            "ran twice: the lease lapsed, B re-ran it at attempt 2, and A's late complete was "
            f"fenced (stale token {f['stale_token']}, current {f['current']})"
        )
    return False, f"UNEXPECTED: runs {runs}, fenced writes {len(fenced)}"


async def renewal(story: Story, url: str) -> tuple[bool, str]:
    async with in_process("A", settings(story.queue, url, beat_ms=HOLDER_BEAT_MS)) as a:
        await story.enqueue(LONG_JOB_MS)
        await story.until(lambda: bool(story.events("job_claimed", "A")))
        async with in_process("B", settings(story.queue, url)):
            await story.until(lambda: bool(story.events("job_completed", "A")))
    assert story.watch is not None
    runs, renewed = story.runs(), len(story.watch.renewals)
    sweeps = a.worker.counters.renew_sweeps
    if runs == [("A", 1)] and renewed >= 1 and story.events("job_completed", "A"):
        last = story.watch.renewals[-1][2]
        return True, (
            f"ran once: renewed {renewed} times (A's renewal sweep ran {sweeps} times); "
            f"the deadline moved from +{story.watch.claims[1]:.0f} to +{last:.0f}"
        )
    return False, f"UNEXPECTED: runs {runs}, renewals seen {renewed}"


@contextlib.asynccontextmanager
async def _a_holds_the_job(
    story: Story, url: str, sig: signal.Signals, what: str
) -> AsyncIterator[Subprocess]:
    """Worker A (a process) starts the story's job, then gets `sig` while it holds it."""
    async with subprocess_worker("A", story.queue, url, story.client) as a:
        await story.enqueue(SHORT_JOB_MS)
        await story.until(lambda: bool(story.events("demo_job_started", "A")))
        await asyncio.sleep(0.3)
        a.signal(sig)
        story.note(f"{sig.name} A (pid {a.pid}){what}")
        yield a


async def killed(story: Story, url: str) -> tuple[bool, str]:
    async with (
        _a_holds_the_job(story, url, signal.SIGKILL, " while it holds the job"),
        in_process("B", settings(story.queue, url)),
    ):
        await story.until(lambda: bool(story.events("job_completed", "B")))
    runs, done = story.runs(), story.events("job_completed")
    if runs == [("A", 1), ("B", 2)] and [e.worker for e in done] == ["B"]:
        return True, (
            "recovered: A died holding attempt 1; the reaper returned the job after its lease "
            "and B completed it at attempt 2"
        )
    return False, f"UNEXPECTED: runs {runs}, completions by {[e.worker for e in done]}"


REFUSALS = ("write_fenced", "lease_lost", "settle_refused", "job_abandoned")


async def frozen(story: Story, url: str) -> tuple[bool, str]:
    what = ": frozen while it holds the job"
    async with (
        _a_holds_the_job(story, url, signal.SIGSTOP, what) as a,
        in_process("B", settings(story.queue, url)),
    ):
        await story.until(lambda: bool(story.events("job_completed", "B")))
        a.signal(signal.SIGCONT)
        story.note("SIGCONT A: it wakes up believing it holds the job")
        await story.until(
            lambda: (
                any(story.events(name, "A") for name in REFUSALS)
                or bool(story.events("job_completed", "A"))
            ),
            within_s=3,
        )
        await asyncio.sleep(0.2)  # the rest of A's reaction to waking (the sleep is the story)
    refused = [e for e in story.events(worker="A") if e.name in REFUSALS]
    a_done = story.events("job_completed", "A")
    if story.events("job_completed", "B") and refused and not a_done:
        how = ", ".join(sorted({_refusal(e) for e in refused}))
        return True, (
            "refused the frozen worker's write: B took over and completed attempt 2; "
            f"A woke up and was fenced out ({how})"
        )
    return False, f"UNEXPECTED: A refusals {len(refused)}, A completions {len(a_done)}"


def _refusal(e: Event) -> str:
    if e.name == "settle_refused":
        return f"settle_refused: {e.facts['status']}"
    if e.name == "write_fenced":
        return f"write_fenced: current {e.facts['current']}"
    if e.name == "lease_lost":
        return f"lease_lost: current {e.facts['current']}"
    return e.name


STORIES: list[tuple[str, str, Callable[[Story, str], Any]]] = [
    (
        "no-renewal",
        f"No renewal: a {LONG_JOB_MS} ms job under a {LEASE_MS} ms lease on worker A with "
        "renewal off; worker B watching",
        no_renewal,
    ),
    (
        "renewal",
        f"Renewal at lease/3: the same {LONG_JOB_MS} ms job on A with renewal every "
        f"{LEASE_MS // 3} ms; B watching",
        renewal,
    ),
    (
        "killed",
        f"A worker killed mid-job: `emq-worker run` subprocess A takes a {SHORT_JOB_MS} ms job "
        "and is SIGKILLed",
        killed,
    ),
    (
        "frozen",
        f"A frozen worker fenced out: subprocess A takes a {SHORT_JOB_MS} ms job and is "
        "SIGSTOPped past its lease",
        frozen,
    ),
]
