"""`emq-worker demo`: the lease story, replayed with real jobs on a throwaway redis-server.

It starts `valkey-server` or `redis-server` from PATH on a free port in a temporary directory
(persistence off), runs real workers (in-process, and `emq-worker run` subprocesses it kills and
freezes), and prints what happened to one job per story, as measured: the workers' log events
(captured in-process; JSON lines from subprocesses) and the job's lease deadline polled from
`active` on the server. Everything it started is stopped and removed on exit, Ctrl-C included.

`demo_app` is the handlers' App: `emq-worker run --app emq_worker.demo:demo_app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click
import redis
import structlog
from redis.asyncio import Redis

from emq_worker.config import WorkerSettings
from emq_worker.connection import connect
from emq_worker.context import JobContext
from emq_worker.keys import QueueKeys
from emq_worker.producer import Producer
from emq_worker.protocol import DEFAULT_WIRE_VERSION
from emq_worker.tasks import App
from emq_worker.worker import Worker

demo_app = App()


@demo_app.task(max_attempts=5)
async def sleep(ctx: JobContext, ms: int) -> None:
    """Hold the job for `ms` milliseconds: a stand-in for slow work."""
    ctx.log.info("demo_job_started", job_id=ctx.job_id, attempts=ctx.token)
    await anyio.sleep(ms / 1000)
    ctx.log.info("demo_job_finished", job_id=ctx.job_id, attempts=ctx.token)


INSTALL_HINT = (
    "emq-worker demo needs a redis-server or valkey-server binary. Install one:\n"
    "  Debian/Ubuntu:  sudo apt-get install redis-server  (or valkey-server)\n"
    "  macOS:          brew install redis                 (or valkey)\n"
    "  Valkey:         https://valkey.io/download/\n"
    "or point --server at one."
)
LEASE_MS = 600
LONG_JOB_MS = 1500
SHORT_JOB_MS = 1000
WATCHER_BEAT_MS = 50
HOLDER_BEAT_MS = 100
POLL_S = 0.01
STORY_TIMEOUT_S = 8.0
START_TIMEOUT_S = 15.0


class DemoError(Exception):
    """The demo cannot run (no server binary, the server did not start)."""


def find_server(explicit: str | None) -> str:
    """The server binary: --server when given, else valkey-server or redis-server on PATH."""
    if explicit is not None:
        path = shutil.which(explicit) or explicit
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise DemoError(f"--server {explicit!r} is not an executable file.\n{INSTALL_HINT}")
        return path
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise DemoError(f"no valkey-server or redis-server found on PATH.\n{INSTALL_HINT}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def throwaway_server(binary: str) -> Iterator[str]:
    """A server on a free port in a temp dir, persistence off; yields its URL; stops and removes
    everything on exit."""
    directory = tempfile.mkdtemp(prefix="emq-demo-")
    process: subprocess.Popen[bytes] | None = None
    try:
        port = free_port()
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
        args += ["--save", "", "--appendonly", "no", "--logfile", str(Path(directory) / "log")]
        process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        _wait_ping(process, port, binary)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ping(process: subprocess.Popen[bytes], port: int, binary: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DemoError(f"{binary} exited at start (code {process.returncode})")
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    return
            time.sleep(0.02)
    finally:
        client.close()
    raise DemoError(f"{binary} did not answer PING within {START_TIMEOUT_S:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


# --- what happened: events from the workers and from polling the server ---------------------


@dataclass(slots=True)
class Event:
    at: float
    """time.monotonic() when it was seen."""
    worker: str
    name: str
    facts: dict[str, Any]


@dataclass(slots=True)
class Recorder:
    """Every log event of the story's workers, in arrival order."""

    events: list[Event] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, worker: str, name: str, facts: dict[str, Any]) -> None:
        self.events.append(Event(time.monotonic(), worker, name, facts))
        self.changed.set()

    def find(self, name: str, worker: str | None = None) -> list[Event]:
        return [e for e in self.events if e.name == name and worker in (None, e.worker)]

    async def until(self, done: Callable[[], bool], within_s: float = STORY_TIMEOUT_S) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                while not done():
                    self.changed.clear()
                    await self.changed.wait()
        return done()


