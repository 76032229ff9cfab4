"""A user's app, as the testing kit's user-style test sees it (tests/test_testing_kit.py)."""

from __future__ import annotations

from emq_worker import App, Exponential, JobContext

app = App()
ticks: list[int] = []


@app.task(queue="shop", result_ttl_ms=60_000)
async def charge(ctx: JobContext, order_id: str, amount: int) -> dict[str, int]:
    if amount <= 0:
        raise ValueError(f"declined: amount {amount} for {order_id}")
    return {order_id: amount}


@app.task(queue="shop", max_attempts=3, backoff=Exponential(base_ms=60_000, cap_ms=600_000))
async def flaky(ctx: JobContext, fail_times: int) -> int:
    """Fails its first `fail_times` attempts; its retries wait minutes (unless fast-forwarded)."""
    if ctx.attempt <= fail_times:
        raise RuntimeError(f"attempt {ctx.attempt} failed")
    return ctx.attempt


@app.task
async def tick(ctx: JobContext) -> None:
    ticks.append(ctx.attempt)
