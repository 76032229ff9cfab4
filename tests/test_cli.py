"""The command line: help tells the truth about the public flags; enqueue and a burst run work."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from emq_worker.cli.main import main
from emq_worker.protocol import ids

PUBLIC_RUN_FLAGS = [
    "--queue",
    "--app",
    "--redis-url",
    "--concurrency",
    "--lease-ms",
    "--beat-ms",
    "--renew-every-ms",
    "--grace-ms",
    "--max-attempts",
    "--backoff",
    "--job-timeout-ms",
    "--wire-version",
    "--log-format",
    "--burst",
]


def test_run_help_lists_the_public_flags_and_their_variables() -> None:
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0
    for flag in PUBLIC_RUN_FLAGS:
        assert flag in result.output
    for variable in ["EMQ_QUEUES", "EMQ_APP", "EMQ_REDIS_URL", "EMQ_LEASE_MS", "EMQ_BEAT_MS"]:
        assert variable in result.output


@pytest.mark.parametrize("command", [["--help"], ["enqueue", "--help"]])
def test_help_works(command: list[str]) -> None:
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_enqueue_prints_a_job_id_then_a_burst_run_completes_it(
    redis_url: str, queue_name: str
) -> None:
    runner = CliRunner()
    kwargs = json.dumps({"order_id": "A1", "amount": 1200})
    enqueued = runner.invoke(
        main, ["enqueue", "--redis-url", redis_url, "--queue", queue_name, "charge", kwargs]
    )
    assert enqueued.exit_code == 0, enqueued.output
    job_id = enqueued.output.strip()
    assert ids.job_id(job_id) == job_id

    ran = runner.invoke(
        main,
        [
            "run",
            "--redis-url",
            redis_url,
            "--queue",
            queue_name,
            "--app",
            "emq_worker.examples.orders:app",
            "--burst",
            "--beat-ms",
            "50",
            "--log-format",
            "json",
        ],
    )
    assert ran.exit_code == 0, ran.output
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.exists(f"emq:{{{queue_name}}}:job:{job_id}") == 0
        assert client.hget(f"emq:{{{queue_name}}}:metrics:completed", "count") == b"1"
    finally:
        client.close()


def test_enqueue_with_a_dedup_id_twice_names_the_first_job_and_carries_its_options(
    redis_url: str, queue_name: str
) -> None:
    def enqueue(*extra: str) -> str:
        args = ["enqueue", "--redis-url", redis_url, "--queue", queue_name, "charge", "{}"]
        result = CliRunner().invoke(main, [*args, *extra])
        assert result.exit_code == 0, result.output
        return result.output.strip()

    first = enqueue("--dedup-id", "order-A1", "--max-attempts", "7", "--result-ttl-ms", "60000")
    again = enqueue("--dedup-id", "order-A1")
    assert again == f"{first} (duplicate)"
    with redis.Redis.from_url(redis_url) as client:
        payload = client.hget(f"emq:{{{queue_name}}}:job:{first}", "payload")
    assert payload is not None
    assert json.loads(payload)["options"] == {"max_attempts": 7, "result_ttl_ms": 60000}


@pytest.mark.parametrize(
    ("flag", "value"), [("--max-attempts", "0"), ("--timeout-ms", "-5"), ("--dedup-ttl-ms", "0")]
)
def test_enqueue_refuses_an_out_of_range_option_by_name(
    redis_url: str, flag: str, value: str
) -> None:
    result = CliRunner().invoke(
        main, ["enqueue", "--redis-url", redis_url, "--queue", "q", "charge", flag, value]
    )
    assert result.exit_code == 2
    assert flag in result.output
    assert value in result.output


def test_enqueue_refuses_kwargs_that_are_not_a_json_object(redis_url: str) -> None:
    result = CliRunner().invoke(
        main, ["enqueue", "--redis-url", redis_url, "--queue", "q", "charge", "[1, 2]"]
    )
    assert result.exit_code == 2
    assert "must be a JSON object; got list" in result.output


def test_queues_come_from_the_environment_comma_or_space_separated() -> None:
    result = CliRunner().invoke(
        main, ["run", "--app", "nosuch.module:app"], env={"EMQ_QUEUES": "orders,mail bad!"}
    )
    assert result.exit_code == 2
    assert "'bad!'" in result.output
