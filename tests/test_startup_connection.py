"""Start-up when the first connections are dropped: the worker retries them (capped, jittered
backoff) for `--connect-wait-ms`, then starts; when it finally gives up, its message names what
was seen (a connection dropped during the handshake), and says TLS only when the port proves it."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from emq_worker.observe.log import get_logger
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.server.reach import ServerUnreachableError, reach
from tests.chaos.proxy import Proxy
from tests.support.processes import EMQ_WORKER, REPO_ROOT, WorkerProcesses
from tests.support.server import RedisServer, free_port

pytestmark = pytest.mark.slow

DROPPED = "dropped the connection during the handshake"


async def test_a_worker_whose_first_connections_are_reset_retries_and_starts(
    redis_server: RedisServer, queue_name: str, tmp_path: Path
) -> None:
    async with Proxy(redis_server.port) as proxy:
        proxy.reset_first(3)
        with WorkerProcesses(tmp_path) as processes:
            worker = processes.start(
                "w", queue=queue_name, redis_url=proxy.url, lease_ms=3_000, beat_ms=100
            )
            await worker.wait_event("worker_started", within_s=30)
            retried = worker.find("redis_unreachable")
    assert proxy.resets == 3  # the worker's attempts, and its one probe for a TLS port
    assert retried, "no redis_unreachable warning: nothing was retried"
    assert all(DROPPED in event["cause"] for event in retried), retried


async def test_a_worker_that_never_gets_through_gives_up_naming_the_real_cause(
    redis_server: RedisServer, queue_name: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    async with Proxy(redis_server.port) as proxy:
        proxy.reset_first(1_000)
        env |= {"EMQ_REDIS_URL": proxy.url, "EMQ_CONNECT_WAIT_MS": "1000"}
        with anyio.fail_after(60):
            result = await anyio.run_process(
                [str(EMQ_WORKER), "run", "--queue", queue_name, "--app", "tests.apps.ledger:app"],
                cwd=REPO_ROOT,
                env=env,
                check=False,
            )
    output = (result.stdout + result.stderr).decode()
    [error] = [line for line in output.splitlines() if line.startswith("Error:")]
    assert result.returncode == 1, output
    assert "rediss" not in error
    assert "TLS" not in error
    assert DROPPED in error
    assert f"Redis at {proxy.url}" in error
    assert proxy.resets >= 2, error  # it retried before giving up


async def test_a_refused_connection_is_retried_then_named_refused() -> None:
    port = free_port()  # nothing listens there
    url = f"redis://127.0.0.1:{port}/0"
    with pytest.raises(ServerUnreachableError) as raised:
        await reach(url, DEFAULT_WIRE_VERSION, get_logger(), wait_s=0.5)
    message = str(raised.value)
    assert f"nothing accepts connections at 127.0.0.1:{port}" in message
    assert "TLS" not in message
    assert "rediss" not in message
    attempts = int(message.rpartition("gave up after ")[2].split()[0])
    assert attempts >= 2, message