RECORDER = Recorder()


def _capture(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    facts = dict(event_dict)
    RECORDER.add(str(facts.pop("worker", "?")), str(facts.pop("event", "")), facts)
    raise structlog.DropEvent


def capture_in_process_logs() -> None:
    """Route this process's worker logs into RECORDER instead of the terminal."""
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, _capture],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )


@dataclass(slots=True)
class LeaseWatch:
    """The job's lease as the server holds it, polled: per attempt the first deadline, then
    every change of it (renewals), and the moment it passed while still held (a lapse)."""

    t0: float
    server_t0_ms: int
    claims: dict[int, float] = field(default_factory=dict)
    """attempt -> first deadline (ms from story start)."""
    renewals: list[tuple[float, int, float]] = field(default_factory=list)
    """(seen at, attempt, new deadline)."""
    lapses: list[tuple[int, float]] = field(default_factory=list)
    """(attempt, deadline that passed while the job still sat in active with it)."""

    async def run(self, client: Redis, keys: QueueKeys, job_id: str) -> None:
        last: tuple[int, float] | None = None
        while True:
            async with client.pipeline(transaction=False) as pipe:
                pipe.time()
                pipe.zscore(keys.active, job_id)
                pipe.hget(keys.job(job_id), "attempts")
                now_pair, score, attempts = await pipe.execute()
            now_ms = int(now_pair[0]) * 1000 + int(now_pair[1]) / 1000 - self.server_t0_ms
            current = None
            if score is not None and attempts is not None:
                current = (int(attempts), float(score) - self.server_t0_ms)
            if (
                last is not None
                and now_ms >= last[1]
                and last not in self.lapses
                and (current is None or current == last or current[0] != last[0])
            ):
                self.lapses.append(last)  # past its deadline and not renewed
            if current is not None and current != last:
                attempt, deadline = current
                if attempt not in self.claims:
                    self.claims[attempt] = deadline
                else:
                    self.renewals.append((self.rel(time.monotonic()), attempt, deadline))
            last = current
            await asyncio.sleep(POLL_S)

    def rel(self, at: float) -> float:
        return (at - self.t0) * 1000


# --- the workers ------------------------------------------------------------------------------


@dataclass(slots=True)
class InProcess:
    label: str
    worker: Worker
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.worker.request_stop()
        try:
            async with asyncio.timeout(5):
                await asyncio.shield(self.task)
        except TimeoutError:
            self.worker.force_stop()
            with contextlib.suppress(BaseException):
                await self.task


@asynccontextmanager
async def in_process(label: str, settings: WorkerSettings) -> AsyncIterator[InProcess]:
    worker = Worker(settings, demo_app)

    async def labelled() -> None:
        structlog.contextvars.bind_contextvars(worker=label)
        await worker.run()

    task = asyncio.create_task(labelled())
    running = InProcess(label, worker, task)
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            await worker.ready.wait()
        yield running
    finally:
        if not task.done():
            await running.stop()
        elif not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


