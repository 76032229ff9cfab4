"""What a failed job leaves behind for an operator: the handler's formatted traceback on the row
(bounded), a short history of the errors of its last attempts (kept across `dead retry`), shown
by `inspect`, the dashboard's job page and the job_retried / job_dead log events."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
import structlog
from click.testing import CliRunner
from redis.asyncio import Redis
from structlog.testing import capture_logs

from emq_worker import App, JobContext, Producer
from emq_worker.admin import dead_letter
from emq_worker.cli.main import main
from emq_worker.dashboard.app import create_app
from emq_worker.dashboard.settings import DashboardSettings
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.replies import text
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

TRACE_LIMIT = 8 * 1024


def _explode(n: int) -> None:
    raise RuntimeError(f"boom {n}")


def failing_app() -> App:
    app = App()

    @app.task(max_attempts=1)
    async def boom(ctx: JobContext, n: int) -> None:
        _explode(n)

    @app.task(max_attempts=1)
    async def huge(ctx: JobContext) -> None:
        raise ValueError("x" * 50_000)

    @app.task(max_attempts=7)
    async def flaky(ctx: JobContext) -> None:
        raise RuntimeError(f"attempt {ctx.attempt}")

    return app


async def inspect_output(job: str, queue: str, redis_url: str) -> str:
    """`emq-worker inspect` in a thread (the command runs its own event loop)."""
    args = ["inspect", job, "-q", queue, "--redis-url", redis_url]
    result = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(main, args))
    assert result.exit_code == 0, result.output
    return result.output


async def dead_row(client: Redis, queue: str, job_id: str) -> dict[str, str]:
    keys = QueueKeys.of(queue)

    async def settled() -> bool:
        return await client.zscore(keys.dead, job_id) is not None

    await eventually(settled, what=f"{job_id} dead")
    row = await client.hgetall(keys.job(job_id))
    return {text(k): text(v) for k, v in row.items()}


async def test_a_failing_handlers_traceback_is_on_the_row_in_inspect_and_in_the_log(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    job = (await Producer(client).enqueue(queue_name, "boom", {"n": 7})).job_id
    with capture_logs() as logs:
        async with running_worker(worker_settings(queue_name, redis_url), failing_app()):
            row = await dead_row(client, queue_name, job)
    trace = row.get("last_traceback", "")
    assert trace.startswith("Traceback (most recent call last):"), row
    assert "in _explode" in trace
    assert trace.rstrip().endswith("RuntimeError: boom 7")
    assert row["last_error"] == "RuntimeError: boom 7"
    [event] = [e for e in logs if e["event"] == "job_dead"]
    assert "in _explode" in event["traceback"]
    shown = await inspect_output(job, queue_name, redis_url)
    assert "in _explode" in shown
    assert "RuntimeError: boom 7" in shown.splitlines()[-1] or any(
        line.strip() == "RuntimeError: boom 7" for line in shown.splitlines()
    ), shown
    app = create_app(DashboardSettings(redis_url=redis_url), client)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://dash.test"
    ) as http:
        page = (await http.get(f"/queues/{queue_name}/jobs/{job}")).text
    assert 'class="last-traceback"' in page
    assert "in _explode" in page


async def test_a_traceback_is_bounded_to_its_last_8_kb(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    job = (await Producer(client).enqueue(queue_name, "huge")).job_id
    async with running_worker(worker_settings(queue_name, redis_url), failing_app()):
        row = await dead_row(client, queue_name, job)
    assert 0 < len(row["last_traceback"].encode()) <= TRACE_LIMIT
    assert row["last_traceback"].rstrip().endswith("x" * 100)


async def test_the_errors_of_the_last_five_attempts_are_kept(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    job = (await Producer(client).enqueue(queue_name, "flaky")).job_id
    async with running_worker(worker_settings(queue_name, redis_url), failing_app()):
        row = await dead_row(client, queue_name, job)
    history = json.loads(row["error_history"])
    assert [h["attempt"] for h in history] == [3, 4, 5, 6, 7]
    assert [h["error"] for h in history] == [f"RuntimeError: attempt {n}" for n in range(3, 8)]
    assert all(isinstance(h["at_ms"], int) and h["at_ms"] > 0 for h in history)


async def test_a_failed_attempt_is_logged_as_a_warning_with_its_traceback(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    """A failure is not routine: job_retried is a warning (as job_dead is), so a worker run at
    --log-level warning still shows its failing jobs."""
    job = (await Producer(client).enqueue(queue_name, "flaky")).job_id
    with capture_logs() as logs:
        async with running_worker(worker_settings(queue_name, redis_url), failing_app()):
            await dead_row(client, queue_name, job)
    retried = [e for e in logs if e["event"] == "job_retried" and e["job_id"] == job]
    assert len(retried) == 6
    assert {e["log_level"] for e in retried} == {"warning"}
    assert all("RuntimeError: attempt" in e["traceback"] for e in retried)


async def test_a_dead_retry_keeps_the_errors_from_before_it(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "boom", {"n": 1})).job_id
    async with running_worker(worker_settings(queue_name, redis_url), failing_app()):
        await dead_row(client, queue_name, job)
        await dead_letter.retry_dead(producer.queue(queue_name), (job,))

        async def died_again() -> bool:
            row = await client.hget(QueueKeys.of(queue_name).job(job), "attempts")
            return (
                row == b"4" and await client.zscore(QueueKeys.of(queue_name).dead, job) is not None
            )

        await eventually(died_again, what="the retried job dead again")
        row = await dead_row(client, queue_name, job)
    # Each entry names its attempt's token: a move to dead raises attempts by one (the fence of
    # its last holder), so the run after the dead retry is token 3 (attempts 4 once dead again).
    history = json.loads(row["error_history"])
    assert [(h["attempt"], h["error"]) for h in history] == [
        (1, "RuntimeError: boom 1"),
        (3, "RuntimeError: boom 1"),
    ]
    shown = await inspect_output(job, queue_name, redis_url)
    assert "attempt 1 at" in shown, shown
    assert "attempt 3 at" in shown


def test_a_console_log_prints_the_traceback_as_a_block(capsys: pytest.CaptureFixture[str]) -> None:
    from emq_worker.observe import log

    trace = 'Traceback (most recent call last):\n  File "jobs.py", line 3, in boom\nValueError: x\n'
    try:
        log.configure("console", "info")
        log.get_logger().warning("job_dead", error="ValueError: x", traceback=trace)
    finally:
        structlog.reset_defaults()
    err = capsys.readouterr().err
    assert '  File "jobs.py", line 3, in boom\n' in err
    assert "\\n" not in err
