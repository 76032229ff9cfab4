"""Fixtures: one real server per test session on a free port (tests/support/server.py says which
binary); a unique queue per test."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.scripts import Scripts
from emq_worker.valkey.binary import label
from emq_worker.valkey.connection import connect
from tests.support import tiers
from tests.support.leaks import collected_garbage, pytest_collection_finish
from tests.support.processes import WorkerProcesses
from tests.support.server import REDIS_SERVER, SERVER_VARIABLE, RedisServer

_counter = itertools.count()
__all__ = ["collected_garbage", "pytest_collection_finish"]  # the leak check (support/leaks.py)


def pytest_report_header() -> str:
    chosen = os.environ.get(SERVER_VARIABLE) or "unset: redis-server on PATH, else embedded Valkey"
    version = subprocess.run(
        [REDIS_SERVER, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return f"server: {label(REDIS_SERVER)} {REDIS_SERVER} ({SERVER_VARIABLE}={chosen}): {version}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Count each tier's tests before `-m` deselects any (tests/test_tier_sizes.py reads it)."""
    tiers.record(config, items)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    redis = connect(redis_url, DEFAULT_WIRE_VERSION)
    yield redis
    await redis.aclose()


@pytest.fixture
def scripts() -> Scripts:
    return Scripts()


@pytest.fixture
def queue_name(request: pytest.FixtureRequest) -> str:
    """A queue name no other test uses (in this session or a parallel one)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"t.{base}.{os.getpid()}.{next(_counter)}"


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture
def worker_processes(tmp_path: Path) -> Iterator[WorkerProcesses]:
    """`emq-worker run` subprocesses sharing one ledger; the ones still alive are killed after."""
    with WorkerProcesses(tmp_path / "workers") as processes:
        yield processes