@dataclass(slots=True)
class Subprocess:
    label: str
    process: asyncio.subprocess.Process
    stderr: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, number: int) -> None:
        if self.process.returncode is None:
            self.process.send_signal(number)

    async def read(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        async for raw in stream:
            line = raw.decode(errors="replace").strip()
            try:
                facts = json.loads(line)
            except json.JSONDecodeError:
                self.stderr.append(line)
                continue
            if isinstance(facts, dict):
                RECORDER.add(self.label, str(facts.pop("event", "")), facts)

    async def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(5):
                await self.process.wait()
        except TimeoutError:
            self.signal(signal.SIGKILL)
            await self.process.wait()


@asynccontextmanager
async def subprocess_worker(
    label: str, queue: str, url: str, client: Redis
) -> AsyncIterator[Subprocess]:
    """`emq-worker run --app emq_worker.demo:demo_app` with JSON logs on stderr."""
    args = ["-c", "from emq_worker.cli import main; main()", "run", "--queue", queue]
    args += ["--app", "emq_worker.demo:demo_app", "--redis-url", url, "--concurrency", "1"]
    args += ["--lease-ms", str(LEASE_MS), "--beat-ms", str(HOLDER_BEAT_MS), "--grace-ms", "500"]
    args += ["--log-format", "json", "--log-level", "debug"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C reaches the demo only; the demo stops it
    )
    worker = Subprocess(label, process)
    reader = asyncio.create_task(worker.read())
    try:
        started = await RECORDER.until(lambda: bool(RECORDER.find("worker_started", label)))
        if not started or not await _parked(client):
            raise DemoError(f"worker {label} did not start: {' | '.join(worker.stderr[-5:])}")
        yield worker
    finally:
        with contextlib.suppress(ProcessLookupError):
            await asyncio.shield(worker.stop())
        await reader


async def _parked(client: Redis) -> bool:
    """True once a worker waits for work in BLPOP (it is past its start-up, ready to claim)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                clients = await client.client_list()
                if any(c.get("cmd") == "blpop" for c in clients):
                    return True
                await asyncio.sleep(POLL_S)
    return False


def settings(queue: str, url: str, **overrides: Any) -> WorkerSettings:
    options: dict[str, Any] = {
        "queues": (queue,),
        "redis_url": url,
        "concurrency": 1,
        "lease_ms": LEASE_MS,
        "beat_ms": WATCHER_BEAT_MS,
        "grace_ms": 500,
    }
    return WorkerSettings(**(options | overrides))


# --- one story --------------------------------------------------------------------------------


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
            return f"{w} gives its lease up itself: unconfirmed for a whole lease"
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


async def killed(story: Story, url: str) -> tuple[bool, str]:
    async with subprocess_worker("A", story.queue, url, story.client) as a:
        await story.enqueue(SHORT_JOB_MS)
        await story.until(lambda: bool(story.events("demo_job_started", "A")))
        await asyncio.sleep(0.3)
        a.signal(signal.SIGKILL)
        story.note(f"SIGKILL A (pid {a.pid}) while it holds the job")
        async with in_process("B", settings(story.queue, url)):
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
    async with subprocess_worker("A", story.queue, url, story.client) as a:
        await story.enqueue(SHORT_JOB_MS)
        await story.until(lambda: bool(story.events("demo_job_started", "A")))
        await asyncio.sleep(0.3)
        a.signal(signal.SIGSTOP)
        story.note(f"SIGSTOP A (pid {a.pid}): frozen while it holds the job")
        async with in_process("B", settings(story.queue, url)):
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


async def tell(url: str, echo: Callable[[str], None]) -> bool:
    capture_in_process_logs()
    client = connect(url, DEFAULT_WIRE_VERSION)
    producer = Producer(client)
    all_ok = True
    try:
        for number, (slug, title, play) in enumerate(STORIES, start=1):
            story = Story(number, title, f"demo-{number}-{slug}", client, producer)
            story.every_renewal = slug == "renewal"
            echo(f"\n{number}. {title}")
            try:
                ok, verdict = await play(story, url)
            finally:
                await story.finish()
            for line in story.timeline():
                echo(line)
            echo(f"  verdict: {verdict}")
            all_ok = all_ok and ok
    finally:
        await client.aclose()
    return all_ok


def run_demo(server: str | None, echo: Callable[[str], None]) -> int:
    """Play the four stories; 0 when each went as the lease protocol says, else 1."""
    binary = find_server(server)
    started = time.monotonic()
    with throwaway_server(binary) as url:
        echo(
            f"emq-worker demo: {Path(binary).name} on {url} (throwaway: no persistence, "
            "removed on exit)"
        )
        echo("times are ms from each story's enqueue; deadlines as the server holds them")
        ok = asyncio.run(tell(url, echo))
    echo(f"\ndone in {time.monotonic() - started:.1f} s; server stopped, temp dir removed")
    return 0 if ok else 1


@click.command()
@click.option(
    "--server",
    "server",
    default=None,
    metavar="PATH",
    help="The redis-server or valkey-server binary (default: the first on PATH).",
)
def demo(server: str | None) -> None:
    """Replay the lease story with real jobs on a throwaway redis-server (no setup needed)."""
    try:
        code = run_demo(server, click.echo)
    except DemoError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)
