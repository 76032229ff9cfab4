"""The pytest fixtures: a server for the session, a fresh queue per test, and `emq`, the helpers
bound to that server."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from typing import Final

import pytest

from emq_worker.testing.bound import Emq
from emq_worker.valkey.binary import embedded_binary, find_server
from emq_worker.valkey.local import LocalServer

URL_VARIABLE: Final = "EMQ_TESTING_URL"
"""A server to use instead of starting one (its queues are the tests' unique names)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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
