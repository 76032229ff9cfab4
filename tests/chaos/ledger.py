"""The handlers' ledger: one JSON line per handler event, one file per worker process.

Writer side (used by tests/chaos/app.py inside worker processes): `record(kind, ctx)` appends
`{"kind", "job", "attempt", "pid", "mono", "wall"}` with one `write` on a line-buffered file, so a
SIGKILL loses no line already written. The file is `<dir>/ledger-<pid>.jsonl`, where `<dir>` is
the parent of the path in `EMQ_TEST_LEDGER` (tests/support/processes.py sets it per fleet).

Kinds: `start` (the handler began attempt `attempt`), `done` (the handler is about to return
normally), `stopped` (the handler saw its cancellation, e.g. its worker gave the lease up;
written by the handlers that measure when they stop). A handler cannot see whether its
completion is accepted (settle is batched after it returns): accepted writes are read from
the worker logs and Redis by checker.py.

Reader side: `read_ledger(directory)` merges every process's file into one list of `Event`s
ordered by `mono` (CLOCK_MONOTONIC is system-wide on Linux, so times compare across processes).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

LEDGER_ENV = "EMQ_TEST_LEDGER"
START = "start"
DONE = "done"
STOPPED = "stopped"


class HasJob(Protocol):
    @property
    def job_id(self) -> str: ...

    @property
    def attempt(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    job: str
    attempt: int
    pid: int
    mono: float
    """time.monotonic() in the handler's process (system-wide on Linux)."""
    wall: float


_file: IO[str] | None = None
_file_pid = 0


def _ledger_file() -> IO[str]:
    """This process's ledger file, opened once (re-opened after a fork)."""
    global _file, _file_pid
    if _file is None or _file_pid != os.getpid():
        directory = Path(os.environ[LEDGER_ENV]).parent
        directory.mkdir(parents=True, exist_ok=True)
        _file = (directory / f"ledger-{os.getpid()}.jsonl").open("a", buffering=1, encoding="utf-8")
        _file_pid = os.getpid()
    return _file


def record(kind: str, ctx: HasJob) -> None:
    line = {
        "kind": kind,
        "job": ctx.job_id,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "mono": time.monotonic(),
        "wall": time.time(),
    }
    _ledger_file().write(json.dumps(line) + "\n")


def read_ledger(directory: Path) -> list[Event]:
    """Every event of every process under `directory`, by monotonic time; a torn last line
    (impossible with one write per line, but cheap to tolerate) is skipped."""
    events = []
    for path in sorted(directory.glob("ledger-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                raw = json.loads(line)
                events.append(
                    Event(
                        str(raw["kind"]),
                        str(raw["job"]),
                        int(raw["attempt"]),
                        int(raw["pid"]),
                        float(raw["mono"]),
                        float(raw["wall"]),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue
    events.sort(key=lambda event: event.mono)
    return events
