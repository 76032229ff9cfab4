"""The example `orders` app: `emq-worker run --queue orders --app emq_worker.examples.orders:app`.

Enqueue work for it with
`emq-worker enqueue --queue orders charge '{"order_id": "A1", "amount": 1200}'`, or from Python
with the typed handle: `await charge.enqueue(producer, order_id="A1", amount=1200)`.
"""

from __future__ import annotations

import anyio

from emq_worker import App, JobContext
from emq_worker.retry import Exponential

app = App()


@app.task(
    queue="orders",
    max_attempts=5,
    backoff=Exponential(base_ms=500, cap_ms=30_000),
    timeout_ms=60_000,
)
async def charge(ctx: JobContext, order_id: str, amount: int) -> None:
    """Charge an order: a stand-in for a call to a payment provider."""
    if amount <= 0:
        raise ValueError(f"amount must be positive; got {amount}")
    await anyio.sleep(0.05)
    ctx.log.info("order_charged", order_id=order_id, amount=amount, attempt=ctx.attempt)


@app.task(queue="orders")
def send_receipt(ctx: JobContext, order_id: str, email: str) -> None:
    """A plain function: it runs in a worker thread, off the event loop."""
    ctx.log.info("receipt_sent", order_id=order_id, email=email)
