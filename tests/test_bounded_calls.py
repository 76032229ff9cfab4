"""Every call to the server has a bounded time: against a port that accepts connections and never
answers (a frozen server, another service waiting for its own protocol), or answers HTTP, the
operator's commands, `run --check` and both producers end within 10 s (the default 5 s socket
timeout and a margin; a shorter --socket-timeout-ms, that and the same margin) with one line naming
the server and what it did, never hang."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator

import anyio
import pytest
from click.testing import CliRunner, Result
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.cli.main import main
from emq_worker.errors import ConfigError
from emq_worker.jobs.producer import Enqueued, JobSpec, Producer
from emq_worker.jobs.sync_producer import sync_producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.connection import connect, socket_timeout_of
from tests.support.conformance import Harness
from tests.support.mute import NotRedis
from tests.support.processes import EMQ_WORKER, REPO_ROOT
from tests.test_enqueue_resend import DroppedFirstReply

BOUND_S = 10.0
"""The promise: a clear error within 10 s with the default socket timeout (5 s)."""
APP = "tests.apps.ledger:app"
SAID = {
    "silent": "accepted the connection but did not answer in time",
    "http": 'does not speak the Redis protocol (it answered "H"',
}
COMMANDS = {
    "stats": ["stats"],
    "enqueue": ["enqueue", "-q", "orders", "charge", "{}"],
    "run-check": ["run", "--check", "-q", "orders", "--app", APP],
    "dead-list": ["dead", "list", "-q", "orders"],
    "events": ["events", "-q", "orders"],
}


@pytest.fixture(params=["silent", "http"])
def not_redis(request: pytest.FixtureRequest) -> Iterator[NotRedis]:
    with NotRedis(request.param) as server:
        yield server


SHORT_TIMEOUT_MS = 500
"""Every command but `stats` meets a silent server with this --socket-timeout-ms: they share the
one connection path whose default (5 s) `stats` checks, and waiting it out five times over added
20 s to the fault tier for no more evidence."""


def timed(args: list[str], socket_timeout_ms: int | None = None) -> tuple[Result, float]:
    """Run the command, timed; with the default socket timeout unless one is given."""
    timeout = None if socket_timeout_ms is None else str(socket_timeout_ms)
    began = time.monotonic()
    result = CliRunner().invoke(main, args, env={"EMQ_SOCKET_TIMEOUT_MS": timeout})
    return result, time.monotonic() - began


def error_line(result: Result) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.fault
@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_command_against_a_port_that_is_not_redis_ends_in_one_line_naming_it(
    not_redis: NotRedis, command: list[str]
) -> None:
    shorter = not_redis.mode == "silent" and command != COMMANDS["stats"]
    timeout_ms = SHORT_TIMEOUT_MS if shorter else None
    result, took = timed([*command, "--redis-url", not_redis.url], timeout_ms)
    line = error_line(result)
    assert result.exit_code == 1, result.output
    # The promise's margin over the timeout (5 s over the default 5 s) holds for the shorter one.
    bound_s = BOUND_S if timeout_ms is None else BOUND_S / 2 + timeout_ms / 1000
    assert took < bound_s, f"{took:.1f} s: {line}"
    assert f"Redis at {not_redis.url}" in line
    assert SAID[not_redis.mode] in line
    assert "Traceback" not in result.output


@pytest.mark.fault
def test_the_socket_timeout_is_a_flag_and_a_variable() -> None:
    """A shorter --socket-timeout-ms (or EMQ_SOCKET_TIMEOUT_MS) ends the wait sooner."""
    with NotRedis("silent") as silent:
        began = time.monotonic()
        result = CliRunner().invoke(
            main, ["stats", "--redis-url", silent.url], env={"EMQ_SOCKET_TIMEOUT_MS": "300"}
        )
        took = time.monotonic() - began
    assert SAID["silent"] in error_line(result)
    assert took < 5.0, f"{took:.1f} s: not sooner than the default timeout"
    bad = CliRunner().invoke(main, ["stats", "--socket-timeout-ms", "0"])
    assert bad.exit_code == 2
    assert "--socket-timeout-ms" in bad.output


@pytest.mark.fault
def test_the_worker_start_up_against_a_silent_server_gives_up_naming_it() -> None:
    """Each start-up attempt ends within --socket-timeout-ms; --connect-wait-ms bounds them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env |= {"EMQ_CONNECT_WAIT_MS": "0", "EMQ_SOCKET_TIMEOUT_MS": "1000"}
    with NotRedis("silent") as silent:
        args = [str(EMQ_WORKER), "run", "-q", "orders", "--app", APP, "--redis-url", silent.url]
        try:
            done = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError("the worker still starting after 60 s") from exc
    output = (done.stdout + done.stderr).decode()
    [line] = [line for line in output.splitlines() if line.startswith("Error:")]
    assert done.returncode == 1, output
    assert f"Redis at {silent.url}" in line
    assert SAID["silent"] in line


