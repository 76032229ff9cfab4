"""A handler whose effect lands in PostgreSQL, fenced by the job's token, so a holder that froze
past its lease cannot overwrite the effect of the holder that took the job over:
`emq-worker run --queue payments --app emq_worker.examples.fenced_store:app`, with libpq's own
variables (`PGHOST`, `PGDATABASE`, ...) naming the database; psycopg comes with the `postgres`
extra (`python -m pip install '.[postgres]'` in a checkout).

The fence is one row per job in `job_fence`, holding the highest token that wrote. The effect and
the fence move in one transaction: the upsert raises the fence only when the writer's token is at
least the stored one, and a writer whose token is lower gets no row back, rolls back and writes
nothing. Two writers racing queue on the fence row's lock; the second re-reads it and is refused
if the first had the higher token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import psycopg

from emq_worker import App, JobContext

QUEUE: Final = "payments"

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS job_fence (
    job_id text PRIMARY KEY,
    token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS credits (
    job_id text PRIMARY KEY,
    account text NOT NULL,
    amount bigint NOT NULL,
    token bigint NOT NULL
);
"""

RAISE_FENCE: Final = """
INSERT INTO job_fence (job_id, token) VALUES (%(job_id)s, %(token)s)
ON CONFLICT (job_id) DO UPDATE SET token = EXCLUDED.token
    WHERE job_fence.token <= EXCLUDED.token
RETURNING token
"""

CREDIT: Final = """
INSERT INTO credits (job_id, account, amount, token)
VALUES (%(job_id)s, %(account)s, %(amount)s, %(token)s)
ON CONFLICT (job_id) DO UPDATE
    SET account = EXCLUDED.account, amount = EXCLUDED.amount, token = EXCLUDED.token
"""

app = App()

Effect = Callable[[psycopg.Cursor[tuple[object, ...]]], object]


class StaleTokenError(Exception):
    """The store has seen a higher token for this job: another holder took it over and wrote
    first, so this holder's write was refused and nothing of it was kept."""

    def __init__(self, job_id: str, token: int) -> None:
        super().__init__(f"job {job_id}: token {token} refused, a later holder has written")
        self.job_id = job_id
        self.token = token


def write_fenced(
    conn: psycopg.Connection[tuple[object, ...]], job_id: str, token: int, effect: Effect
) -> None:
    """Run `effect` in one transaction with the fence check: committed when `token` is at least
    the highest token stored for `job_id`, else rolled back with StaleTokenError."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(RAISE_FENCE, {"job_id": job_id, "token": token})
        if cur.fetchone() is None:
            raise StaleTokenError(job_id, token)
        effect(cur)


def create_schema(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Create the two tables, once (two sessions racing a CREATE TABLE IF NOT EXISTS can both
    try to create them: do it before the workers start, as a migration would)."""
    with conn.transaction():
        conn.execute(SCHEMA)


def credit_account(
    conn: psycopg.Connection[tuple[object, ...]], ctx: JobContext, account: str, amount: int
) -> None:
    """The job's effect: one credit row per job, written under the job's fencing token."""
    params = {"job_id": ctx.job_id, "account": account, "amount": amount}

    def effect(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
        cur.execute(CREDIT, {**params, "token": ctx.fencing_token})

    write_fenced(conn, ctx.job_id, ctx.fencing_token, effect)


@app.task(queue=QUEUE)
def credit(ctx: JobContext, account: str, amount: int) -> None:
    """Credit `amount` to `account` (a sync handler: psycopg's blocking calls run in a thread).
    A stale holder's write raises StaleTokenError; its fail is fenced by the queue too."""
    with psycopg.connect("") as conn:  # a real app keeps a pool (psycopg_pool)
        credit_account(conn, ctx, account, amount)


# Once, before the first worker starts: python -m emq_worker.examples.fenced_store
if __name__ == "__main__":
    with psycopg.connect("") as setup:
        create_schema(setup)
