"""The fencing recipe on a real PostgreSQL (emq_worker/examples/fenced_store.py): the job's
fencing token, checked by the user's own store, refuses a frozen holder's late write after its
lease was taken over. Skipped when no PostgreSQL binaries are installed (Debian's `postgresql`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from redis.asyncio import Redis

from emq_worker import JobContext, Producer
from emq_worker.examples.fenced_store import StaleTokenError, create_schema, credit_account
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob
from tests.apps.fenced_store import release_path
from tests.support.postgres import PostgresServer, find_binaries
from tests.support.processes import WorkerProcesses
from tests.support.wait import eventually

FENCED_APP = "tests.apps.fenced_store:app"
BEAT_MS = 100
Row = tuple[object, ...]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    binaries = find_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL binaries (initdb): install Debian's postgresql package")
    with PostgresServer(binaries) as server:
        with psycopg.connect(server.conninfo) as conn:
            create_schema(conn)
        yield server


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(tmp_path / "workers") as processes:
        yield processes


def rows(postgres: PostgresServer, query: str, job: str) -> list[Row]:
    with psycopg.connect(postgres.conninfo) as conn:
        return conn.execute(query, (job,)).fetchall()


def context(job_id: str, token: int) -> JobContext:
    return JobContext(ClaimedJob("payments", JobId(job_id), b"", Token(token), ""), "credit")


def test_the_store_keeps_the_highest_token_and_refuses_a_lower_one(
    postgres: PostgresServer, queue_name: str
) -> None:
    job = f"unit-{queue_name}"
    with psycopg.connect(postgres.conninfo) as conn:
        credit_account(conn, context(job, 2), "acct-1", 200)
        credit_account(conn, context(job, 2), "acct-1", 250)  # the same holder writing again
        with pytest.raises(StaleTokenError, match="token 1 refused"):
            credit_account(conn, context(job, 1), "acct-1", 100)
        credit_account(conn, context(job, 3), "acct-1", 300)
    credits = "SELECT amount, token FROM credits WHERE job_id = %s"
    assert rows(postgres, credits, job) == [(300, 3)]
    assert rows(postgres, "SELECT token FROM job_fence WHERE job_id = %s", job) == [(3,)]


@pytest.mark.fault
def test_running_the_module_creates_the_tables_the_recipe_writes(postgres: PostgresServer) -> None:
    """The set-up step the how-to shows: `python -m emq_worker.examples.fenced_store`, given
    libpq's variables, creates the schema in an empty database."""
    database = "fresh_schema"
    with psycopg.connect(postgres.conninfo, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.execute(f"CREATE DATABASE {database}")
    env = {**os.environ, **postgres.environment, "PGDATABASE": database}
    module = "emq_worker.examples.fenced_store"
    subprocess.run([sys.executable, "-m", module], env=env, check=True, timeout=60)
    with psycopg.connect(f"{postgres.conninfo} dbname={database}") as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        assert sorted(row[0] for row in tables) == ["credits", "job_fence"]


@pytest.mark.fault
async def test_a_frozen_holder_s_late_write_is_refused_by_the_database(
    client: Redis,
    redis_url: str,
    queue_name: str,
    workers: WorkerProcesses,
    postgres: PostgresServer,
) -> None:
    """A claims the job and stops in its handler (before writing); A is SIGSTOPped, its lease
    lapses, B takes the job over (token 2), writes and completes. A is then thawed and its
    handler's thread writes with token 1: PostgreSQL refuses it, and B's effect stands."""
    producer = Producer(client)
    queue = producer.queue(queue_name)
    run = ("--app", FENCED_APP)
    a = workers.start(
        "a", queue=queue_name, redis_url=redis_url, lease_ms=600, beat_ms=BEAT_MS,
        extra=run, env=postgres.environment,
    )  # fmt: skip
    await a.wait_event("worker_started")
    job = (await producer.enqueue(queue_name, "credit", {"account": "acct-7", "amount": 70})).job_id
    await workers.ledger.wait_for("start", job, attempt=1, pid=a.pid)
    a.send(signal.SIGSTOP)

    b = workers.start(
        "b", queue=queue_name, redis_url=redis_url, lease_ms=3000, beat_ms=BEAT_MS,
        extra=run, env=postgres.environment,
    )  # fmt: skip
    await workers.ledger.wait_for("written", job, attempt=2, pid=b.pid, within_s=15)

    async def completed() -> bool:
        return await queue.get_job(job) is None and (await queue.counts()).completed == 1

    await eventually(completed, timeout=10, what=f"B's completion of {job}")

    release_path(workers.ledger.path).touch()
    a.send(signal.SIGCONT)
    await workers.ledger.wait_for("refused", job, attempt=1, pid=a.pid, within_s=10)

    assert workers.ledger.find("written", job, pid=a.pid) == []
    credits = "SELECT account, amount, token FROM credits WHERE job_id = %s"
    assert rows(postgres, credits, job) == [("acct-7", 70, 2)]
    assert rows(postgres, "SELECT token FROM job_fence WHERE job_id = %s", job) == [(2,)]
