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


class HoldingApp:
    """One task, `hold`, that sets `started` and holds its job until `release` is set: a worker
    in-process holding a job (a lease renewed, a slot taken) for as long as a test needs."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.app = App()

        @self.app.task
        async def hold(ctx: JobContext) -> None:
            self.started.set()
            await self.release.wait()
