"""A real server on a free port with its own directory: tests start, kill, restart it.

Which binary: `EMQ_TEST_SERVER=redis|valkey|/path` (valkey: valkey-server on PATH, else the
embedded Valkey of the `embedded` extra); unset, redis-server on PATH, else the embedded Valkey.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from emq_worker.valkey.binary import find_server, label
from tests.support.lifecycle import Started

SERVER_VARIABLE = "EMQ_TEST_SERVER"
START_DEADLINE_S = 10.0
TLS_PROBE_DEADLINE_S = 10.0
NO_TLS = (
    re.compile(r"[^#*\n]*TLS support[^\n]*", re.IGNORECASE),
    re.compile(r"[^#*\n]*connection type tls[^\n]*", re.IGNORECASE),
)
"""What a server built without TLS says when given a --tls-port (Valkey 9: "Failed finding TLS
support."), as opposed to a TLS build's refusal to start without a certificate; its log line's
prefix (pid, time, `#`) is left out."""


def chosen_binary() -> str:
    """The binary every test starts (see the module's docstring)."""
    choice = os.environ.get(SERVER_VARIABLE) or None
    if choice is None:
        return shutil.which("redis-server") or find_server("valkey")
    return find_server(choice)


REDIS_SERVER = chosen_binary()
MULTI = b"*1\r\n$5\r\nMULTI\r\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer(Started):
    """`appendfsync` ("always", "everysec", "no") applies when `appendonly`; `extra` arguments go
    last on the command line (e.g. `("--maxmemory", "10mb")`). `restart` keeps port and dir.
    `binary` runs another compatible server; it defaults to the one the session chose
    (REDIS_SERVER: redis-server, or a valkey-server with EMQ_TEST_SERVER)."""

    def __init__(
        self,
        directory: Path,
        *,
        appendonly: bool = False,
        port: int | None = None,
        appendfsync: str = "always",
        extra: Sequence[str] = (),
        binary: str = REDIS_SERVER,
    ) -> None:
        self.binary = binary
        """The server executable: redis-server, or a valkey-server."""
        self.directory = directory
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra = tuple(extra)
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.appendfsync,
            "--logfile",
            str(self.directory / "redis.log"),
            *self.extra,
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ping()

    @property
    def _name(self) -> str:
        return label(self.binary)

    def _wait_ping(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.exceptions.RedisError:
                    pass
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"{self._name} on port {self.port} exited at start")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self._name} on port {self.port} did not answer PING")
                time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def restart(self, *, crash: bool = True) -> None:
        """SIGKILL (or, with crash=False, a clean stop) then start again on the same port and
        directory: with appendonly the data comes back from the AOF, without it it is gone."""
        if crash:
            self.kill()
        else:
            self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


def _incr_aof(directory: Path) -> Path:
    (incr,) = (directory / "appendonlydir").glob("*.incr.aof")
    return incr


def _command_ends(data: bytes, at: int) -> list[int]:
    """The offset just past each whole RESP command (`*argc`, then `$len` bulks) from `at`."""
    ends = []
    while at < len(data):
        line_end = data.index(b"\r\n", at)
        argc, at = int(data[at + 1 : line_end]), line_end + 2
        for _ in range(argc):
            line_end = data.index(b"\r\n", at)
            at = line_end + 2 + int(data[at + 1 : line_end]) + 2
        ends.append(at)
    return ends


def last_transaction_commands(directory: Path) -> int:
    """How many commands the AOF's last MULTI/EXEC block holds after its MULTI (EXEC included);
    the server in `directory` must be stopped."""
    data = _incr_aof(directory).read_bytes()
    return len(_command_ends(data, data.rindex(MULTI) + len(MULTI)))


def tear_last_transaction(directory: Path, keep: int) -> None:
    """Cut the AOF as a SIGKILL during its write can (a torn write): the last MULTI/EXEC block
    keeps its MULTI and `keep` whole commands, and ends half-way into the next one. The server in
    `directory` must be stopped; its next start drops the torn command (aof-load-truncated)."""
    incr = _incr_aof(directory)
    data = incr.read_bytes()
    start = data.rindex(MULTI) + len(MULTI)
    ends = [start, *_command_ends(data, start)]
    if not 0 <= keep < len(ends) - 1:
        raise ValueError(f"the last transaction has {len(ends) - 1} commands; cannot keep {keep}")
    incr.write_bytes(data[: (ends[keep] + ends[keep + 1]) // 2])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@functools.cache
def tls_refusal(binary: str = REDIS_SERVER) -> str | None:
    """Why `binary` cannot serve TLS (its own words), or None when it can. Starting it with a
    --tls-port and no certificate makes any build exit at once: a TLS build for the missing
    certificate, a build without TLS saying so."""
    args = [binary, "--port", "0", "--tls-port", str(free_port()), "--bind", "127.0.0.1"]
    args += ["--save", "", "--appendonly", "no", "--logfile", ""]
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=TLS_PROBE_DEADLINE_S, check=False
        )
    except subprocess.TimeoutExpired:
        return None  # it started: TLS is built in (and somehow configured)
    output = done.stdout + done.stderr
    for pattern in NO_TLS:
        said = pattern.search(output)
        if said is not None:
            return f"{label(binary)} at {binary} is built without TLS: {said.group(0).strip()!r}"
    return None
