"""The pytest fixtures: a server for the session, a fresh queue per test, and `emq`, the helpers
bound to that server."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, Final

import pytest

from emq_worker.jobs.producer import Producer
from emq_worker.jobs.tasks import App
from emq_worker.observe.metrics import Counters
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.server.binary import embedded_binary, find_server
from emq_worker.server.connection import connect
from emq_worker.server.local import LocalServer
from emq_worker.testing.clock import fast_forward, fire_repeats
from emq_worker.testing.idle import run_until_idle
from emq_worker.testing.outcomes import JobOutcome, expect_completed, expect_dead, outcome

URL_VARIABLE: Final = "EMQ_TESTING_URL"
"""A server to use instead of starting one (its queues are the tests' unique names)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Emq:
    """The testing helpers bound to one server (the `emq` fixture)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def producer(self) -> Producer:
        """A new Producer on the server: `async with emq.producer() as producer: ...`."""
        return Producer.from_url(self.url)

    async def run_until_idle(self, app: App, queue: str, **options: Any) -> Counters:
        """`emq_worker.testing.run_until_idle` on this server."""
        return await run_until_idle(app, queue, url=self.url, **options)

    async def fast_forward(self, queue: str) -> int:
        """Promote every scheduled job of `queue` now; how many."""
        async with self._queue(queue) as target:
            return await fast_forward(target)

    async def fire_repeats(self, queue: str) -> int:
        """Mint one occurrence of every unpaused repeat of `queue` now; how many."""
        async with self._queue(queue) as target:
            return await fire_repeats(target)

    async def outcome(self, queue: str, job_id: str) -> JobOutcome:
        async with self._queue(queue) as target:
            return await outcome(target, job_id)

    async def assert_completed(
        self, queue: str, job_id: str, *, attempts: int | None = None
    ) -> JobOutcome:
        return expect_completed(await self.outcome(queue, job_id), attempts=attempts)

    async def assert_dead(
        self, queue: str, job_id: str, *, error: str | None = None, attempts: int | None = None
    ) -> JobOutcome:
        """The job is dead; `error` is a regular expression its last error must match."""
        return expect_dead(await self.outcome(queue, job_id), error=error, attempts=attempts)

    @asynccontextmanager
    async def _queue(self, name: str) -> AsyncIterator[Queue]:
        client = connect(self.url, DEFAULT_WIRE_VERSION)
        try:
            yield Queue(client, Scripts(), name)
        finally:
            await client.aclose()


@pytest.fixture(scope="session")
def emq_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's server: `EMQ_TESTING_URL` when set, else a server of its own on a free port
    (the embedded Valkey of the `embedded` extra, else valkey-server or redis-server on PATH)."""
    given = os.environ.get(URL_VARIABLE)
    if given:
        yield given
        return
    binary = embedded_binary() or find_server()
    with LocalServer(binary, tmp_path_factory.mktemp("emq-server")) as server:
        yield server.url


@pytest.fixture
def emq(emq_url: str) -> Emq:
    """The helpers on the session's server: `run_until_idle`, `fast_forward`, `fire_repeats`,
    `outcome`, `assert_completed`, `assert_dead`, `producer`."""
    return Emq(emq_url)


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name no other test uses: the test's name and a random suffix."""
    stem = _UNSAFE.sub("-", request.node.name).strip("-.")[:80] or "test"
    return f"{stem}-{uuid.uuid4().hex[:8]}"
