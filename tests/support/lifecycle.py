"""What the test support's servers share: started on entering a `with` block and stopped on
leaving it (stopped as well when the start fails half-way, so nothing outlives a failed fixture),
and a process stopped by a signal, then SIGKILL if it lingers."""

from __future__ import annotations

import signal
import subprocess
from typing import Any, Self


class Started:
    """A resource with `start` and `stop`, used as `with Resource(...) as resource:`."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(
    process: subprocess.Popen[Any], deadline_s: float, how: int = signal.SIGTERM
) -> None:
    """Send `how`, wait up to `deadline_s`, then SIGKILL and wait again."""
    if process.poll() is not None:
        return
    process.send_signal(how)
    try:
        process.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=deadline_s)
