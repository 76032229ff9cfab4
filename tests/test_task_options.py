"""Per-task options (`@app.task(max_attempts=, backoff=, timeout_ms=, result_ttl_ms=)`) and
their per-enqueue overrides, carried in the JSON envelope's `options` object."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from emq_worker import App, JobContext, Producer, WorkerSettings
from emq_worker.errors import ConfigError, PayloadError
from emq_worker.jobs import codec
from emq_worker.jobs.policy import JobPolicy, Policy, resolve
from emq_worker.jobs.producer import JobSpec
from emq_worker.protocol.names import JobId
from emq_worker.retry import Exponential, Fixed, Jitter
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually

MINUTE_MS = 60_000


def test_no_options_leave_the_envelope_as_it_was() -> None:
    assert codec.encode("charge", {"a": 1}) == b'{"task":"charge","kwargs":{"a":1}}'
    assert codec.encode("charge", {"a": 1}, JobPolicy()) == b'{"task":"charge","kwargs":{"a":1}}'
    assert codec.decode_job(b'{"task":"charge","kwargs":{"a":1}}') == ("charge", {"a": 1}, None)


def test_options_round_trip_through_the_envelope() -> None:
    options = JobPolicy(
        max_attempts=5,
        backoff=Jitter(Exponential(100, 10_000)),
        timeout_ms=2_000,
        result_ttl_ms=0,
    )
    payload = codec.encode("charge", {}, options)
    assert json.loads(payload)["options"] == {
        "max_attempts": 5,
        "backoff": "jitter:exponential:100:10000",
        "timeout_ms": 2_000,
        "result_ttl_ms": 0,
    }
    assert codec.decode_job(payload) == ("charge", {}, options)
    assert codec.decode(payload) == ("charge", {})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ('{"max_attempts":0}', "max_attempts must be >= 1; got 0"),
        ('{"max_attempts":"3"}', "max_attempts must be an integer; got '3'"),
        ('{"timeout_ms":1.5}', "timeout_ms must be an integer; got 1.5"),
        ('{"result_ttl_ms":-1}', "result_ttl_ms must be >= 0; got -1"),
        ('{"backoff":"linear:5"}', "backoff must be fixed:MS"),
        ('{"backoff":5}', "backoff must be a string"),
        ('{"retries":3}', r"unknown job option\(s\) \['retries'\]"),
        ("[1]", "options must be a JSON object; got \\[1\\]"),
    ],
)
def test_bad_options_in_a_payload_name_the_value(options: str, message: str) -> None:
    payload = f'{{"task":"charge","options":{options}}}'.encode()
    with pytest.raises(PayloadError, match=message):
        codec.decode_job(payload)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be >= 1; got 0"),
        ({"timeout_ms": "5"}, "timeout_ms must be an integer; got '5'"),
        ({"result_ttl_ms": -5}, "result_ttl_ms must be >= 0; got -5"),
        ({"max_attempts": True}, "max_attempts must be an integer; got True"),
    ],
)
async def test_bad_overrides_are_refused_before_anything_is_written(
    client: Redis, queue_name: str, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        await Producer(client).enqueue(queue_name, "charge", **overrides)
    assert not await client.exists(f"emq:{{{queue_name}}}:pending")


async def test_a_raw_payload_takes_no_options(client: Redis, queue_name: str) -> None:
    spec = JobSpec(payload=b"raw", options=JobPolicy(max_attempts=2))
    with pytest.raises(ConfigError, match="raw payload has none"):
        await Producer(client).enqueue_many(queue_name, [spec])


def test_a_task_declares_a_result_ttl_and_a_bad_one_is_refused() -> None:
    app = App()

    @app.task(result_ttl_ms=1_000)
    async def kept(ctx: JobContext) -> int:
        return 1

    assert app.tasks["kept"].policy.result_ttl_ms == 1_000
    with pytest.raises(ConfigError, match=r"task 'never': result_ttl_ms must be >= 0; got -1"):

        @app.task(result_ttl_ms=-1)
        async def never(ctx: JobContext) -> None: ...


def test_the_policy_layers_resolve_in_one_order_worker_task_job() -> None:
    """Each layer's set fields override the layers below; unset ones leave them in force."""
    worker = WorkerSettings(queues=("q",), max_attempts=3, job_timeout_ms=9_000).policy
    task = JobPolicy(max_attempts=7, backoff=Fixed(50))
    job = JobPolicy(max_attempts=2, result_ttl_ms=1_000)
    assert resolve(worker, task) == Policy(7, Fixed(50), 9_000, 0)
    assert resolve(worker, task, job) == Policy(2, Fixed(50), 9_000, 1_000)
    assert resolve(worker, None, JobPolicy()) == worker


