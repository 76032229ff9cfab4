"""Start-up when the first connections are dropped: the worker retries them (capped, jittered
backoff) for `--connect-wait-ms`, then starts; when it finally gives up, its message names what
was seen (a connection dropped during the handshake), and says TLS only when the port proves it."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import NoReturn

import anyio
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from emq_worker.errors import ServerUnreachableError
from emq_worker.observe.log import get_logger
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.reach import port_mismatch, reach
from tests.chaos.proxy import Proxy
from tests.support.processes import EMQ_WORKER, REPO_ROOT, WorkerProcesses
from tests.support.server import RedisServer, free_port

pytestmark = pytest.mark.fault

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
        await reach(RedisAddress.parse(url), DEFAULT_WIRE_VERSION, get_logger(), wait_s=0.5)
    message = str(raised.value)
    assert f"nothing accepts connections at 127.0.0.1:{port}" in message
    assert "TLS" not in message
    assert "rediss" not in message
    attempts = int(message.rpartition("gave up after ")[2].split()[0])
    assert attempts >= 2, message


def _ssl_error(kind: type[ssl.SSLError], reason: str) -> ssl.SSLError:
    error = kind(1, f"[SSL: {reason}] during the handshake")
    error.reason = reason  # what OpenSSL names; the C module sets it on a real one
    return error


@pytest.mark.parametrize(
    ("error", "is_tls"),
    [
        # Closed or reset mid-handshake: no answer, whatever the Python and OpenSSL build.
        (ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed (EOF)"), False),
        (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), False),
        # A plaintext server's reply read as a TLS record.
        (_ssl_error(ssl.SSLError, "WRONG_VERSION_NUMBER"), False),
        # An alert only a TLS server sends.
        (_ssl_error(ssl.SSLError, "TLSV13_ALERT_CERTIFICATE_REQUIRED"), True),
    ],
)
async def test_only_a_tls_servers_answer_makes_the_probe_say_tls(
    error: ssl.SSLError, is_tls: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection dropped during the probe's handshake is not a TLS port: the worker must
    not tell the user to switch to rediss:// (Debian's Python 3.11 reports the drop as
    SSLZeroReturnError)."""

    async def handshake(*args: object, **kwargs: object) -> NoReturn:
        raise error

    monkeypatch.setattr(anyio, "connect_tcp", handshake)
    dropped = RedisConnectionError("Connection closed by server.")
    hint = await port_mismatch(RedisAddress.parse("redis://127.0.0.1:6390/0"), dropped)
    assert (hint is not None and "rediss://" in hint) is is_tls, hint
