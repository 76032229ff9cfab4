"""The dashboard lists every queue it finds on its server, a page at a time: its tests run on a
database of their own, emptied before each test, so the queues other tests leave on the
session's server do not push theirs off the first page."""

from __future__ import annotations

import pytest
import redis

from tests.support.server import RedisServer

DASHBOARD_DB = 3
"""The database number the dashboard's tests use (the rest of the suite uses 0)."""


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    url = redis_server.url.rsplit("/", 1)[0] + f"/{DASHBOARD_DB}"
    with redis.Redis.from_url(url) as admin:
        admin.flushdb()
    return url
