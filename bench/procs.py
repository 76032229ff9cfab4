"""Runner processes: started pinned, read as JSON lines, ended by their own pid."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from bench.pinning import pinned

REPO = Path(__file__).resolve().parent.parent


class BenchError(RuntimeError):
    """A measurement could not be taken; the run records it and goes on."""


class Proc:
    """One runner process: `<command> '<json cfg>'` (`python -m <module>`, or `node <script>`),
    stdout read line by line."""

    def __init__(
        self, command: list[str], cfg: dict[str, Any], core: int | None, log: Path
    ) -> None:
        self.name = f"{log.stem} runner {cfg.get('mode')}"
        self.log = log
        args = pinned([*command, json.dumps(cfg)], core)
        with log.open("ab") as err:
            self.process = subprocess.Popen(
                args, cwd=REPO, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL
            )
        self.pid = self.process.pid
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            try:
                self._events.put(json.loads(line))
            except json.JSONDecodeError:
                continue
        self._events.put(None)

    def wait(self, event: str, timeout: float) -> dict[str, Any]:
        """The next report named `event`; BenchError on an error report, exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise BenchError(f"{self.name}: no {event!r} within {timeout:.0f} s{self._tail()}")
            try:
                report = self._events.get(timeout=remaining)
            except queue.Empty:
                continue
            if report is None:
                raise BenchError(f"{self.name} exited before {event!r}{self._tail()}")
            if report.get("event") == "error":
                self.kill()
                raise BenchError(f"{self.name}: {report.get('error')}{self._tail()}")
            if report.get("event") == event:
                return report

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()[-5:]
        except OSError:
            return ""
        return ("; stderr: " + " | ".join(lines)) if lines else ""

    def finish(self, timeout: float = 10.0) -> None:
        """Wait for the runner to leave by itself; kill it past `timeout`."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self._reader.join(timeout=5)  # it reads to the end of the dead process's output
        if self.process.stdout is not None:
            self.process.stdout.close()
