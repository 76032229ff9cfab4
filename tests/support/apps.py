"""Apps the in-process tests share."""

from __future__ import annotations

import anyio

from emq_worker import App, JobContext


def cancellable_app(events: list[str]) -> App:
    """One task, `long_job`, that runs 30 s and records "started", then "cancelled" (or
    "finished"), so a test can see a lost lease or a cancel stop it."""
    app = App()

    @app.task
    async def long_job(ctx: JobContext) -> None:
        events.append("started")
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            events.append("cancelled")
            raise
        events.append("finished")

    return app
