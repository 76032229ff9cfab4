"""What the completion window and the enqueue memo cost in server memory.

    python -m bench.tombstone_memory redis://127.0.0.1:PORT/0 [JOBS]

Against a scratch server (it FLUSHALLs): enqueues and completes JOBS jobs with minted ids, then
JOBS with caller-chosen ids and JOBS with dedup ids, and prints `used_memory` per completed job
over the minted run (the tombstone keys: what a day's window holds per such job), MEMORY USAGE
of one key of each kind, and the cost of one enqueue call's memo.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import anyio
from redis.asyncio import Redis

from emq_worker import JobSpec, Producer, WorkerSettings
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.values import Completion, HeldLease
from emq_worker.valkey.connection import connect

BATCH = 500
RECEIPT_MS = WorkerSettings(queues=("q",)).receipt_ms
"""As a worker at its defaults keeps receipts (bench/steady_memory.py measures them at speed)."""


async def used_memory(client: Redis) -> int:
    info: dict[str, Any] = await client.info("memory")
    return int(info["used_memory"])


async def run_all(producer: Producer, queue: Queue, specs: list[JobSpec]) -> None:
    """Enqueue `specs` (BATCH per call), then claim and complete every job."""
    for first in range(0, len(specs), BATCH):
        await producer.enqueue_many(queue.name, specs[first : first + BATCH])
    while jobs := (await queue.claim(BATCH, 60_000)).jobs:
        completions = [Completion(HeldLease(job.id, job.token, job.nonce)) for job in jobs]
        await queue.settle(completions, RECEIPT_MS)


async def cost(
    client: Redis, name: str, jobs: int, spec: Callable[[int], JobSpec]
) -> tuple[int, Queue]:
    producer = Producer(client)
    queue = producer.queue(name)
    before = await used_memory(client)
    await run_all(producer, queue, [spec(i) for i in range(jobs)])
    return await used_memory(client) - before, queue


async def main(url: str, jobs: int) -> None:
    client = connect(url, DEFAULT_WIRE_VERSION)
    await client.flushall()
    minter = SnowflakeMinter(900)
    minted, _ = await cost(client, "m", jobs, lambda i: JobSpec("t"))
    chosen, q = await cost(client, "c", jobs, lambda i: JobSpec("t", job_id=minter.job_id()))
    deduped, d = await cost(client, "d", jobs, lambda i: JobSpec("t", dedup_id=f"order-{i}"))
    print(f"jobs per run: {jobs}")
    print(f"chosen id: {(chosen - minted) / jobs:.1f} bytes/job over minted ids")
    print(f"dedup id:  {(deduped - minted) / jobs:.1f} bytes/job over minted ids")
    idem = (await client.keys(q.keys.prefix + "idem:*"))[0]
    de = (await client.keys(d.keys.prefix + "de:*"))[0]
    for key in (idem, de):
        print(f"MEMORY USAGE {_text(key)}: {await client.memory_usage(key)}")
    one = Producer(client)
    await one.enqueue("single", "t")
    memo = (await client.keys(one.queue("single").keys.prefix + "enqueue:*"))[0]
    print(f"MEMORY USAGE {_text(memo)} (one job's memo): {await client.memory_usage(memo)}")
    await client.aclose()


def _text(key: bytes | str) -> str:
    return key.decode() if isinstance(key, bytes) else key


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
