"""A test app for worker subprocesses: every handler appends to a ledger file.

Each event is one line, `start|done <job_id> <attempt> <pid>`, appended (line-buffered, one
`write` per line) to the file named by `EMQ_TEST_LEDGER`, so several worker processes can share
one ledger and a SIGKILL loses no line already written. Only a test app reads the environment;
product code leaves that to the CLI.
"""

from __future__ import annotations

import os

import anyio

from emq_worker import App, JobContext

LEDGER_ENV = "EMQ_TEST_LEDGER"

app = App()


def _record(kind: str, ctx: JobContext) -> None:
    with open(os.environ[LEDGER_ENV], "a", buffering=1, encoding="utf-8") as ledger:
        ledger.write(f"{kind} {ctx.job_id} {ctx.attempt} {os.getpid()}\n")


@app.task
async def sleep(ctx: JobContext, ms: int, first_ms: int | None = None) -> None:
    """Hold the job for `ms` milliseconds; for `first_ms` on its first attempt, when given (a
    test that kills the first holder makes it longer than the test could ever wait)."""
    _record("start", ctx)
    await anyio.sleep((first_ms if ctx.attempt == 1 and first_ms is not None else ms) / 1000)
    _record("done", ctx)


@app.task
async def noop(ctx: JobContext) -> None:
    _record("start", ctx)
    _record("done", ctx)


@app.task
async def flow_parent(ctx: JobContext, children: int) -> int:
    """A flow parent: records `start`, and `early` when fewer than its `children` are done
    (completed, or dead and ignored) as it starts, which must never happen."""
    _record("start", ctx)
    done = len(await ctx.children_results()) + len(await ctx.children_failures())
    if done != children:
        _record("early", ctx)
    _record("done", ctx)
    return done
