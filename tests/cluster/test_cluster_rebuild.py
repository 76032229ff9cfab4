"""A rebuild of the slot map (after a lost node, a failover, CLUSTERDOWN) re-reads the slot map
only: every command waits on the rebuild, and the command table it does not need again took
most of the wait on a loaded machine."""

from __future__ import annotations

from redis.asyncio import Redis

from emq_worker.valkey.cluster import FencedCluster
from tests.support.cluster import ClusterOfServers
from tests.support.wait import eventually


def calls(cluster: ClusterOfServers, command: str) -> int:
    """How many times the live nodes ran `command` (INFO commandstats' name: `cluster|slots`)."""
    total = 0
    for node in cluster.live():
        with node.client() as client:
            stats = client.info("commandstats")
        total += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return total


async def test_a_rebuilt_slot_map_does_not_read_the_command_table_again(
    cluster: ClusterOfServers, cluster_client: Redis
) -> None:
    client = cluster_client
    assert isinstance(client, FencedCluster)
    await client.ping()  # the first discovery reads the slot map and the command table
    slot_maps, command_tables = calls(cluster, "cluster|slots"), calls(cluster, "command")

    async def rebuilt() -> bool:
        client.rediscover()  # what a lost node, a failover or CLUSTERDOWN leads to
        await client.ping()
        return calls(cluster, "cluster|slots") > slot_maps

    await eventually(rebuilt, what="a rebuild of the slot map")
    assert calls(cluster, "command") == command_tables
