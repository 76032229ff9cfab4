"""A dashboard scene: queues with a past, a live worker, jobs in every state.

The past (an hour of history) is written straight into the documented bucket format of
docs/protocol.md (`emq:{q}:history:m:<minute>` and `:h:<hour>` hashes), as any EchoMQ tool
could: that both dates the graphs and checks that the format is all a reader needs. The present
comes from a real worker running real jobs.
"""

from __future__ import annotations

import math
import random

import anyio
from redis.asyncio import Redis

from emq_worker import App, JobContext
from emq_worker.observe.history_format import (
    HOUR_MS,
    HOURS_KEPT_MS,
    MINUTE_MS,
    MINUTES_KEPT_MS,
    bucket_starts,
    duration_bucket,
)
from emq_worker.protocol.keys import QUEUES_KEY, QueueKeys
from emq_worker.protocol.servertime import server_ms

TASK_MIX = {"charge": (0.35, 0.04), "refund": (0.9, 0.12), "send_receipt": (0.02, 0.01)}
"""task: (typical run time in seconds, failure rate)."""


async def backfill(
    client: Redis, queue: str, minutes: int, rng: random.Random, tasks: tuple[str, ...]
) -> None:
    """`minutes` of plausible history of `tasks` before now, with a busy spell and an error
    burst; the queue's completed and dead-lettered counters agree with it."""
    keys = QueueKeys.of(queue)
    now = await server_ms(client, keys.pending)
    totals = {"completed": 0, "dead": 0}
    async with client.pipeline(transaction=False) as pipe:
        for n, start in enumerate(bucket_starts(now, MINUTE_MS, minutes + 1)[:-1]):
            wave = 1 + 0.6 * math.sin(n / 9) + (0.8 if 20 <= n <= 28 else 0)
            for task in tasks:
                typical, failing = TASK_MIX[task]
                jobs = int(rng.uniform(20, 40) * wave * (3 if task == "send_receipt" else 1))
                failure = failing * (5 if 40 <= n <= 43 else 1)
                fields = _bucket(jobs, typical, failure, rng)
                totals["completed"] += fields["completed"]
                totals["dead"] += fields["dead"]
                hour = keys.history_hour(start - start % HOUR_MS)
                for name, value in fields.items():
                    pipe.hincrby(keys.history_minute(start), name, value)
                    pipe.hincrby(hour, name, value)
                    pipe.hincrby(hour, f"t:{task}:{name}", value)
                pipe.pexpireat(keys.history_minute(start), start + MINUTE_MS + MINUTES_KEPT_MS)
                pipe.pexpireat(hour, start - start % HOUR_MS + HOUR_MS + HOURS_KEPT_MS)
        pipe.hincrby(keys.completed, "count", totals["completed"])
        pipe.hincrby(keys.failed, "count", totals["dead"])
        pipe.zadd(QUEUES_KEY, {queue: now})
        await pipe.execute()


def _bucket(jobs: int, typical: float, failure: float, rng: random.Random) -> dict[str, int]:
    failed = sum(rng.random() < failure for _ in range(jobs))
    dead = sum(rng.random() < 0.2 for _ in range(failed))
    fields = {
        "claims": jobs,
        "completed": jobs - failed,
        "retried": failed - dead,
        "dead": dead,
        "dur_count": jobs,
    }
    total_us = 0
    for _ in range(jobs):
        seconds = rng.lognormvariate(math.log(typical), 0.5)
        total_us += int(seconds * 1_000_000)
        name = f"dur:{duration_bucket(seconds)}"
        fields[name] = fields.get(name, 0) + 1
    fields["dur_sum_us"] = total_us
    return fields


def shop_app(release: anyio.Event) -> App:
    """Tasks whose jobs take a while (so leases show), and sometimes fail."""
    app = App()

    @app.task(max_attempts=3)
    async def charge(ctx: JobContext, order: str, amount: int) -> None:
        await ctx.progress(40)
        await ctx.append_log(f"charging {amount} for {order}")
        if order.endswith("7"):
            raise ValueError(f"card declined for {order}")
        with anyio.move_on_after(30):
            await release.wait()

    @app.task(max_attempts=1)
    async def refund(ctx: JobContext, order: str) -> None:
        raise RuntimeError(f"refund window closed for {order}")

    @app.task
    async def send_receipt(ctx: JobContext, order: str) -> None:
        return None

    return app
