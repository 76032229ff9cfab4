"""What flows cost the claim and settle path, beside the flat path.

    python -m bench.flows_cost redis://127.0.0.1:PORT/0 [JOBS]

Against a scratch server (it FLUSHALLs). Each row claims and settles JOBS jobs in batches of
BATCH (one claim call, one settle call per batch, as a worker's drain and settle batcher do) and
reports the server's script time per job (INFO commandstats, evalsha: usec per call summed over
every script the row ran, divided by the jobs), and the wall time per job (one client, no
worker). Rows:
- flat, settle without the flow hooks: the settle script as it was before flows (its flow lines
  removed), the baseline;
- flat: the same jobs through today's settle (what the flow hooks cost a queue with no flows);
- flows, one queue: parents of FAN_OUT children each; the children complete (each counted in its
  parent, the last one releasing it), then the parents (their records deleted);
- flows, across queues: the children live in another queue; their completions go to its outbox,
  which the beat's sweep delivers (its read, flow_deliver and flow_ack calls are counted too).
Writing the flows (and the flat enqueues) is outside the figures. On a busy machine the script
times swing with the load: the least of the rounds is the steadier figure. A second table times
the two calls the flow hooks add to every completion (in a loop inside one script).
"""

from __future__ import annotations

import hashlib
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from redis.asyncio import Redis

from emq_worker import FlowJob, JobSpec, Producer
from emq_worker.observe.log import configure, get_logger
from emq_worker.protocol.flow_wire import outbox_key
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import LuaScript, Scripts, build
from emq_worker.protocol.values import Completion, HeldLease
from emq_worker.runtime.outbox import OutboxSweep
from emq_worker.valkey.connection import connect

BATCH = 100
FAN_OUT = 9
RECEIPT_MS = 60_000
LEASE_MS = 60_000


def settle_without_flows() -> LuaScript:
    """The settle script with its flow calls taken out: the flat path as it was before flows
    (the included functions stay, never called)."""
    script = build("settle")
    calls = ("woken = woken + flow_", "flow_retire(row)")
    lines = [line for line in script.source.splitlines() if not line.strip().startswith(calls)]
    source = "\n".join(lines) + "\n"
    sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
    return LuaScript("settle", source, sha, script.keys)


async def script_usec(client: Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("usec", 0))


async def drain(queue: Queue) -> int:
    """Claim and complete every ready job of `queue`, BATCH at a time; returns the jobs."""
    done = 0
    while jobs := (await queue.claim(BATCH, LEASE_MS)).jobs:
        completions = [Completion(HeldLease(job.id, job.token, job.nonce)) for job in jobs]
        await queue.settle(completions, RECEIPT_MS)
        done += len(jobs)
    return done


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    jobs: int
    server_us: float
    wall_us: float


async def measure(client: Redis, name: str, run: Callable[[], Awaitable[int]]) -> Row:
    await client.config_resetstat()
    started = time.perf_counter()
    jobs = await run()
    wall = time.perf_counter() - started
    return Row(name, jobs, await script_usec(client) / jobs, wall * 1e6 / jobs)


async def flat(
    client: Redis, scripts: Scripts, name: str, jobs: int
) -> Callable[[], Awaitable[int]]:
    producer = Producer(client)
    for first in range(0, jobs, 500):
        await producer.enqueue_many(name, [JobSpec("t")] * min(500, jobs - first))
    queue = Queue(client, scripts, name)
    return lambda: drain(queue)


async def flows(
    client: Redis, name: str, jobs: int, child_queue: str | None
) -> Callable[[], Awaitable[int]]:
    producer = Producer(client)
    children = [FlowJob("t", queue=child_queue) for _ in range(FAN_OUT)]
    for _ in range(jobs // (FAN_OUT + 1)):
        await producer.enqueue_flow(name, FlowJob("t", children=children))
    parents = producer.queue(name)
    kids = producer.queue(child_queue) if child_queue else parents
    sweep = OutboxSweep(get_logger())

    async def run() -> int:
        done = await drain(kids)
        if child_queue:
            while await client.llen(outbox_key(kids)):  # the sweeps of successive beats
                await sweep.sweep(kids)
            done += await drain(parents)
        else:
            done += await drain(parents)  # the parents released by the last children
        return done

    return run


ROUNDS = 5


async def one_round(client: Redis, plain: Scripts, today: Scripts, jobs: int) -> list[Row]:
    await client.flushall()
    for scripts in (plain, today):
        await scripts.load_all(client)
    return [
        await measure(
            client, "flat, settle without the flow calls", await flat(client, plain, "f0", jobs)
        ),
        await measure(client, "flat", await flat(client, today, "f1", jobs)),
        await measure(
            client,
            f"flows, one queue (1 parent per {FAN_OUT} children)",
            await flows(client, "s", jobs, None),
        ),
        await measure(
            client, "flows, children in another queue", await flows(client, "x", jobs, "x.kids")
        ),
    ]


LOOP = 200_000
HOOK_CALLS = {
    "HMGET row parent parent_queue (every completion)": (
        "redis.call('HMGET', row, 'parent', 'parent_queue')"
    ),
    "DEL of the 4 flow subkeys (every completion)": (
        "redis.call('DEL', row .. ':dependencies', row .. ':processed', row .. ':failed', "
        "row .. ':unsuccessful')"
    ),
}


async def hook_cost(client: Redis) -> dict[str, float]:
    """The flat path's two extra calls, each LOOP times in one script: us per call."""
    row = "emq:{bench}:job:JOB0000000000a"
    await client.hset(row, mapping={"state": "active", "attempts": "1", "payload": "x"})
    costs = {}
    for name, call in HOOK_CALLS.items():
        source = f"local row = KEYS[1] for _ = 1, {LOOP} do {call} end return 1"
        started = time.perf_counter()
        await client.eval(source, 1, row)
        costs[name] = (time.perf_counter() - started) * 1e6 / LOOP
    return costs


async def main(url: str, jobs: int) -> None:
    configure("console", "warning")
    client = connect(url, DEFAULT_WIRE_VERSION)
    plain, today = Scripts(), Scripts()
    plain.by_name["settle"] = settle_without_flows()
    rounds = [await one_round(client, plain, today, jobs) for _ in range(ROUNDS)]
    print(f"{ROUNDS} rounds; claim and settle {BATCH} jobs per call; server script time per job")
    print("| path | jobs | median us/job | least us/job | wall us/job (median) |")
    print("|---|---:|---:|---:|---:|")
    for rows in zip(*rounds, strict=True):
        server = [row.server_us for row in rows]
        wall = statistics.median(row.wall_us for row in rows)
        median, least = statistics.median(server), min(server)
        print(f"| {rows[0].name} | {rows[0].jobs} | {median:.1f} | {least:.1f} | {wall:.1f} |")
    costs = [await hook_cost(client) for _ in range(3)]
    print(f"\nthe flow calls a flat completion makes, {LOOP} times in one script (least of 3)")
    print("| call | us |")
    print("|---|---:|")
    for name in HOOK_CALLS:
        print(f"| {name} | {min(cost[name] for cost in costs):.2f} |")
    await client.aclose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
