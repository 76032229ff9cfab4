"""Fixtures of the interop suite: EchoMQ's side (its scripts, restated) and ours, on one queue."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from tests.interop.echomq import EchoMQ
from tests.support.conformance import Harness


@pytest.fixture
def conf(client: Redis, queue_name: str) -> Harness:
    return Harness.of(client, queue_name)


@pytest.fixture
def emq(client: Redis, queue_name: str) -> EchoMQ:
    return EchoMQ.of(client, queue_name)
