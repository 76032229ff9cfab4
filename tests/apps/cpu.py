"""A test app whose tasks run in the process pool (`executor="process"`): each can say which
process ran it, hang past its timeout, or kill its own process, on its first attempt only."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from emq_worker import App, JobContext

app = App()


@app.task(executor="process", result_ttl_ms=60_000)
def whoami(ctx: JobContext, n: int) -> dict[str, int]:
    """Which process ran it, and some CPU work (a sum of squares) to show for it."""
    return {"pid": os.getpid(), "sum": sum(i * i for i in range(n)), "attempt": ctx.attempt}


@app.task(executor="process", result_ttl_ms=60_000, timeout_ms=500, max_attempts=2)
def hang_once(ctx: JobContext, pid_file: str) -> int:
    """Attempt 1 records its pid and hangs past its timeout; attempt 2 returns its pid."""
    if ctx.attempt == 1:
        Path(pid_file).write_text(str(os.getpid()))
        time.sleep(60)
    return os.getpid()


@app.task(executor="process", result_ttl_ms=60_000, max_attempts=2)
def crash_once(ctx: JobContext, pid_file: str, how: str) -> int:
    """Attempt 1 records its pid and kills its own process (`exit`: os._exit(3); `kill`:
    SIGKILL); attempt 2 returns its pid."""
    if ctx.attempt == 1:
        Path(pid_file).write_text(str(os.getpid()))
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


@app.task(executor="process", result_ttl_ms=60_000)
def nap(ctx: JobContext, ms: int) -> int:
    """Sleep (in its process) and return its pid: a job beside a crashing one."""
    time.sleep(ms / 1000)
    return os.getpid()


@app.task(executor="process", max_attempts=1)
def refuse(ctx: JobContext, reason: str) -> None:
    raise ValueError(reason)
