"""The demo's workers: in-process ones (their logs captured) and `emq-worker run` subprocesses
(to kill and freeze)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import structlog
from redis.asyncio import Redis

from emq_worker.cli.demo.app import demo_app
from emq_worker.cli.demo.recorder import RECORDER
from emq_worker.cli.demo.server import DemoError
from emq_worker.cli.demo.timing import (
    HOLDER_BEAT_MS,
    LEASE_MS,
    POLL_S,
    START_TIMEOUT_S,
    WATCHER_BEAT_MS,
)
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.worker import Worker


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
    """`emq-worker run --app emq_worker.cli.demo.app:demo_app` with JSON logs on stderr."""
    args = ["-c", "from emq_worker.cli.main import main; main()", "run", "--queue", queue]
    args += ["--app", "emq_worker.cli.demo.app:demo_app", "--redis-url", url, "--concurrency", "1"]
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