@pytest.mark.fault
async def test_the_producer_ends_with_an_error_naming_the_server(not_redis: NotRedis) -> None:
    began = time.monotonic()
    with anyio.fail_after(3 * BOUND_S):  # on a hang: fail, never wait for ever
        async with Producer.from_url(not_redis.url) as producer:
            with pytest.raises(RedisConnectionError) as raised:
                await producer.enqueue("orders", "charge", {"id": 1})
    took = time.monotonic() - began
    assert took < BOUND_S, f"{took:.1f} s"
    assert f"Redis at {not_redis.url}" in str(raised.value)
    assert SAID[not_redis.mode] in str(raised.value)
    if not_redis.mode == "silent":  # still what a redis-py caller catches for a timeout
        assert isinstance(raised.value, RedisTimeoutError)


@pytest.mark.fault
def test_the_sync_producer_ends_with_an_error_naming_the_server(not_redis: NotRedis) -> None:
    outcome: list[BaseException | Enqueued] = []

    # Its default socket timeout is the async producer's (5 s, checked above and in
    # test_the_producers_socket_timeout_is_a_keyword): a shorter one, the same margin.
    timeout_s = SHORT_TIMEOUT_MS / 1000

    def enqueue() -> None:
        try:
            with sync_producer(not_redis.url, socket_timeout_s=timeout_s) as producer:
                outcome.append(producer.enqueue("orders", "charge", {"id": 1}))
        except Exception as exc:
            outcome.append(exc)

    began = time.monotonic()
    caller = threading.Thread(target=enqueue, daemon=True)  # a hang must not hang the test
    caller.start()
    caller.join(timeout=3 * BOUND_S)
    took = time.monotonic() - began
    assert outcome, f"sync_producer(...).enqueue still waiting after {took:.0f} s"
    [error] = outcome
    assert took < BOUND_S / 2 + timeout_s, f"{took:.1f} s"
    assert isinstance(error, RedisConnectionError), error
    assert f"Redis at {not_redis.url}" in str(error)


async def test_the_producers_socket_timeout_is_a_keyword() -> None:
    url = "redis://127.0.0.1:1/0"  # nothing connects: only the clients' settings are read
    async with Producer.from_url(url) as default, Producer.from_url(url, socket_timeout_s=1.5) as p:
        assert socket_timeout_of(default.client) == 5.0
        assert socket_timeout_of(p.client) == 1.5
    async with Producer.from_url(url, socket_timeout_s=None) as unbounded:
        assert socket_timeout_of(unbounded.client) is None
    with pytest.raises(ConfigError, match="socket_timeout_s must be a number of seconds > 0"):
        Producer.from_url(url, socket_timeout_s=0)
    with sync_producer(url, socket_timeout_s=2.0) as producer:
        assert socket_timeout_of(producer._producer.client) == 2.0
    with sync_producer(url) as producer:
        assert socket_timeout_of(producer._producer.client) == 5.0


class TimedOutFirstReply(DroppedFirstReply):
    """The first enqueue runs, and its caller meets a socket timeout instead of the reply,
    `after_s` seconds later."""

    def __init__(self, after_s: float) -> None:
        super().__init__()
        self.after_s = after_s

    async def call(self, client: Redis, name: str, keys: object, args: object) -> object:
        try:
            return await super().call(client, name, keys, args)  # type: ignore[arg-type]
        except RedisConnectionError as exc:
            await anyio.sleep(self.after_s)
            raise RedisTimeoutError("Timeout reading from the server") from exc


async def test_an_enqueue_whose_reply_timed_out_is_re_sent_once_and_writes_one_job(
    client: Redis, queue_name: str
) -> None:
    """Inside the socket timeout the re-send goes out with the same nonce: one job, no error."""
    conf = Harness.of(client, queue_name)
    producer = Producer(conf.client)
    producer.scripts = scripts = TimedOutFirstReply(after_s=0)
    results = await producer.enqueue_many(queue_name, [JobSpec("work") for _ in range(3)])
    assert scripts.resends == 0
    assert [r.duplicate for r in results] == [False] * 3
    assert (await conf.queue.counts()).pending == 3


async def test_an_enqueue_that_waited_a_whole_socket_timeout_is_not_re_sent(
    redis_url: str, queue_name: str
) -> None:
    """The caller has its error after one timeout; sending its id again is a duplicate."""
    async with connect(redis_url, DEFAULT_WIRE_VERSION, socket_timeout_s=0.5) as client:
        conf = Harness.of(client, queue_name)
        producer = Producer(client)
        producer.scripts = TimedOutFirstReply(after_s=0.5)
        chosen = conf.mint()
        with pytest.raises(RedisTimeoutError):
            await producer.enqueue(queue_name, "work", job_id=chosen)
        again = await Producer(client).enqueue(queue_name, "work", job_id=chosen)
        assert again == Enqueued(chosen, True)
        assert (await conf.queue.counts()).pending == 1
