"""The job commands as an operator meets them: `inspect` on a completed job, `result`,
`inspect`/`logs` without --queue, and `run --check` refused by the version fence."""

from __future__ import annotations

import anyio
from click.testing import CliRunner, Result
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer
from emq_worker.cli.main import main
from emq_worker.protocol.keys import QueueKeys
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually


async def cli(*args: str) -> Result:
    """The command in a thread: it runs its own event loop."""
    return await anyio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


def jobs_app() -> App:
    app = App()

    @app.task(result_ttl_ms=60_000)
    async def add(ctx: JobContext, a: int, b: int) -> int:
        await ctx.append_log(f"adding {a} and {b}")
        return a + b

    @app.task(max_attempts=1, result_ttl_ms=60_000)
    async def fail(ctx: JobContext) -> None:
        raise RuntimeError("boom")

    return app


async def gone(client: Redis, queue: str, job: str) -> bool:
    return not await client.exists(QueueKeys.of(queue).job(job))


async def test_inspect_on_a_completed_job_says_so_and_result_prints_it(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    job = (await Producer(client).enqueue(queue_name, "add", {"a": 2, "b": 3})).job_id
    async with running_worker(worker_settings(queue_name, redis_url), jobs_app()):
        await eventually(lambda: gone(client, queue_name, job), what="the job completed")
    shown = await cli("inspect", job, "--redis-url", redis_url)  # no --queue: found
    assert shown.exit_code == 0, shown.output
    assert "where   completed (result stored)" in shown.output
    assert "result  5 (expires in" in shown.output
    value = await cli("result", job, "-q", queue_name, "--redis-url", redis_url)
    assert (value.exit_code, value.output) == (0, "5\n")


async def test_result_of_a_dead_job_and_of_a_job_still_pending_exit_1_saying_why(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    dead = (await producer.enqueue(queue_name, "fail")).job_id
    async with running_worker(worker_settings(queue_name, redis_url), jobs_app()):
        failed = await cli("result", dead, "--wait", "10", "--redis-url", redis_url)
    assert failed.exit_code == 1
    assert f"Error: job {dead} is dead: RuntimeError: boom" in failed.output
    waiting = (await producer.enqueue(queue_name, "add", {"a": 1, "b": 1})).job_id
    pending = await cli("result", waiting, "--wait", "0.2", "--redis-url", redis_url)
    assert pending.exit_code == 1
    assert "has no result after 0.2 s (it is pending)" in pending.output


async def test_logs_and_inspect_find_the_queue_and_refuse_an_ambiguous_id(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    job = (await producer.enqueue(queue_name, "add", {"a": 1, "b": 2})).job_id
    await client.rpush(QueueKeys.of(queue_name).logs(job), "a line")
    logs = await cli("logs", job, "--redis-url", redis_url)
    assert (logs.exit_code, logs.output) == (0, "a line\n")
    await producer.enqueue(queue_name + ".b", "add", {"a": 1, "b": 2}, job_id=job)
    both = await cli("inspect", job, "--redis-url", redis_url)
    assert both.exit_code == 1
    assert f"Error: job {job} is in several queues" in both.output
    assert "name one with --queue" in both.output


async def test_check_is_refused_by_the_version_fence(client: Redis, redis_url: str) -> None:
    await client.ping()  # the fence is set to our version before --check meets it
    args = ["run", "--check", "-q", "orders", "--app", "tests.apps.ledger:app"]
    refused = await cli(*args, "--wire-version", "echomq:0.0.1", "--redis-url", redis_url)
    assert refused.exit_code == 1
    assert "{emq}:version is 'echomq:3.0.0' but this worker speaks 'echomq:0.0.1'" in refused.output


async def test_clear_empties_the_pending_jobs_and_leaves_the_rest(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    for n in range(5):
        await producer.enqueue(queue_name, "add", {"a": n, "b": n}, dedup_id=f"d{n}")
    later = (await producer.enqueue(queue_name, "add", {"a": 0, "b": 0}, delay_ms=60_000)).job_id
    asked = await cli("clear", "-q", queue_name, "--redis-url", redis_url)
    assert asked.exit_code == 1  # no terminal: the confirmation aborts
    cleared = await cli("clear", "-q", queue_name, "--yes", "--json", "--redis-url", redis_url)
    assert cleared.exit_code == 0, cleared.output
    assert '"deleted": 5' in cleared.output
    keys = QueueKeys.of(queue_name)
    assert await client.zcard(keys.pending) == 0
    assert await client.zscore(keys.schedule, later) is not None
    again = await producer.enqueue(queue_name, "add", {"a": 0, "b": 0}, dedup_id="d0")
    assert not again.duplicate  # the dedup keys went with the jobs
