"""The demo's handlers: `emq-worker run --app emq_worker.cli.demo.app:demo_app`."""

from __future__ import annotations

import anyio

from emq_worker.jobs.context import JobContext
from emq_worker.jobs.tasks import App

demo_app = App()


@demo_app.task(max_attempts=5)
async def sleep(ctx: JobContext, ms: int) -> None:
    """Hold the job for `ms` milliseconds: a stand-in for slow work."""
    ctx.log.info("demo_job_started", job_id=ctx.job_id, attempts=ctx.token)
    await anyio.sleep(ms / 1000)
    ctx.log.info("demo_job_finished", job_id=ctx.job_id, attempts=ctx.token)
