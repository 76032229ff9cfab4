"""Least privilege: the ACL user of docs/how-to/secure.md runs a real worker and producer (every
job completes) and can do nothing else; a wrong password or a missing permission stops the worker
at start with its own exit code and a clear message, never a retry storm. The password comes from
a file."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import redis
from redis.exceptions import NoPermissionError

from emq_worker import JobSpec, Producer
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.runtime.daemon import EXIT_AUTH, EXIT_NOPERM
from emq_worker.valkey.connection import connect
from tests.chaos.ledger import LEDGER_ENV
from tests.support.processes import EMQ_WORKER, REPO_ROOT
from tests.support.server import RedisServer
from tests.support.serverfaults import admin_command, command

QUEUE = "orders"
USER = "emq-worker"
PASSWORD = "Pa55-acl-s3cret"
JOBS = 200
WIRE = DEFAULT_WIRE_VERSION
SECURE_PAGE = REPO_ROOT / "docs" / "how-to" / "secure.md"
RULES_IN_DOCS = re.compile(r"ACL SETUSER emq-worker on >PASSWORD (.+)$", re.MULTILINE)


def readme_rules() -> list[str]:
    """The ACL rules the docs' security page tells operators to use, for queue `orders`."""
    found = RULES_IN_DOCS.search(SECURE_PAGE.read_text(encoding="utf-8"))
    assert found, f"{SECURE_PAGE} shows no `ACL SETUSER emq-worker on >PASSWORD ...` line"
    return found.group(1).strip().strip("`").split()


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[RedisServer]:
    # DEBUG enabled, so that refusing it is the ACL's doing.
    with RedisServer(tmp_path / "redis", extra=("--enable-debug-command", "local")) as server:
        admin = server.client()
        admin_command(admin, "ACL", "SETUSER", USER, "on", f">{PASSWORD}", *readme_rules())
        admin.close()
        yield server


def _worker(url: str, tmp_path: Path, *extra: str) -> list[str]:
    args = [str(EMQ_WORKER), "run", "--queue", QUEUE, "--app", "tests.chaos.app:app"]
    return [*args, "--redis-url", url, "--log-format", "json", "--beat-ms", "100", *extra]