def flaky_app(runs: list[int]) -> App:
    """`flaky` fails every time; its own policy: 1 attempt, a minute between retries."""
    app = App()

    @app.task(max_attempts=1, backoff=Fixed(MINUTE_MS), timeout_ms=MINUTE_MS)
    async def flaky(ctx: JobContext, nap_s: float = 0) -> None:
        runs.append(ctx.attempt)
        await anyio.sleep(nap_s)
        raise RuntimeError(f"boom {ctx.attempt}")

    return app


async def dead_row(producer: Producer, queue: str, job_id: JobId) -> dict[str, str]:
    async def dead() -> dict[str, str]:
        row = await producer.queue(queue).get_job(job_id)
        return row if row is not None and row["state"] == "dead" else {}

    return await eventually(dead, what=f"{job_id} dead", timeout=20)


async def test_per_enqueue_max_attempts_and_backoff_override_the_task(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    runs: list[int] = []
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "flaky", max_attempts=3, backoff=Fixed(1))).job_id
    async with running_worker(worker_settings(queue_name, redis_url), flaky_app(runs)):
        row = await dead_row(producer, queue_name, job_id)
    # Three runs (not the task's one), a millisecond apart (not the task's minute).
    assert runs == [1, 2, 3]
    assert row["last_error"] == "RuntimeError: boom 3"


async def test_the_task_policy_applies_without_overrides(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    runs: list[int] = []
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "flaky")).job_id
    async with running_worker(worker_settings(queue_name, redis_url), flaky_app(runs)):
        await dead_row(producer, queue_name, job_id)
    assert runs == [1]


async def test_per_enqueue_timeout_overrides_the_task(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    runs: list[int] = []
    producer = Producer(client)
    job_id = (await producer.enqueue(queue_name, "flaky", {"nap_s": 30}, timeout_ms=50)).job_id
    async with running_worker(worker_settings(queue_name, redis_url), flaky_app(runs)):
        row = await dead_row(producer, queue_name, job_id)
    assert row["last_error"] == "timed out after 50 ms"


async def test_bad_options_in_a_payload_dead_letter_at_once_naming_the_value(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    runs: list[int] = []
    producer = Producer(client)
    payload = b'{"task":"flaky","kwargs":{},"options":{"max_attempts":0}}'
    job_id = (await producer.enqueue_raw(queue_name, payload)).job_id
    async with running_worker(worker_settings(queue_name, redis_url), flaky_app(runs)):
        row = await dead_row(producer, queue_name, job_id)
    assert runs == []
    assert "max_attempts must be >= 1; got 0" in row["last_error"]


async def test_a_misspelt_option_is_refused_by_name_before_anything_is_written(
    client: Redis, queue_name: str
) -> None:
    producer = Producer(client)
    misspelt: dict[str, Any] = {"delay_sm": 5}
    unknown = r"\(\) got an unexpected keyword argument 'delay_sm'"
    with pytest.raises(TypeError, match="enqueue" + unknown):
        await producer.enqueue(queue_name, "charge", {}, **misspelt)
    with pytest.raises(TypeError, match="enqueue_raw" + unknown):
        await producer.enqueue_raw(queue_name, b"raw", **misspelt)
    with pytest.raises(TypeError, match="JobSpec" + unknown):
        JobSpec("charge", **misspelt)
    assert await client.keys(f"emq:{{{queue_name}}}:*") == []


def test_a_spec_takes_the_policy_as_keywords_or_as_a_value_not_both() -> None:
    assert JobSpec("charge", max_attempts=2).options == JobPolicy(max_attempts=2)
    assert JobSpec("charge", options=JobPolicy(max_attempts=2)).options == JobPolicy(max_attempts=2)
    assert JobSpec("charge", job_id=None).options is None
    with pytest.raises(ConfigError, match="not both"):
        JobSpec("charge", options=JobPolicy(max_attempts=2), timeout_ms=5)
