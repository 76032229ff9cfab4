"""The tasks of the web example (emq_worker/examples/web.py), apart from the web app, so the
worker imports no web framework: `emq-worker run --queue checkout --app
emq_worker.examples.checkout:app`.
"""

from __future__ import annotations

from typing import Final, TypedDict

from emq_worker import App, JobContext

QUEUE: Final = "checkout"
LIMIT: Final = 100_000
"""The largest amount the stand-in payment provider accepts."""

app = App()


class Receipt(TypedDict):
    order_id: str
    amount: int
    attempt: int


class DeclinedError(Exception):
    """The payment provider refused the charge: retried, then dead after the last attempt."""


@app.task(queue=QUEUE, max_attempts=3, result_ttl_ms=3_600_000)
async def charge(ctx: JobContext, order_id: str, amount: int) -> Receipt:
    """Charge an order (a stand-in for a payment provider's API); the receipt is its result,
    kept an hour for the web app to answer with."""
    if amount > LIMIT:
        raise DeclinedError(f"order {order_id}: {amount} is over the limit of {LIMIT}")
    return Receipt(order_id=order_id, amount=amount, attempt=ctx.attempt)
