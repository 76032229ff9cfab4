"""A server process of our own on 127.0.0.1 (the demo's throwaway one, `emq-worker dev`'s): a
free or given port, its files in one directory, started until it answers PING, stopped on exit."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from emq_worker.errors import EmqError

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
POLL_S = 0.02


class ServerStartError(EmqError):
    """The server exited at start or did not answer PING in time."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(port: int) -> bool:
    """Whether something already listens on 127.0.0.1:`port` (a bind test: no connection made).
    SO_REUSEADDR as the server sets it, so a port in TIME_WAIT is not taken for busy."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


class LocalServer:
    """`persist` keeps the data across restarts (AOF, fsync every second) for `--persist DIR`;
    without it nothing is written to disk. The server's log is `server.log` in `directory`."""

    def __init__(
        self, binary: str, directory: Path, *, port: int | None = None, persist: bool = False
    ) -> None:
        self.binary = binary
        self.directory = directory
        self.port = port or free_port()
        self.persist = persist
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    def arguments(self) -> list[str]:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", str(self.directory), "--save", "", "--logfile", str(self.log_path)]
        args += ["--appendonly", "yes" if self.persist else "no"]
        return args

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        if port_in_use(self.port):
            raise ServerStartError(f"port {self.port} is in use (on 127.0.0.1)")
        self.directory.mkdir(parents=True, exist_ok=True)
        # Its own session: a Ctrl-C in the terminal reaches only us, and we stop it last.
        self.process = subprocess.Popen(
            self.arguments(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_ping(self.process, timeout_s)

    def _wait_ping(self, process: subprocess.Popen[bytes], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise ServerStartError(
                        f"{self.binary} exited at start on port {self.port} (code "
                        f"{process.returncode}); see {self.log_path}"
                    )
                with contextlib.suppress(redis.ConnectionError):
                    if client.ping():
                        self._check_ours(client, process)
                        return
                time.sleep(POLL_S)
        finally:
            client.close()
        self.stop()
        raise ServerStartError(f"{self.binary} did not answer PING within {timeout_s:.0f} s")

    def _check_ours(self, client: redis.Redis, process: subprocess.Popen[bytes]) -> None:
        """The server answering is the one we started, not another that took the port first
        (ours then exits, refused the port: stop it and say so)."""
        answering = client.info("server").get("process_id")
        if answering == process.pid:
            return
        self.stop()
        raise ServerStartError(
            f"port {self.port} is in use (pid {answering} answers there, not our {self.binary})"
        )

    def version(self) -> str:
        """`valkey-server 9.1.2` or `redis-server 7.0.15`, as the server reports itself."""
        with redis.Redis(port=self.port) as client:
            info = client.info("server")
        name = "valkey-server" if "valkey_version" in info else "redis-server"
        return f"{name} {info.get('valkey_version', info['redis_version'])}"

    def stop(self) -> None:
        """SIGTERM (with persistence the AOF is flushed), SIGKILL if it lingers."""
        process, self.process = self.process, None
        stop_process(process, STOP_TIMEOUT_S)

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(process: subprocess.Popen[Any] | None, timeout_s: float) -> None:
    """SIGTERM a child that is still running, then SIGKILL it if it has not exited within
    `timeout_s`."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)
