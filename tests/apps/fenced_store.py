"""A test app for worker subprocesses: the fencing recipe's write (emq_worker/examples/
fenced_store.py) behind a hold, so a test can freeze the first holder before it writes.

Attempt 1 waits in its thread until the file `<ledger>.release` exists, then writes; any later
attempt writes at once. Each step is a ledger line (`start`, `written`, `refused`), in the format
of tests/apps/ledger.py. The database comes from libpq's own variables (PGHOST, ...), which the
test sets; only a test app reads the environment.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from emq_worker import App, JobContext
from emq_worker.examples.fenced_store import StaleTokenError, credit_account
from tests.apps.ledger import LEDGER_ENV

POLL_S = 0.01

app = App()


def _record(kind: str, ctx: JobContext) -> None:
    with open(os.environ[LEDGER_ENV], "a", buffering=1, encoding="utf-8") as ledger:
        ledger.write(f"{kind} {ctx.job_id} {ctx.attempt} {os.getpid()}\n")


def release_path(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + ".release")


@app.task
def credit(ctx: JobContext, account: str, amount: int) -> None:
    """A sync handler, run in a thread: a lost lease cancels its task but cannot stop the
    thread, so the frozen holder's write does reach the database, which must refuse it."""
    _record("start", ctx)
    release = release_path(Path(os.environ[LEDGER_ENV]))
    while ctx.attempt == 1 and not release.exists():
        time.sleep(POLL_S)
    try:
        with psycopg.connect("") as conn:
            credit_account(conn, ctx, account, amount)
    except StaleTokenError:
        _record("refused", ctx)
        raise
    _record("written", ctx)
