"""Secrets: a Redis URL read from a file, ACL users with passwords, and no password in messages."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from emq_worker.cli.main import main
from emq_worker.errors import ConfigError
from emq_worker.protocol import ids
from emq_worker.runtime.config import WorkerSettings
from emq_worker.valkey.connection import redacted
from emq_worker.valkey.credentials import with_password
from tests.support.server import REDIS_SERVER, RedisServer, free_port, tls_refusal
from tests.support.wait import eventually_sync

PASSWORD = "s3cret-Pa55"
NO_TLS = tls_refusal()
needs_tls = pytest.mark.skipif(NO_TLS is not None, reason=f"TLS tests skipped: {NO_TLS}")


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
        # Nothing listens there: a short start-up wait (the default is 30 s) reaches the verdict.
        env={"EMQ_REDIS_URL": url, "EMQ_CONNECT_WAIT_MS": "300"},
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


@needs_tls
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


# --- TLS failures: each fails at start with a message naming the TLS problem ----------------


def _client_certificate(directory: Path) -> tuple[Path, Path]:
    """A client certificate signed by the CA `_certificates` made in `directory`."""
    key, csr, cert = (directory / n for n in ("c.key", "c.csr", "c.pem"))
    request = ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=emq-worker"]
    sign = ["openssl", "x509", "-req", "-in", csr, "-CA", directory / "ca.pem"]
    steps = [
        [*request, "-keyout", key, "-out", csr],
        [*sign, "-CAkey", directory / "ca.key", "-CAcreateserial", "-days", "1", "-out", cert],
    ]
    for step in steps:
        subprocess.run([str(arg) for arg in step], check=True, capture_output=True)
    return cert, key


@contextmanager
def _tls_server(directory: Path, *, auth_clients: bool = False) -> Iterator[tuple[int, Path]]:
    """A TLS-only redis-server for 127.0.0.1 (port, CA file)."""
    ca, cert, key = _certificates(directory)
    port = free_port()
    args = [REDIS_SERVER, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
    args += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    args += ["--tls-ca-cert-file", str(ca), "--tls-auth-clients", "yes" if auth_clients else "no"]
    args += ["--save", "", "--appendonly", "no", "--dir", str(directory)]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client_cert, client_key = _client_certificate(directory) if auth_clients else (None, None)
        probe = redis.Redis(
            host="127.0.0.1",
            port=port,
            ssl=True,
            ssl_ca_certs=str(ca),
            ssl_certfile=None if client_cert is None else str(client_cert),
            ssl_keyfile=None if client_key is None else str(client_key),
        )
        eventually_sync(lambda: _answers(probe), what="the TLS server answering")
        probe.close()
        yield port, ca
    finally:
        server.kill()
        server.wait(timeout=10)


def _run_burst(url: str, queue_name: str) -> tuple[int, str]:
    args = ["run", "--queue", queue_name, "--app", "emq_worker.examples.orders:app", "--burst"]
    result = CliRunner().invoke(main, [*args, "--log-format", "json"], env={"EMQ_REDIS_URL": url})
    return result.exit_code, result.output


@needs_tls
def test_tls_with_a_client_certificate_works_and_without_one_is_refused(
    tmp_path: Path, queue_name: str
) -> None:
    with _tls_server(tmp_path, auth_clients=True) as (port, ca):
        cert, key = tmp_path / "c.pem", tmp_path / "c.key"
        base = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
        code, output = _run_burst(f"{base}&ssl_certfile={cert}&ssl_keyfile={key}", queue_name)
        assert code == 0, output
        code, output = _run_burst(base, queue_name)
        assert code == 1, output
        assert "Traceback" not in output
        assert f"Redis at rediss://127.0.0.1:{port}/0" in output


@needs_tls
@pytest.mark.parametrize("failure", ["wrong-ca", "host-name", "plaintext-port", "plain-to-tls"])
def test_a_tls_mismatch_fails_at_start_with_a_clear_message(
    tmp_path: Path, redis_server: RedisServer, queue_name: str, failure: str
) -> None:
    with _tls_server(_made(tmp_path / "server")) as (port, ca):
        other_ca, _, _ = _certificates(_made(tmp_path / "other"))
        url, expected = {
            "wrong-ca": (
                f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={other_ca}",
                "certificate verify failed",
            ),
            "host-name": (
                f"rediss://localhost:{port}/0?ssl_ca_certs={ca}",
                "certificate verify failed",  # Hostname mismatch, certificate is not valid
            ),
            "plaintext-port": (
                f"rediss://127.0.0.1:{redis_server.port}/0?ssl_ca_certs={ca}",
                "is this port plaintext?",  # a plaintext server never answers the handshake
            ),
            "plain-to-tls": (f"redis://127.0.0.1:{port}/0", "use rediss://"),
        }[failure]
        code, output = _run_burst(url, queue_name)
    assert code == 1, output
    assert "Traceback" not in output
    [error] = [line for line in output.splitlines() if line.startswith("Error:")]
    assert expected in error
    assert "Redis at " in error


def _made(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory


# --- passwords from files: never only in argv ------------------------------------------------


@pytest.mark.parametrize("source", ["EMQ_REDIS_PASSWORD_FILE", "CREDENTIALS_DIRECTORY", "run"])
def test_a_password_comes_from_a_file_never_only_from_argv(tmp_path: Path, source: str) -> None:
    (tmp_path / "redis-password").write_text("p@ss:w/rd\n")
    environ = {
        "EMQ_REDIS_PASSWORD_FILE": {"EMQ_REDIS_PASSWORD_FILE": str(tmp_path / "redis-password")},
        "CREDENTIALS_DIRECTORY": {"CREDENTIALS_DIRECTORY": str(tmp_path)},
        "run": {},
    }[source]
    secrets_dir = tmp_path if source == "run" else tmp_path / "nothing-here"
    url = with_password("redis://emq@127.0.0.1:6380/0", environ, secrets_dir)
    assert url == "redis://emq:p%40ss%3Aw%2Frd@127.0.0.1:6380/0"
    assert redacted(url) == "redis://emq:***@127.0.0.1:6380/0"
    # A URL with its own password is left alone; no source leaves the URL as it was.
    assert with_password("redis://emq:own@h:1/0", environ, secrets_dir) == "redis://emq:own@h:1/0"
    assert with_password("redis://h:1/0", {}, tmp_path / "none") == "redis://h:1/0"


def test_a_named_password_file_that_is_missing_or_empty_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path in (tmp_path / "missing", empty):
        with pytest.raises(ConfigError, match=str(path)):
            with_password("redis://h:1/0", {"EMQ_REDIS_PASSWORD_FILE": str(path)}, tmp_path)


def test_the_cli_reads_the_password_file_and_never_prints_it(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "auth") as server:
        admin = server.client()
        admin.config_set("requirepass", PASSWORD)
        admin.close()
        secret = tmp_path / "redis-password"
        secret.write_text(PASSWORD)
        env = {"EMQ_REDIS_URL": server.url, "EMQ_REDIS_PASSWORD_FILE": str(secret)}
        result = CliRunner().invoke(main, ["enqueue", "--queue", "q", "charge", "{}"], env=env)
        assert result.exit_code == 0, result.output
        secret.write_text("wrong")
        result = CliRunner().invoke(main, ["enqueue", "--queue", "q", "charge", "{}"], env=env)
    assert result.exit_code == 1
    assert "WRONGPASS" in result.output
    assert PASSWORD not in result.output
    assert "wrong" not in result.output.replace("WRONGPASS", "")
