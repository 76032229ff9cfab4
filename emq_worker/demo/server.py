"""The throwaway server the demo brings: found on PATH, on a free port, in a temporary
directory with persistence off, stopped and removed on exit."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from emq_worker.demo.timing import START_TIMEOUT_S

INSTALL_HINT = (
    "emq-worker demo needs a redis-server or valkey-server binary. Install one:\n"
    "  Debian/Ubuntu:  sudo apt-get install redis-server  (or valkey-server)\n"
    "  macOS:          brew install redis                 (or valkey)\n"
    "  Valkey:         https://valkey.io/download/\n"
    "or point --server at one."
)


class DemoError(Exception):
    """The demo cannot run (no server binary, the server did not start)."""


def find_server(explicit: str | None) -> str:
    """The server binary: --server when given, else valkey-server or redis-server on PATH."""
    if explicit is not None:
        path = shutil.which(explicit) or explicit
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise DemoError(f"--server {explicit!r} is not an executable file.\n{INSTALL_HINT}")
        return path
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise DemoError(f"no valkey-server or redis-server found on PATH.\n{INSTALL_HINT}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def throwaway_server(binary: str) -> Iterator[str]:
    """A server on a free port in a temp dir, persistence off; yields its URL; stops and removes
    everything on exit."""
    directory = tempfile.mkdtemp(prefix="emq-demo-")
    process: subprocess.Popen[bytes] | None = None
    try:
        port = free_port()
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
        args += ["--save", "", "--appendonly", "no", "--logfile", str(Path(directory) / "log")]
        process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        _wait_ping(process, port, binary)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ping(process: subprocess.Popen[bytes], port: int, binary: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DemoError(f"{binary} exited at start (code {process.returncode})")
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    return
            time.sleep(0.02)
    finally:
        client.close()
    raise DemoError(f"{binary} did not answer PING within {START_TIMEOUT_S:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
