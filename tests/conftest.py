"""Fixtures: one real redis-server per test session on a free port; a unique queue per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.scripts import Scripts
from emq_worker.server.connection import connect
from tests.support.server import RedisServer

_counter = itertools.count()


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
