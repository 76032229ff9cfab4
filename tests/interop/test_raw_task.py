"""Foreign payloads: an opaque EchoMQ payload on a task App is dead-lettered at once (a poisoned
job); `emq-worker run --raw-task QUEUE=module:function` binds QUEUE to a raw handler instead."""

from __future__ import annotations

import pytest
import redis
from click.testing import CliRunner

from emq_worker.cli.main import main
from emq_worker.errors import ConfigError
from emq_worker.jobs.tasks import App, with_raw_tasks
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.keys import QueueKeys
from tests.interop import raw_handlers
from tests.support.conformance import TEST_NODE_ID


def echomq_enqueue(redis_url: str, queue: str, payload: bytes) -> str:
    """EchoMQ's flat enqueue: the three-field row and `ZADD pending 0`, no wake."""
    keys, job_id = QueueKeys.of(queue), SnowflakeMinter(TEST_NODE_ID).job_id()
    client = redis.Redis.from_url(redis_url)
    try:
        client.hset(
            keys.job(job_id), mapping={"state": "pending", "attempts": "0", "payload": payload}
        )
        client.zadd(keys.pending, {job_id: 0})
    finally:
        client.close()
    return job_id


def burst(redis_url: str, queue: str, *extra: str) -> None:
    args = ["run", "--redis-url", redis_url, "--queue", queue, "--burst", "--beat-ms", "50"]
    args += ["--app", "tests.apps.ledger:app", "--log-format", "json", *extra]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output


def where(redis_url: str, queue: str, job_id: str) -> dict[bytes, bytes]:
    client = redis.Redis.from_url(redis_url)
    try:
        return client.hgetall(QueueKeys.of(queue).job(job_id))  # type: ignore[return-value]
    finally:
        client.close()


def test_an_opaque_payload_is_dead_without_the_flag_and_runs_with_it(
    redis_url: str, queue_name: str
) -> None:
    poisoned = echomq_enqueue(redis_url, queue_name, b"\x83h\x02d\x00\x02ok")  # Erlang terms
    burst(redis_url, queue_name)
    assert where(redis_url, queue_name, poisoned)[b"state"] == b"dead"

    raw_handlers.seen.clear()
    job_id = echomq_enqueue(redis_url, queue_name, b"\x83h\x02d\x00\x02ok")
    burst(redis_url, queue_name, "--raw-task", f"{queue_name}=tests.interop.raw_handlers:record")
    assert raw_handlers.seen == [b"\x83h\x02d\x00\x02ok"]
    assert where(redis_url, queue_name, job_id) == {}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("orders", "must look like QUEUE=module.path:function"),
        ("other=tests.interop.raw_handlers:record", "'other' is not served"),
        ("orders=tests.interop.raw_handlers:NOT_A_FUNCTION", "must name a function"),
        ("orders=tests.interop.no_such_module:record", "cannot import module"),
    ],
)
def test_a_bad_raw_task_is_refused_naming_it(spec: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        with_raw_tasks(App(), [spec], ["orders"])


def test_the_apps_own_binding_is_not_replaced() -> None:
    app = App()
    app.raw_handler("orders")(raw_handlers.record)
    with pytest.raises(ConfigError, match="already has a raw handler"):
        with_raw_tasks(app, ["orders=tests.interop.raw_handlers:record"], ["orders"])
    assert with_raw_tasks(app, [], ["orders"]).raw == app.raw


def test_the_loaded_app_is_left_as_it_was() -> None:
    app = App()
    bound = with_raw_tasks(app, ["orders=tests.interop.raw_handlers:record"], ["orders"])
    assert set(bound.raw) == {"orders"}
    assert app.raw == {}
