"""What a new user trips on ends in one line and the documented exit code, never a traceback: a
`redis+cluster://` URL that names no cluster (or no seed that answers), the dashboard without a
server, `run --http` on a taken port, `dev --persist` where no directory can be made, `events`
on a queue that does not exist; and `run --check` names the server it reached as that server
names itself (Valkey is not `redis_version 7.2.4`)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from click.testing import CliRunner

from emq_worker.cli.main import main
from tests.support.processes import EMQ_WORKER, REPO_ROOT
from tests.support.server import RedisServer, free_port

APP = "tests.apps.ledger:app"
CLUSTER_COMMANDS = {
    "stats": ["stats"],
    "enqueue": ["enqueue", "-q", "orders", "charge", "{}"],
    "dead-list": ["dead", "list", "-q", "orders"],
    "workers": ["workers"],
    "run-check": ["run", "--check", "-q", "orders", "--app", APP],
    "run": ["run", "-q", "orders", "--app", APP, "--connect-wait-ms", "300"],
    "dashboard": ["dashboard", "--bind", "127.0.0.1:0"],
}
CLUSTER_CASES = [
    pytest.param(args, id=name, marks=[pytest.mark.fault] if name == "run" else [])  # a process
    for name, args in CLUSTER_COMMANDS.items()
]


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    output: str
    crash: BaseException | None = None
    """An exception the command did not turn into an exit (CliRunner keeps it)."""


def invoke(args: list[str]) -> Outcome:
    """In-process by CliRunner; `run` itself (it tunes the process's garbage collector, which
    upsets pytest's own exit) in a subprocess."""
    if args[0] != "run" or "--check" in args:
        result = CliRunner().invoke(main, args)
        crash = None if isinstance(result.exception, SystemExit) else result.exception
        return Outcome(result.exit_code, result.output, crash)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    command = [str(EMQ_WORKER), *args, "--log-format", "json"]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, timeout=120)
    return Outcome(done.returncode, (done.stdout + done.stderr).decode())


def error_line(outcome: Outcome) -> str:
    """The one `Error:` line of a command that ended by itself, not by a crash."""
    assert outcome.crash is None, repr(outcome.crash)
    assert "Traceback" not in outcome.output
    errors = [line for line in outcome.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, outcome.output
    return errors[0]


@pytest.mark.parametrize("command", CLUSTER_CASES)
def test_a_cluster_url_to_a_server_that_is_no_cluster_is_one_line(
    redis_server: RedisServer, command: list[str]
) -> None:
    url = f"redis+cluster://127.0.0.1:{redis_server.port}"
    result = invoke([*command, "--redis-url", url])
    line = error_line(result)
    assert result.exit_code == 1, result.output
    assert f"seed node 127.0.0.1:{redis_server.port} answered" in line
    assert "Cluster mode is not enabled" in line
    assert "redis://HOST:PORT/DB" in line


@pytest.mark.parametrize("command", CLUSTER_CASES)
def test_a_cluster_url_whose_seed_does_not_answer_is_one_line(command: list[str]) -> None:
    port = free_port()  # nothing listens there
    url = f"redis+cluster://127.0.0.1:{port}"
    result = invoke([*command, "--redis-url", url])
    line = error_line(result)
    assert result.exit_code == 1, result.output
    assert f"Redis at {url}" in line
    assert f"nothing accepts connections at the cluster's seed node(s) 127.0.0.1:{port}" in line


def test_the_dashboard_without_a_server_is_one_line_and_exit_1() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = invoke(["dashboard", "--bind", "127.0.0.1:0", "--redis-url", url])
    line = error_line(result)
    assert result.exit_code == 1, result.output
    assert f"Redis at {url}" in line
    assert "nothing accepts connections" in line


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


@pytest.mark.fault
def test_run_with_its_http_port_taken_is_one_line_and_exit_1(
    redis_url: str, queue_name: str, taken_port: int
) -> None:
    address = f"127.0.0.1:{taken_port}"
    result = invoke(
        ["run", "-q", queue_name, "--app", APP, "--redis-url", redis_url, "--http", address]
    )
    line = error_line(result)
    assert result.exit_code == 1, result.output
    assert f"cannot serve --http on {address}" in line
    assert "in use" in line


def test_dev_with_a_data_directory_that_cannot_be_made_is_a_usage_error() -> None:
    result = invoke(["dev", "--app", APP, "-q", "orders", "--persist", "/proc/nope"])
    line = error_line(result)
    assert result.exit_code == 2, result.output
    assert "'--persist'" in line
    assert "'/proc/nope'" in line


@pytest.mark.fault
def test_events_on_a_queue_that_does_not_exist_says_so(redis_url: str, queue_name: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    args = [str(EMQ_WORKER), "events", "-q", queue_name, "--redis-url", redis_url]
    try:
        done = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("events -q <no such queue> still waiting after 60 s") from exc
    assert done.returncode == 1, done.stderr
    assert f"no such queue {queue_name!r}" in done.stderr.decode()


def test_run_check_names_the_server_as_it_names_itself(
    redis_server: RedisServer, queue_name: str
) -> None:
    with redis.Redis(port=redis_server.port) as client:
        info = client.info("server")
    name = info.get("server_name") or "redis"
    expected = f"answers ({name} {info.get(f'{name}_version', info['redis_version'])})"
    args = ["run", "--check", "-q", queue_name, "--app", APP, "--redis-url", redis_server.url]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert expected in result.output
    assert "redis_version" not in result.output
