"""Type-checked by tests/test_task_handles.py (mypy --strict), not run: each line marked
`# E: <code>` must be exactly that mypy error, and each `reveal_type` must reveal the type its
`# R: ` comment names. Excluded from the project's own mypy run ([tool.mypy] exclude)."""

from __future__ import annotations

from typing import reveal_type

from emq_worker import App, JobContext, Producer, SyncProducer

app = App()


@app.task(queue="orders", result_ttl_ms=60_000)
async def charge(ctx: JobContext, order_id: str, amount: int) -> dict[str, int]:
    return {"amount": amount}


@app.task
def receipt(ctx: JobContext, order_id: str) -> str:
    return order_id


async def producer_side(producer: Producer, sync: SyncProducer) -> None:
    job = await charge.enqueue(producer, order_id="A1", amount=1200)
    reveal_type(await job.result())  # R: dict[str, int]
    await charge.enqueue(producer, "A1", 1200)
    await charge.with_options(delay_ms=500, job_id="JOBaaaaaaaaaaa1").enqueue(
        producer, "A1", amount=1
    )
    await charge.enqueue(producer, order_id="A1", amont=1200)  # E: call-arg
    await charge.enqueue(producer, order_id="A1", amount="1200")  # E: arg-type
    await charge.enqueue(producer, order_id="A1")  # E: call-arg
    charge.with_options(delay=500)  # E: call-arg
    reveal_type(receipt.enqueue_sync(sync, order_id="A1").result())  # R: str
    receipt.enqueue_sync(sync, order_id=1)  # E: arg-type


async def handler_side(ctx: JobContext) -> None:
    reveal_type(await charge(ctx, "A1", 5))  # R: dict[str, int]
    reveal_type(receipt(ctx, "A1"))  # R: str
