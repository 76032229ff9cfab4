"""A clustered park spans several slots, one BLPOP each. When one BLPOP's node is lost, only the
queues on that node's slots rest (`queue_failed`); the park does not fail the beat, and the next
park waits on the other queues and is woken by them."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from emq_worker.observe.clock import MonotonicClock
from emq_worker.observe.log import get_logger
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from emq_worker.runtime.isolation import QueueIsolation
from emq_worker.runtime.offers import Offers
from emq_worker.runtime.wakes import WakeWaiter
from emq_worker.valkey.connection import connect
from tests.cluster.conftest import spread_queues
from tests.support.cluster import ClusterOfServers

PARK_S = 5.0


@pytest.fixture
def losing(tmp_path: Path) -> Iterator[ClusterOfServers]:
    """Three primaries, no replicas: a killed one stays lost; the others serve on."""
    with ClusterOfServers(tmp_path / "cluster", primaries=3, full_coverage=False) as servers:
        yield servers


async def test_a_park_meeting_a_lost_node_rests_only_that_nodes_queues(
    losing: ClusterOfServers,
) -> None:
    placed = spread_queues(losing, f"park{os.getpid()}", per_node=1)
    doomed = next(iter(placed.values()))
    client = connect(losing.url, DEFAULT_WIRE_VERSION)
    try:
        queues = [Queue(client, Scripts(), name) for name in placed]
        survivor = next(queue for queue in queues if placed[queue.name] != doomed)
        with structlog.testing.capture_logs() as logs:
            isolation = QueueIsolation(
                client, queues, MonotonicClock(), random.Random(7), get_logger()
            )
            waiter, offers = WakeWaiter(client), Offers(queues, 0)
            await client.ping()
            losing.kill(doomed)
            assert await isolation.park(waiter, PARK_S, offers) is None
            failed = {event["queue"] for event in logs if event["event"] == "queue_failed"}
            assert failed == {name for name, port in placed.items() if port == doomed}
            await client.rpush(survivor.keys.wake, b"1")
            popped = await isolation.park(waiter, PARK_S, offers)
        assert popped == (survivor.keys.wake, b"1")
    finally:
        await client.aclose()