def _env(tmp_path: Path, password_file: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env[LEDGER_ENV] = str(tmp_path / "ledger" / "ledger.txt")
    if password_file is not None:
        env["EMQ_REDIS_PASSWORD_FILE"] = str(password_file)
    return env


async def test_the_readme_acl_user_runs_a_worker_to_completion_and_nothing_else(
    acl_server: RedisServer, tmp_path: Path
) -> None:
    secret = tmp_path / "redis-password"
    secret.write_text(PASSWORD + "\n")
    url = f"redis://{USER}@127.0.0.1:{acl_server.port}/0"  # no password in argv
    as_user = connect(f"redis://{USER}:{PASSWORD}@127.0.0.1:{acl_server.port}/0", WIRE)
    try:
        ids = await Producer(as_user).enqueue_many(QUEUE, [JobSpec("work", {})] * JOBS)
        assert len(ids) == JOBS
        done = await run_cli(
            [*_worker(url, tmp_path), "--burst", "--concurrency", "20"], _env(tmp_path, secret)
        )
        output = done.stderr.decode()
        assert done.returncode == 0, output[-3000:]
        assert PASSWORD not in output
        assert '"server_check_skipped"' in output  # no CONFIG: said it could not check
        keys = QueueKeys.of(QUEUE)
        assert int(await as_user.hget(keys.completed, "count") or 0) == JOBS
        assert await as_user.zcard(keys.pending) == 0
        assert await as_user.zcard(keys.active) == 0

        for statement in (
            ("FLUSHALL",),
            ("KEYS", "*"),
            ("CONFIG", "GET", "maxmemory"),
            ("DEBUG", "SLEEP", "0"),
            ("GET", "emq:{payments}:meta"),  # another queue's keys
            ("SET", "unrelated", "1"),
        ):
            with pytest.raises(NoPermissionError):
                await command(as_user, *statement)
    finally:
        await as_user.aclose()


async def test_a_wrong_password_stops_the_worker_at_start_with_exit_3(
    acl_server: RedisServer, tmp_path: Path
) -> None:
    secret = tmp_path / "redis-password"
    secret.write_text("not-the-password\n")
    url = f"redis://{USER}@127.0.0.1:{acl_server.port}/0"
    before = _auth_failures(acl_server)
    done = await run_cli(_worker(url, tmp_path), _env(tmp_path, secret))
    said = done.stderr.decode()
    assert done.returncode == EXIT_AUTH == 3, said
    [error] = [line for line in said.splitlines() if line.startswith("Error:")]
    assert "WRONGPASS" in error
    assert f"redis://{USER}:***@127.0.0.1" in error
    assert "not-the-password" not in said
    assert "Traceback" not in said
    # Fatal at once: a handful of AUTH attempts (redis-py's own connect retries), not a storm.
    assert _auth_failures(acl_server) - before <= 5


@pytest.mark.parametrize(
    "rules",
    [
        ("resetkeys", "~emq:{payments}:*", "~{emq}:version"),  # not this queue's keys
        ("-@scripting",),  # cannot load the scripts
    ],
    ids=["key-pattern", "scripting"],
)
async def test_a_missing_permission_stops_the_worker_at_start_with_exit_4(
    acl_server: RedisServer, tmp_path: Path, rules: tuple[str, ...]
) -> None:
    admin = acl_server.client()
    admin_command(admin, "ACL", "SETUSER", USER, *rules)
    admin.close()
    url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{acl_server.port}/0"
    done = await run_cli(_worker(url, tmp_path), _env(tmp_path, None))
    said = done.stderr.decode()
    assert done.returncode == EXIT_NOPERM == 4, said
    [error] = [line for line in said.splitlines() if line.startswith("Error:")]
    assert "NOPERM" in error
    assert "docs/how-to/secure.md" in error  # the hint points at the security page
    assert PASSWORD not in said


async def test_an_acl_without_the_queue_registry_still_runs_the_worker(
    acl_server: RedisServer, tmp_path: Path
) -> None:
    """The ACL line of an earlier release (no `~{emq}:queues`): the worker cannot name its queue
    for the dashboard, says so, and runs every job anyway."""
    admin = acl_server.client()
    admin_command(admin, "ACL", "SETUSER", USER, "resetkeys", "~emq:{orders}:*", "~{emq}:version")
    admin.close()
    url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{acl_server.port}/0"
    as_user = connect(url, WIRE)
    try:
        await Producer(as_user).enqueue_many(QUEUE, [JobSpec("work", {})] * 20)
        done = await run_cli([*_worker(url, tmp_path), "--burst"], _env(tmp_path, None))
        said = done.stderr.decode()
        assert done.returncode == 0, said[-3000:]
        assert '"queues_not_named"' in said
        assert int(await as_user.hget(QueueKeys.of(QUEUE).completed, "count") or 0) == 20
    finally:
        await as_user.aclose()


def _auth_failures(server: RedisServer) -> int:
    client = redis.Redis(port=server.port)
    try:
        stats = client.info("errorstats")
    finally:
        client.close()
    return int(stats.get("errorstat_WRONGPASS", {}).get("count", 0))


async def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """The CLI as a real process (its own event loop), bounded in time."""
    with anyio.fail_after(60):
        return await anyio.run_process(args, env=env, cwd=REPO_ROOT, check=False)


def test_the_worker_only_needs_what_the_readme_grants() -> None:
    rules = readme_rules()
    assert "-@all" in rules
    assert "-@dangerous" in rules
    assert any(rule.startswith("~emq:{orders}:") for rule in rules)
    assert "~{emq}:version" in rules
    assert not any(rule in ("~*", "allkeys", "+@all", "allcommands") for rule in rules)
