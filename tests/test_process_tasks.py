"""`@app.task(executor="process")`: a CPU-bound handler runs in a spawned pool process while the
worker holds its lease. Its timeout kills the process and the job is retried; a process that dies
mid-job fails that job alone (retried), and the worker and its other jobs carry on.

The handlers live in `tests.apps.cpu`: a spawned process imports them by name, as it would a
user's module.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from emq_worker import App, JobContext, Producer, WorkerSettings
from emq_worker.errors import ConfigError, JobFailedError
from emq_worker.jobs.process_tasks import check_process_tasks
from tests.apps import cpu
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


def pool_settings(queue: str, url: str, **overrides: Any) -> WorkerSettings:
    return worker_settings(queue, url, **{"process_pool": 2, **overrides})


async def process_gone(pid: int) -> None:
    """Wait until `pid` names no process (killed and reaped)."""

    async def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    await eventually(gone, timeout=10, what=f"pool process {pid} to be gone")


async def read_pid(path: Path) -> int:
    async def written() -> str:
        file = anyio.Path(path)
        return await file.read_text() if await file.exists() else ""

    return int(await eventually(written, timeout=20, what=f"a pid in {path}"))


def retried_errors(logs: list[MutableMapping[str, Any]], job_id: str) -> list[str]:
    return [e["error"] for e in logs if e["event"] == "job_retried" and e["job_id"] == job_id]


# --- registration: what a spawned process cannot import is refused when the app is built -------


def test_a_lambda_cannot_be_a_process_task() -> None:
    with pytest.raises(ConfigError, match=r"task 'square'.*<lambda> is not a module-level"):
        App().task(name="square", executor="process")(lambda ctx, n: n * n)


def test_a_function_defined_inside_another_cannot_be_a_process_task() -> None:
    def inner(ctx: JobContext) -> None: ...

    with pytest.raises(ConfigError, match=r"task 'inner'.*<locals>\.inner is not a module-level"):
        App().task(executor="process")(inner)


def test_an_async_handler_cannot_be_a_process_task() -> None:
    async def work(ctx: JobContext) -> None: ...

    with pytest.raises(ConfigError, match=r"task 'work': executor='process' runs plain functions"):
        App().task(executor="process")(work)


def test_an_unknown_executor_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"executor must be 'process'; got 'threads'"):
        App().task(executor="threads")(shadowed)  # type: ignore[call-overload]


def shadowed(ctx: JobContext) -> None:
    """Registered, then its module attribute is rebound: a pool process would import another."""


def test_a_process_task_whose_name_imports_another_object_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = App()
    app.task(executor="process")(shadowed)
    check_process_tasks(app)  # as registered: found by name
    monkeypatch.setattr(sys.modules[__name__], "shadowed", lambda ctx: None)
    with pytest.raises(ConfigError, match=r"task 'shadowed'.*names another object"):
        check_process_tasks(app)


# --- running: a real server, an in-process worker, spawned pool processes ----------------------


@pytest.mark.fault
async def test_a_process_task_runs_in_another_process_and_returns_its_result(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    async with running_worker(pool_settings(queue_name, redis_url), cpu.app):
        job = await producer.enqueue(queue_name, "whoami", {"n": 1000})
        result = await producer.result(job.job_id, queue=queue_name, timeout=30)
    assert result["pid"] != os.getpid()
    assert result["sum"] == sum(i * i for i in range(1000))
    assert result["attempt"] == 1


@pytest.mark.fault
async def test_a_timed_out_process_task_has_its_process_killed_and_is_retried(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    producer = Producer(client)
    pid_file = tmp_path / "pid"
    with capture_logs() as logs:
        async with running_worker(pool_settings(queue_name, redis_url), cpu.app):
            job = await producer.enqueue(queue_name, "hang_once", {"pid_file": str(pid_file)})
            hung = await read_pid(pid_file)
            await process_gone(hung)
            second = await producer.result(job.job_id, queue=queue_name, timeout=30)
    assert second not in (hung, os.getpid())  # a new process ran attempt 2
    assert retried_errors(logs, job.job_id) == ["timed out after 500 ms"]


@pytest.mark.fault
@pytest.mark.parametrize("how", ["exit", "kill"])
async def test_a_process_that_dies_mid_job_fails_that_job_alone_and_it_is_retried(
    client: Redis, redis_url: str, queue_name: str, tmp_path: Path, how: str
) -> None:
    producer = Producer(client)
    pid_file = tmp_path / "pid"
    with capture_logs() as logs:
        async with running_worker(pool_settings(queue_name, redis_url), cpu.app) as worker:
            beside = await producer.enqueue(queue_name, "nap", {"ms": 1500})
            job = await producer.enqueue(
                queue_name, "crash_once", {"pid_file": str(pid_file), "how": how}
            )
            crashed = await read_pid(pid_file)
            second = await producer.result(job.job_id, queue=queue_name, timeout=30)
            napper = await producer.result(beside.job_id, queue=queue_name, timeout=30)
            assert not worker.stopping
    assert second != crashed
    assert napper not in (crashed, os.getpid())  # the job beside it ran on in its own process
    died = "exited with code 3" if how == "exit" else f"was killed by {signal.SIGKILL.name}"
    assert retried_errors(logs, job.job_id) == [
        f"the pool process (pid {crashed}) {died} before 'crash_once' returned"
    ]
    assert retried_errors(logs, beside.job_id) == []


@pytest.mark.fault
async def test_a_process_task_s_exception_fails_the_job_with_its_own_error_and_traceback(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    with capture_logs() as logs:
        async with running_worker(pool_settings(queue_name, redis_url), cpu.app):
            job = await producer.enqueue(queue_name, "refuse", {"reason": "no such account"})
            with pytest.raises(JobFailedError) as failed:
                await producer.result(job.job_id, queue=queue_name, timeout=30)
    assert failed.value.last_error == "ValueError: no such account"
    dead = [e for e in logs if e["event"] == "job_dead" and e["job_id"] == job.job_id]
    assert "raise ValueError(reason)" in dead[0]["traceback"]


@pytest.mark.fault
async def test_the_worker_renews_the_lease_while_the_process_computes_past_it(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    settings = pool_settings(queue_name, redis_url, lease_ms=900, renew_every_ms=300)
    async with running_worker(settings, cpu.app) as worker:
        job = await producer.enqueue(queue_name, "nap", {"ms": 2500})
        assert await producer.result(job.job_id, queue=queue_name, timeout=30) != os.getpid()
        counters = worker.counters
        assert (counters.completed, counters.reaped, counters.leases_lost) == (1, 0, 0)


@pytest.mark.fault
async def test_waiting_for_a_free_pool_process_does_not_count_against_the_timeout(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """One process, two 1.5 s jobs with a 2 s timeout: the second waits 1.5 s for the process,
    then runs its own 1.5 s; timed from the enqueue it would have timed out."""
    producer = Producer(client)
    settings = pool_settings(queue_name, redis_url, process_pool=1)
    async with running_worker(settings, cpu.app) as worker:
        options: dict[str, Any] = {"timeout_ms": 2000, "max_attempts": 1}
        first = await producer.enqueue(queue_name, "nap", {"ms": 1500}, **options)
        second = await producer.enqueue(queue_name, "nap", {"ms": 1500}, **options)
        pids = {
            await producer.result(j.job_id, queue=queue_name, timeout=30) for j in (first, second)
        }
        assert len(pids) == 1  # the same (only) process ran both, one after the other
        assert worker.counters.retried + worker.counters.dead_lettered == 0
