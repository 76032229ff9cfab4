"""The admin CLI on a cluster URL: discovery walks every primary, per-job reads route to the
queue's node, and a bad cluster URL is refused naming the bad seed."""

from __future__ import annotations

import json
import os

import anyio
from click.testing import CliRunner, Result

from emq_worker.cli.main import main
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.valkey.connection import connect
from tests.cluster.conftest import spread_queues
from tests.support.cluster import ClusterOfServers


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", url])


def enqueue_one_each(url: str, queues: list[str]) -> list[JobId]:
    async def go() -> list[JobId]:
        client = connect(url, DEFAULT_WIRE_VERSION)
        try:
            producer = Producer(client)
            return [(await producer.enqueue(q, "noop")).job_id for q in queues]
        finally:
            await client.aclose()

    return anyio.run(go)


def test_stats_finds_the_queues_of_every_primary(cluster: ClusterOfServers) -> None:
    queues = list(spread_queues(cluster, f"admin{os.getpid()}", per_node=1))
    enqueue_one_each(cluster.url, queues)
    result = cli(cluster.url, "stats", "--json")
    assert result.exit_code == 0, result.output
    found = {row["queue"]: row for row in json.loads(result.output)["queues"]}
    for queue in queues:
        assert found[queue]["pending"] == 1, found.get(queue)


def test_inspect_reads_a_job_on_its_queues_node(cluster: ClusterOfServers) -> None:
    queues = list(spread_queues(cluster, f"inspect{os.getpid()}", per_node=1))
    ids = enqueue_one_each(cluster.url, queues)
    for queue, job_id in zip(queues, ids, strict=True):
        result = cli(cluster.url, "inspect", job_id, "--queue", queue, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["where"] == "pending"


def test_a_bad_seed_is_refused_naming_it() -> None:
    result = cli("redis+cluster://127.0.0.1:7000,127.0.0.1", "stats")
    assert result.exit_code != 0
    assert "'127.0.0.1'" in result.output
