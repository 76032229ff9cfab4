"""The emq-worker App the benchmark runs: no-op, 1 ms sleep, the realistic bodies (one INCR on
the body's own client, then optionally 1 ms of CPU; or one INCR through the worker's handler
client, `ctx.redis`), long hold and latency-probe tasks.

`emq-worker run --app bench.apps_emq:app --queue bench` runs the same tasks under the CLI (for
profiling a worker by hand, e.g. with py-spy); the bench itself builds one per run with its own
Tally through `make_app`.
"""

from __future__ import annotations

import anyio

from bench.runners.common import BODY_KEY, Body, Tally
from emq_worker import App, JobContext


def make_app(tally: Tally) -> App:
    app = App()

    @app.task
    async def noop(ctx: JobContext) -> None:
        tally.start()

    @app.task
    async def sleep1ms(ctx: JobContext) -> None:
        tally.start()
        await anyio.sleep(0.001)

    @app.task
    async def incr(ctx: JobContext) -> None:
        tally.start()
        await Body.incr()

    @app.task
    async def incr_handler(ctx: JobContext) -> None:
        tally.start()
        await ctx.redis.incr(BODY_KEY)

    @app.task
    async def incr_cpu1ms(ctx: JobContext) -> None:
        tally.start()
        await Body.incr()
        Body.burn_cpu()

    @app.task
    async def hold(ctx: JobContext, seconds: float) -> None:
        tally.start()
        await anyio.sleep(seconds)

    @app.task
    async def probe(ctx: JobContext, t: float) -> None:
        tally.probe(t)

    return app


app = make_app(Tally(n=0))
