"""`emq-worker run` as real subprocesses, for fault tests that kill, freeze and signal them.

`WorkerProcesses` starts daemons (the `emq-worker` console script next to this interpreter) with
JSON logs in a file per process and a shared ledger (`tests.apps.ledger`); leaving it kills every
process it started that is still alive, stopped ones included. Waits poll a file with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.apps.ledger import LEDGER_ENV
from tests.support.wait import eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
EMQ_WORKER = Path(sys.executable).parent / "emq-worker"
LEDGER_APP = "tests.apps.ledger:app"
KILL_WAIT_S = 10.0
LOG_TAIL_LINES = 30


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger line: a handler started or finished one attempt of a job in process `pid`."""

    kind: str
    job_id: str
    attempt: int
    pid: int


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[Entry]:
        if not self.path.exists():
            return []
        entries = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if len(fields) == 4:
                entries.append(Entry(fields[0], fields[1], int(fields[2]), int(fields[3])))
        return entries

    def find(
        self,
        kind: str | None = None,
        job_id: str | None = None,
        *,
        attempt: int | None = None,
        pid: int | None = None,
    ) -> list[Entry]:
        return [
            entry
            for entry in self.entries()
            if (kind is None or entry.kind == kind)
            and (job_id is None or entry.job_id == job_id)
            and (attempt is None or entry.attempt == attempt)
            and (pid is None or entry.pid == pid)
        ]

    async def wait_for(
        self,
        kind: str,
        job_id: str,
        *,
        attempt: int | None = None,
        pid: int | None = None,
        within_s: float = 10.0,
    ) -> Entry:
        async def probe() -> Entry | None:
            found = self.find(kind, job_id, attempt=attempt, pid=pid)
            return found[0] if found else None

        what = f"ledger line {kind} {job_id} attempt={attempt} pid={pid}"
        try:
            entry = await eventually(probe, timeout=within_s, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nledger: {self.entries()}") from None
        assert entry is not None
        return entry


class WorkerProcess:
    """One `emq-worker run` daemon; its stdout and stderr (JSON log lines) go to `log_path`."""

    def __init__(
        self,
        name: str,
        popen: subprocess.Popen[bytes],
        log_path: Path,
        *,
        own_group: bool = False,
    ) -> None:
        self.name = name
        self.popen = popen
        self.log_path = log_path
        self.own_group = own_group
        """The process leads a process group of its own (`start_new_session`), whose members
        `kill` ends too: a wrapper such as Debian's `faketime` forks the daemon as its child."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def send(self, sig: signal.Signals) -> None:
        self.popen.send_signal(sig)

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (other lines, e.g. a traceback, are skipped; a line
        still being written is left for the next read). A whole line that opens as JSON but does
        not parse fails the test: two processes' lines glued together lose both events."""
        events = []
        *whole, _being_written = self.output().split("\n")
        for line in whole:
            try:
                event = json.loads(line)
            except ValueError:
                if line.startswith("{"):
                    raise AssertionError(f"{self.name}: a torn log line: {line[:300]}") from None
                continue
            if isinstance(event, dict):
                events.append(event)
        return events

    def find(self, event: str, **fields: object) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]

    def tail(self) -> str:
        lines = self.output().splitlines()[-LOG_TAIL_LINES:]
        return f"--- {self.name} (pid {self.pid}, exit {self.returncode}) ---\n" + "\n".join(lines)

    async def wait_event(
        self, event: str, *, within_s: float = 10.0, **fields: object
    ) -> dict[str, Any]:
        """The first log event named `event` with `fields`; fails at once if the process exits
        without having logged it."""

        async def probe() -> dict[str, Any] | None:
            exited = self.returncode is not None
            found = self.find(event, **fields)
            if found:
                return found[0]
            if exited:
                raise AssertionError(f"{self.name} exited before logging {event} {fields}")
            return None

        try:
            found = await eventually(probe, timeout=within_s, what=f"{self.name}: {event} {fields}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None
        assert found is not None
        return found

    async def wait_exit(self, within_s: float) -> int:
        async def probe() -> bool:
            return self.returncode is not None

        try:
            await eventually(probe, timeout=within_s, what=f"{self.name} to exit")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None
        code = self.returncode
        assert code is not None
        return code

    def children(self) -> list[int]:
        """The pids of the worker processes this one started as a `--processes` parent."""
        return [e["pid"] for e in self.find("worker_process_started")]

    def kill(self) -> None:
        """SIGKILL (which also ends a stopped process) and reap it; a no-op once it has exited.
        With `own_group`, every process left in its group is killed as well; a `--processes`
        parent's worker processes (each in a session of its own) too."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=KILL_WAIT_S)
        if self.own_group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        for pid in self.children():
            if _is_worker(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _is_worker(pid: int) -> bool:
    """The process `pid` is still one of ours (a pid can be reused once it has exited)."""
    try:
        return b"emq_worker.cli" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class WorkerProcesses:
    """Starts worker daemons sharing one ledger under `directory`; `close` kills leftovers."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ledger = Ledger(directory / "ledger.txt")
        self.started: list[WorkerProcess] = []

    def start(
        self,
        name: str,
        *,
        queue: str,
        redis_url: str,
        lease_ms: int,
        beat_ms: int,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> WorkerProcess:
        args = [
            str(EMQ_WORKER),
            "run",
            "--queue",
            queue,
            "--app",
            LEDGER_APP,
            "--redis-url",
            redis_url,
            "--lease-ms",
            str(lease_ms),
            "--beat-ms",
            str(beat_ms),
            "--log-format",
            "json",
            *extra,
        ]
        self.directory.mkdir(parents=True, exist_ok=True)
        log_path = self.directory / f"{name}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                args,
                cwd=REPO_ROOT,
                env={**self._env(), **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        process = WorkerProcess(name, popen, log_path)
        self.started.append(process)
        return process

    def _env(self) -> dict[str, str]:
        # No EMQ_* from the caller's environment leaks into the daemon's settings.
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        env[LEDGER_ENV] = str(self.ledger.path)
        return env

    def close(self) -> None:
        for process in self.started:
            process.kill()

    def __enter__(self) -> WorkerProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
