"""The throwaway server the demo brings (see emq_worker.valkey.binary for which binary): on a
free port, in a temporary directory with persistence off, stopped and removed on exit."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from emq_worker.cli.demo.timing import START_TIMEOUT_S
from emq_worker.valkey import binary
from emq_worker.valkey.local import LocalServer, ServerStartError


class DemoError(Exception):
    """The demo cannot run (no server binary, the server did not start)."""


def find_server(explicit: str | None) -> str:
    """--server when given, else valkey-server or redis-server on PATH, else the embedded one."""
    try:
        return binary.find_server(explicit)
    except binary.ServerBinaryError as exc:
        raise DemoError(str(exc)) from exc


@contextlib.contextmanager
def throwaway_server(server_binary: str) -> Iterator[str]:
    """A server on a free port in a temp dir, persistence off; yields its URL; stops and removes
    everything on exit."""
    directory = tempfile.mkdtemp(prefix="emq-demo-")
    server = LocalServer(server_binary, Path(directory))
    try:
        try:
            server.start(START_TIMEOUT_S)
        except ServerStartError as exc:
            raise DemoError(str(exc)) from exc
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
