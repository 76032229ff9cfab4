"""Secrets: a Redis URL read from a file, ACL users with passwords, and no password in messages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq_worker import ids
from emq_worker.cli import main
from emq_worker.config import WorkerSettings
from emq_worker.connection import redacted
from emq_worker.errors import ConfigError
from tests.support.server import REDIS_SERVER, RedisServer, free_port
from tests.support.wait import eventually_sync

PASSWORD = "s3cret-Pa55"


def test_the_url_can_come_from_a_file(tmp_path: Path, redis_url: str, queue_name: str) -> None:
    secret = tmp_path / "redis-url"
    secret.write_text(redis_url + "\n")
    result = CliRunner().invoke(
        main,
        ["enqueue", "--queue", queue_name, "charge", "{}"],
        env={"EMQ_REDIS_URL": f"@{secret}"},
    )
    assert result.exit_code == 0, result.output
    assert ids.is_valid(result.output.strip())


@pytest.mark.parametrize("content", [None, ""])
def test_an_unreadable_or_empty_url_file_is_named(tmp_path: Path, content: str | None) -> None:
    secret = tmp_path / "missing"
    if content is not None:
        secret.write_text(content)
    result = CliRunner().invoke(
        main, ["enqueue", "--redis-url", f"@{secret}", "--queue", "q", "charge", "{}"]
    )
    assert result.exit_code == 2
    assert str(secret) in result.output


def test_messages_never_show_the_password() -> None:
    url = f"http://emq:{PASSWORD}@localhost:6379/0"
    assert redacted(url) == "http://emq:***@localhost:6379/0"
    assert redacted("redis://localhost:6379/0") == "redis://localhost:6379/0"
    with pytest.raises(ConfigError) as refused:
        WorkerSettings(queues=("q",), redis_url=url)
    assert PASSWORD not in str(refused.value)
    assert "emq:***@localhost" in str(refused.value)


def test_an_acl_user_with_a_password_works_and_a_wrong_one_is_refused(
    tmp_path: Path, queue_name: str
) -> None:
    with RedisServer(tmp_path / "acl") as server:
        admin = server.client()
        admin.acl_setuser(
            "emq",
            enabled=True,
            passwords=[f"+{PASSWORD}"],
            keys=["*"],
            channels=["*"],
            commands=["+@all"],
        )
        admin.acl_setuser("default", enabled=False)
        admin.close()
        good = f"redis://emq:{PASSWORD}@127.0.0.1:{server.port}/0"
        check = redis.Redis(port=server.port, username="emq", password=PASSWORD)
        _enqueue_and_run_one(good, queue_name, check)
        runner = CliRunner()
        bad = runner.invoke(
            main,
            ["enqueue", "--queue", queue_name, "charge", "{}"],
            env={"EMQ_REDIS_URL": f"redis://emq:wrong@127.0.0.1:{server.port}/0"},
        )
        assert bad.exit_code == 1
        assert "emq:***@127.0.0.1" in bad.output
        assert ":wrong@" not in bad.output
        assert "invalid username-password pair" in bad.output


def test_a_worker_that_cannot_reach_redis_at_start_says_so_and_exits_1() -> None:
    url = f"redis://emq:{PASSWORD}@127.0.0.1:{free_port()}/0"
    result = CliRunner().invoke(
        main,
        ["run", "--queue", "q", "--app", "emq_worker.examples.orders:app", "--log-format", "json"],
        env={"EMQ_REDIS_URL": url},
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "Redis at redis://emq:***@127.0.0.1" in result.output
    assert PASSWORD not in result.output


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1, made with the openssl CLI."""
    ca_key, ca, key, csr, cert = (
        directory / n for n in ("ca.key", "ca.pem", "s.key", "s.csr", "s.pem")
    )
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    steps = [
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=emq-test-ca",
            "-keyout",
            ca_key,
            "-out",
            ca,
        ],
        [
            "openssl",
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            key,
            "-out",
            csr,
        ],
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            ext,
            "-out",
            cert,
        ],
    ]
    for step in steps:
        subprocess.run([str(arg) for arg in step], check=True, capture_output=True)
    return ca, cert, key


def test_a_worker_speaks_tls_with_rediss(tmp_path: Path, queue_name: str) -> None:
    ca, cert, key = _certificates(tmp_path)
    port = free_port()
    server = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(ca),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        probe = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(ca))
        eventually_sync(lambda: _answers(probe), what="the TLS server answering")
        probe.close()
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
        check = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(ca))
        _enqueue_and_run_one(url, queue_name, check)
    finally:
        server.kill()
        server.wait(timeout=10)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.RedisError:
        return False


def _enqueue_and_run_one(url: str, queue_name: str, check: redis.Redis) -> None:
    """Through the CLI at `url`: enqueue one order, run a burst worker, see it completed."""
    runner = CliRunner()
    order = '{"order_id": "A1", "amount": 5}'
    enqueued = runner.invoke(
        main, ["enqueue", "--queue", queue_name, "charge", order], env={"EMQ_REDIS_URL": url}
    )
    assert enqueued.exit_code == 0, enqueued.output
    run = ["run", "--queue", queue_name, "--app", "emq_worker.examples.orders:app", "--burst"]
    ran = runner.invoke(main, [*run, "--beat-ms", "50"], env={"EMQ_REDIS_URL": url})
    assert ran.exit_code == 0, ran.output
    try:
        assert check.hget(f"emq:{{{queue_name}}}:metrics:completed", "count") == b"1"
    finally:
        check.close()
