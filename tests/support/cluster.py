"""A real Redis/Valkey Cluster of server processes on free ports, for tests and the benchmark.

`ClusterOfServers(directory, primaries=3, replicas=0)` starts each node as a RedisServer with
`--cluster-enabled yes` and joins them with CLUSTER commands, as `redis-cli --cluster create`
does (so no redis-cli is needed, and the embedded Valkey, which ships none, can form one): each
node its own config epoch, each primary an equal share of the slots, every node MEETs the first,
each replica REPLICATEs its primary. Then it waits until every node reports `cluster_state:ok`
and all agree on who owns every slot. It also moves a slot between primaries (`move_slot`) and
kills a primary (`kill`), waiting for the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from tests.support.lifecycle import Started
from tests.support.server import REDIS_SERVER, RedisServer, free_port

NODE_TIMEOUT_MS = 1000
"""cluster-node-timeout: how long a silent primary has before its replica is promoted."""
READY_DEADLINE_S = 60.0


class ClusterOfServers(Started):
    def __init__(
        self,
        directory: Path,
        *,
        primaries: int = 3,
        replicas: int = 0,
        full_coverage: bool = True,
        extra: Sequence[str] = (),
        binary: str = REDIS_SERVER,
    ) -> None:
        self.directory = directory
        self.binary = binary
        self.full_coverage = full_coverage
        """`cluster-require-full-coverage`: with `yes` (Redis' default) every node refuses every
        slot (CLUSTERDOWN) from the moment a primary is marked failed until its replica leads."""
        self.extra = tuple(extra)
        """More redis-server arguments for every node."""
        self.primaries = primaries
        self.replicas = replicas
        self.nodes: list[RedisServer] = []
        self.bus_ports: list[int] = []

    @property
    def url(self) -> str:
        """The cluster URL naming every live node as a seed."""
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes if node.process)
        return f"redis+cluster://{seeds}"

    def start(self) -> None:
        count = self.primaries * (1 + self.replicas)
        for index in range(count):
            self.bus_ports.append(free_port())
            node = RedisServer(
                self.directory / f"node{index}",
                extra=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    # The bus port defaults to port + 10000, past 65535 for a high free port.
                    "--cluster-port",
                    str(self.bus_ports[index]),
                    "--cluster-require-full-coverage",
                    "yes" if self.full_coverage else "no",
                    *self.extra,
                ),
                binary=self.binary,
            )
            self.nodes.append(node)
            node.start()
        self._join()
        self.wait_ready()

    def _join(self) -> None:
        """Epochs, slots, MEET, then REPLICATE once every node knows every other."""
        primaries = self.nodes[: self.primaries]
        share = 16384 // len(primaries)
        for index, node in enumerate(self.nodes):
            with node.client() as client:
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
                if index < len(primaries):
                    last = 16383 if index == len(primaries) - 1 else (index + 1) * share - 1
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", index * share, last)
        first = ("127.0.0.1", self.nodes[0].port, self.bus_ports[0])
        for node in self.nodes[1:]:
            with node.client() as client:
                client.execute_command("CLUSTER", "MEET", *first)
        if self.replicas:
            self._wait(self._all_met, "every node to know every other")
            self._replicate(primaries)

    def _replicate(self, primaries: list[RedisServer]) -> None:
        """Replica r of primary i is node primaries + r * primaries + i."""
        for offset, node in enumerate(self.nodes[len(primaries) :]):
            primary = primaries[offset % len(primaries)]
            with primary.client() as client:
                primary_id = client.execute_command("CLUSTER", "MYID").decode()
            with node.client() as client:
                client.execute_command("CLUSTER", "REPLICATE", primary_id)

        def attached() -> bool:
            for primary in primaries:
                with primary.client() as client:
                    if int(client.info("replication")["connected_slaves"]) < self.replicas:
                        return False
            return True

        self._wait(attached, "every replica to attach to its primary")

    def _all_met(self) -> bool:
        for node in self.nodes:
            with node.client() as client:
                known = client.execute_command("CLUSTER", "NODES").decode().strip().splitlines()
                if len(known) < len(self.nodes) or any("handshake" in line for line in known):
                    return False
        return True

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + READY_DEADLINE_S
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster in {self.directory}: waited in vain for {what}")
            time.sleep(0.05)

    def live(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.process is not None]

    def wait_ready(self, deadline_s: float = READY_DEADLINE_S) -> None:
        """Poll until the live nodes agree (see _agreed); after a kill, until a replica leads."""
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                if self._agreed():
                    return
            except redis.exceptions.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster in {self.directory} did not become ready")
            time.sleep(0.05)

    def _agreed(self) -> bool:
        """cluster_state:ok everywhere, the same slot map everywhere, every owner alive."""
        views = []
        alive = {node.port for node in self.live()}
        for node in self.live():
            with node.client() as client:
                info = client.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return False
                views.append(sorted(_slot_owners(client)))
        owners = {port for _, _, port in views[0]}
        return owners <= alive and all(view == views[0] for view in views)

    def wait_replicas(self, deadline_s: float = READY_DEADLINE_S) -> None:
        """Poll until every primary's replicas are online and have its whole stream: a replica
        still waiting for its first sync (a fresh cluster) cannot be promoted."""
        deadline = time.monotonic() + deadline_s
        while not all(self._replicated(port) for port in self.primary_ports()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replicas in {self.directory} did not catch up")
            time.sleep(0.05)

    def _replicated(self, port: int) -> bool:
        with self.node(port).client() as client:
            info = client.info("replication")
        replicas = [info[f"slave{n}"] for n in range(int(info["connected_slaves"]))]
        offset = info["master_repl_offset"]
        return len(replicas) == self.replicas and all(
            r["state"] == "online" and r["offset"] >= offset for r in replicas
        )

    def owner_port(self, slot: int) -> int:
        """The port of the primary that serves `slot`."""
        with self.live()[0].client() as client:
            for start, end, port in _slot_owners(client):
                if start <= slot <= end:
                    return port
        raise LookupError(f"no node serves slot {slot}")

    def primary_ports(self) -> list[int]:
        with self.live()[0].client() as client:
            return sorted({port for _, _, port in _slot_owners(client)})

    def node(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def move_slot(self, slot: int, to_port: int, batch: int = 100_000) -> int:
        """Move `slot` to the primary on `to_port` by SETSLOT IMPORTING/MIGRATING, MIGRATE and
        SETSLOT NODE, as `redis-cli --cluster reshard` does. `batch` keys go per MIGRATE call
        (redis-cli uses 10); a call is atomic on the source. Returns the keys moved."""
        moving = self.begin_move(slot, to_port)
        moved = moving.migrate(batch)
        moving.finish()
        return moved

    def begin_move(self, slot: int, to_port: int) -> SlotMove:
        """The first step of a move: the slot is IMPORTING on the target, MIGRATING on the source
        (clients get ASK for keys already moved)."""
        source = self.node(self.owner_port(slot))
        move = SlotMove(self, slot, source, self.node(to_port))
        with source.client() as src, move.target.client() as dst:
            source_id = src.execute_command("CLUSTER", "MYID").decode()
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", move.target_id)
        return move

    def kill(self, port: int) -> None:
        """SIGKILL the node on `port`, as a crash would."""
        self.node(port).kill()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class SlotMove:
    """A slot being moved: `migrate` its keys, then `finish` (SETSLOT NODE everywhere)."""

    def __init__(
        self, cluster: ClusterOfServers, slot: int, source: RedisServer, target: RedisServer
    ) -> None:
        self.cluster = cluster
        self.slot = slot
        self.source = source
        self.target = target
        with target.client() as dst:
            self.target_id: str = dst.execute_command("CLUSTER", "MYID").decode()

    def migrate(self, batch: int) -> int:
        moved = 0
        with self.source.client() as src:
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, batch):
                src.execute_command(
                    "MIGRATE",
                    "127.0.0.1",
                    self.target.port,
                    "",
                    0,
                    10_000,
                    "REPLACE",
                    "KEYS",
                    *keys,
                )
                moved += len(keys)
        return moved

    def finish(self) -> None:
        for node in self.cluster.live():
            with node.client() as client:
                client.execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)
        self.cluster.wait_ready()


def _slot_owners(client: redis.Redis) -> list[tuple[int, int, int]]:
    """(first slot, last slot, primary port) of every range, from CLUSTER SLOTS."""
    return [
        (int(entry[0]), int(entry[1]), int(entry[2][1]))
        for entry in client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
    ]
