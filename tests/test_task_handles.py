"""Typed task handles: `@app.task` returns a handle that is still the handler, and enqueues its
task with the handler's own arguments, checked against its signature before anything is written
(and by mypy: tests/typing/handles_checked.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from redis.asyncio import Redis

from emq_worker import (
    App,
    AsyncTaskHandle,
    ConfigError,
    JobContext,
    PayloadError,
    Producer,
    SyncTaskHandle,
    TaskArgumentError,
    sync_producer,
)
from emq_worker.jobs import codec
from tests.support.running import running_worker, worker_settings

TTL_MS = 60_000
CHECKED = Path(__file__).resolve().parent / "typing" / "handles_checked.py"


app = App()


@app.task(queue="orders", result_ttl_ms=TTL_MS)
async def charge(ctx: JobContext, order_id: str, amount: int = 100) -> dict[str, int]:
    return {order_id: amount}


async def keys_of(client: Redis, queue: str) -> list[bytes | str]:
    return await client.keys(f"emq:{{{queue}}}:*")


async def test_a_handle_enqueues_its_task_and_its_job_handle_waits_for_the_typed_result(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    producer = Producer(client)
    job = await charge.with_options(queue=queue_name).enqueue(producer, "A1", amount=1200)
    stored = await producer.queue(queue_name).get_job(job.job_id)
    assert stored is not None
    # The same envelope as the string API writes: positional arguments travel by name.
    assert codec.decode(stored["payload"].encode()) == (
        "charge",
        {"order_id": "A1", "amount": 1200},
    )
    async with running_worker(worker_settings(queue_name, redis_url), app):
        assert await job.result(timeout_s=20) == {"A1": 1200}
    assert (job.queue, job.duplicate) == (queue_name, False)


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        ((), {}, "missing a required argument: 'order_id'"),
        ((), {"order_id": "A1", "amont": 5}, "unexpected keyword argument 'amont'"),
        (("A1", 5, 6), {}, "too many positional arguments"),
        (("A1",), {"order_id": "A2"}, "multiple values for argument 'order_id'"),
    ],
)
async def test_arguments_that_do_not_fit_raise_before_anything_is_written(
    client: Redis, queue_name: str, args: tuple[object, ...], kwargs: dict[str, object], named: str
) -> None:
    producer = Producer(client)
    with pytest.raises(
        TaskArgumentError, match=rf"task 'charge'\(order_id, amount=100\): .*{named}"
    ):
        await charge.with_options(queue=queue_name).enqueue(producer, *args, **kwargs)  # type: ignore[arg-type]
    assert isinstance(TaskArgumentError("x"), TypeError)
    assert await keys_of(client, queue_name) == []


async def test_a_payload_json_cannot_hold_is_refused_before_any_write(
    client: Redis, queue_name: str
) -> None:
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        await charge.with_options(queue=queue_name).enqueue(
            Producer(client),
            "A1",
            amount=object(),  # type: ignore[arg-type]
        )
    assert await keys_of(client, queue_name) == []


async def test_options_travel_with_the_job_and_a_queue_is_required(
    client: Redis, queue_name: str
) -> None:
    app = App()

    @app.task
    async def nightly(ctx: JobContext, /, **report: int) -> None:
        pass

    producer = Producer(client)
    with pytest.raises(ConfigError, match=r"task 'nightly' has no queue.*with_options"):
        await nightly.enqueue(producer, rows=1)
    later = nightly.with_options(queue=queue_name, delay_ms=60_000, max_attempts=2)
    chosen = producer.minter.job_id()
    job = await later.with_options(job_id=chosen).enqueue(producer, rows=3, pages=2)
    assert job.job_id == chosen
    stored = await producer.queue(queue_name).get_job(job.job_id)
    assert stored is not None
    assert stored["state"] == "scheduled"
    task, kwargs, options = codec.decode_job(stored["payload"].encode())
    assert (task, kwargs) == ("nightly", {"rows": 3, "pages": 2})
    assert options is not None
    assert options.max_attempts == 2
    assert nightly.queue is None  # with_options made copies


async def test_the_handle_is_still_the_handler_and_registers_once(
    client: Redis, queue_name: str
) -> None:
    app = App()

    @app.task
    def receipt(ctx: JobContext, order_id: str) -> str:
        """Send a receipt."""
        return f"sent {order_id}"

    @app.task
    def lines(ctx: JobContext, /, *numbers: int) -> int:
        return sum(numbers)

    assert isinstance(receipt, SyncTaskHandle)
    assert isinstance(charge, AsyncTaskHandle)
    assert await charge(None, "A1", 5) == {"A1": 5}
    with pytest.raises(TaskArgumentError, match=r"task 'lines'\(\*numbers\): parameter 'numbers'"):
        await lines.with_options(queue=queue_name).enqueue(Producer(client), 1, 2)
    assert await keys_of(client, queue_name) == []
    assert receipt(None, "A1") == "sent A1"
    assert (receipt.__name__, receipt.__doc__) == ("receipt", "Send a receipt.")
    assert app.tasks["receipt"].fn is receipt.__wrapped__
    other = App()
    again = other.task(receipt)  # a handle registered elsewhere registers its function
    assert other.tasks["receipt"].fn is app.tasks["receipt"].fn
    assert again(None, "B2") == "sent B2"
    with pytest.raises(ConfigError, match="registered twice"):
        app.task(receipt)


def test_enqueue_sync_over_a_sync_producer(redis_url: str, queue_name: str) -> None:
    app = App()

    @app.task(queue=queue_name)
    def receipt(ctx: JobContext, order_id: str) -> str:
        return order_id

    with sync_producer(redis_url) as producer:
        job = receipt.enqueue_sync(producer, order_id="A1")
        again = receipt.with_options(dedup_id="r-A1").enqueue_sync(producer, "A1")
        assert receipt.with_options(dedup_id="r-A1").enqueue_sync(producer, "A1").duplicate
    assert (job.duplicate, again.duplicate) == (False, False)
    with pytest.raises(TaskArgumentError, match="unexpected keyword argument 'email'"):
        receipt.enqueue_sync(producer, order_id="A1", email="x")  # type: ignore[call-arg]


def mypy_report(tmp_path: Path) -> tuple[set[tuple[int, str]], set[tuple[int, str]]]:
    """(line, error code) of each error, and (line, revealed type) of each note, mypy gives."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path), str(CHECKED)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = {
        (int(n), c) for n, c in re.findall(r":(\d+): error: .*\[([\w-]+)\]$", done.stdout, re.M)
    }
    notes = set(re.findall(r':(\d+): note: Revealed type is "(.*)"$', done.stdout, re.M))
    return errors, {(int(n), t) for n, t in notes}


def test_mypy_checks_the_handles_arguments_and_types_the_result(tmp_path: Path) -> None:
    errors, revealed = mypy_report(tmp_path)
    lines = CHECKED.read_text().splitlines()
    expected_errors = {
        (n, m.group(1))
        for n, line in enumerate(lines, 1)
        if (m := re.search(r"# E: ([\w-]+)$", line))
    }
    expected_reveals = {
        (n, m.group(1))
        for n, line in enumerate(lines, 1)
        if (m := re.search(r"  # R: (.+)$", line))
    }
    assert len(expected_errors) == 5
    assert errors == expected_errors
    assert revealed == expected_reveals
