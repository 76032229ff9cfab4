"""Fixtures: a 3-primary Redis Cluster of real redis-server processes, and queue names whose
slots land two on each primary."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from emq_worker.protocol.keys import QueueKeys, hash_slot
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.connection import connect
from tests.support.cluster import ClusterOfServers


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterOfServers]:
    with ClusterOfServers(tmp_path_factory.mktemp("cluster"), primaries=3) as servers:
        yield servers


@pytest.fixture
async def cluster_client(cluster: ClusterOfServers) -> AsyncIterator[Redis]:
    client = connect(cluster.url, DEFAULT_WIRE_VERSION)
    yield client
    await client.aclose()


def spread_queues(cluster: ClusterOfServers, prefix: str, per_node: int = 2) -> dict[str, int]:
    """Queue names (`<prefix>.<n>`) chosen so each primary serves `per_node` of them:
    name -> the port of its primary."""
    chosen: dict[str, int] = {}
    taken = dict.fromkeys(cluster.primary_ports(), 0)
    n = 0
    while any(count < per_node for count in taken.values()):
        name = f"{prefix}.{n}"
        n += 1
        port = cluster.owner_port(hash_slot(QueueKeys.of(name).pending))
        if taken[port] < per_node:
            taken[port] += 1
            chosen[name] = port
    return chosen


def connected(client: RedisCluster) -> int:
    """Connections `client` holds open, to any node it knows (the slot map's or the seeds)."""
    manager = client.nodes_manager
    nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()]
    return sum(connection.is_connected for node in nodes for connection in node._connections)
