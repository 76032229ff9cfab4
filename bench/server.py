"""The bench's own server (free port, temp dir, no persistence) and what it reports.

`--server redis|valkey|PATH` picks the binary (`server_binary`); without it, redis-server on
PATH, else the embedded Valkey of the `embedded` extra, as the tests choose theirs.

`Snapshot` reads `INFO all` once: CPU seconds, socket reads (`total_reads_processed`, one per
batch of commands a client sent in one go: a round trip), and per-command call counts and
server time (`INFO commandstats`, which also counts the commands a Lua script runs).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.pinning import pinned
from emq_worker.valkey.binary import find_server, label

START_DEADLINE_S = 10.0
MAX_CLIENTS = 15_000
"""SAQ holds one connection per concurrency slot: 10 000 held jobs need 10 000 clients."""


def server_binary(choice: str | None) -> str:
    """The binary for `--server` (raises ServerBinaryError naming what to install)."""
    if choice is None:
        return shutil.which("redis-server") or find_server("valkey")
    return find_server(choice)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Snapshot:
    at: float
    cpu_s: float
    reads: int
    calls: dict[str, int]
    usec: dict[str, int]

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


@dataclass(frozen=True, slots=True)
class Delta:
    seconds: float
    cpu_s: float
    reads: int
    calls: dict[str, int]
    usec: dict[str, int]

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def delta(before: Snapshot, after: Snapshot, *, own_reads: int = 1) -> Delta:
    """What happened between two snapshots, less the `own_reads` the bench itself sent
    (by default the closing INFO)."""
    calls = {k: v - before.calls.get(k, 0) for k, v in after.calls.items()}
    usec = {k: v - before.usec.get(k, 0) for k, v in after.usec.items()}
    calls["info"] = calls.get("info", 0) - own_reads
    return Delta(
        seconds=after.at - before.at,
        cpu_s=after.cpu_s - before.cpu_s,
        reads=after.reads - before.reads - own_reads,
        calls={k: v for k, v in calls.items() if v},
        usec={k: v for k, v in usec.items() if v},
    )


class BenchRedis:
    def __init__(self, directory: Path, core: int | None, binary: str) -> None:
        self.directory = directory
        self.binary = binary
        self.core = core
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._client: redis.Redis | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis(port=self.port, socket_timeout=60)
        return self._client

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
            "no",
            "--maxclients",
            str(MAX_CLIENTS),
            "--logfile",
            str(self.directory / "redis.log"),
        ]
        self.process = subprocess.Popen(
            pinned(args, self.core), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ping()

    def _wait_ping(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            try:
                if self.client.ping():
                    return
            except redis.exceptions.RedisError:
                pass
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{label(self.binary)} on port {self.port} exited at start")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label(self.binary)} on port {self.port} did not answer PING")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None

    def __enter__(self) -> BenchRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def version(self) -> str:
        """The Redis version the server reports (Valkey reports the one it is compatible with)."""
        return str(self.client.info("server")["redis_version"])

    def server(self) -> str:
        """`Redis 7.0.15`, `Valkey 9.1.2`, or `Valkey 9.1.2 (embedded)`."""
        info = self.client.info("server")
        name = "Valkey" if "valkey_version" in info else "Redis"
        embedded = " (embedded)" if label(self.binary).endswith("(embedded)") else ""
        return f"{name} {info.get('valkey_version', info['redis_version'])}{embedded}"

    def flush(self) -> None:
        """A clean keyspace between measurements (scripts stay loaded); stats counters reset."""
        self.client.flushall()
        self.client.config_resetstat()

    def snapshot(self) -> Snapshot:
        info: dict[str, Any] = self.client.info("all")
        calls: dict[str, int] = {}
        usec: dict[str, int] = {}
        for key, value in info.items():
            if key.startswith("cmdstat_") and isinstance(value, dict):
                name = key.removeprefix("cmdstat_")
                calls[name] = int(value["calls"])
                usec[name] = int(value["usec"])
        return Snapshot(
            at=time.time(),
            cpu_s=float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
            reads=int(info["total_reads_processed"]),
            calls=calls,
            usec=usec,
        )
