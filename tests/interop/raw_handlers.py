"""Handlers that `--raw-task QUEUE=tests.interop.raw_handlers:<name>` binds in the CLI tests."""

from __future__ import annotations

from emq_worker import JobContext

seen: list[bytes] = []
"""The payloads `record` ran with (the CLI runs the worker in this process)."""


async def record(ctx: JobContext) -> None:
    seen.append(ctx.payload)


NOT_A_FUNCTION = 42
