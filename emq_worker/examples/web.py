"""A Starlette app that enqueues a job from a route and answers its result at the job's URL
(FastAPI takes the same lifespan and the same awaits; see the how-to "Enqueue from a web app").

    python -m pip install '.[dashboard]'        # from a checkout: Starlette and uvicorn
    emq-worker run --queue checkout --app emq_worker.examples.checkout:app
    EMQ_REDIS_URL=redis://localhost:6379/0 uvicorn --factory emq_worker.examples.web:create_app
    curl -i localhost:8000/orders -d '{"order_id": "A1", "amount": 1200}'  # 202, Location
    curl 'localhost:8000/orders/<job id>?wait=5'                           # the receipt

One Producer (one connection pool) serves every request: the lifespan opens it at start-up and
closes it at shutdown. `POST /orders` enqueues through the typed handle (mypy checks the
arguments against the handler), once per order id (`dedup_id`: a second POST names the same
job), and answers 202 with the job's URL. `GET /orders/<job id>` answers the receipt once the
worker has run the job, waiting up to `?wait=` seconds for it (blocked on the server, not a
poll loop), else 202 "pending"; a job that failed every attempt is "dead" with its error.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from emq_worker import (
    JobFailedError,
    JobIdError,
    Producer,
    ResultTimeoutError,
    ResultUnavailableError,
)
from emq_worker.examples.checkout import QUEUE, charge

ORDER_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""An order id, as a dedup id may hold it."""
MAX_WAIT_S: Final = 25.0
"""The longest `?wait=` (under the 30 s idle timeout of the usual proxy)."""


def parse_order(body: bytes) -> tuple[str, int]:
    """The order id and amount of a JSON body, or ValueError naming what is wrong."""
    try:
        order = json.loads(body or b"null")
    except ValueError as exc:
        raise ValueError(f"the body must be a JSON object: {exc}") from None
    if not isinstance(order, dict):
        raise ValueError(f"the body must be a JSON object; got {body[:60]!r}")
    order_id, amount = order.get("order_id"), order.get("amount")
    if not isinstance(order_id, str) or not ORDER_ID.fullmatch(order_id):
        raise ValueError(
            f"order_id must be 1 to 64 letters, digits, '.', '_' or '-'; got {order_id!r}"
        )
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise ValueError(f"amount must be a positive integer; got {amount!r}")
    return order_id, amount


def parse_wait(text: str) -> float:
    """`?wait=` in seconds, from 0 to MAX_WAIT_S, or ValueError naming the value."""
    try:
        wait = float(text)
    except ValueError:
        wait = math.nan
    if not 0 <= wait <= MAX_WAIT_S:  # (NaN fails both)
        raise ValueError(f"wait must be a number of seconds from 0 to {MAX_WAIT_S:g}; got {text!r}")
    return wait


def producer_of(request: Request) -> Producer:
    producer: Producer = request.app.state.producer
    return producer


async def place_order(request: Request) -> JSONResponse:
    try:
        order_id, amount = parse_order(await request.body())
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=422)
    queue: str = request.app.state.queue
    once = charge.with_options(queue=queue, dedup_id=f"order-{order_id}")
    job = await once.enqueue(producer_of(request), order_id=order_id, amount=amount)
    url = str(request.url_for("order", job_id=job.job_id))
    return JSONResponse(
        {"job_id": job.job_id, "duplicate": job.duplicate, "url": url},
        status_code=200 if job.duplicate else 202,
        headers={"Location": url},
    )


async def order(request: Request) -> JSONResponse:
    job_id: str = request.path_params["job_id"]
    try:
        wait = parse_wait(request.query_params.get("wait", "0"))
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=422)
    answer: dict[str, Any] = {"job_id": job_id}
    try:
        receipt = await producer_of(request).result(
            job_id, queue=request.app.state.queue, timeout=wait
        )
    except ResultTimeoutError:  # waiting, running, or waiting to be retried
        return JSONResponse(answer | {"status": "pending"}, status_code=202)
    except JobFailedError as exc:
        return JSONResponse(answer | {"status": "dead", "error": exc.last_error})
    except (ResultUnavailableError, JobIdError) as exc:
        return JSONResponse(answer | {"error": str(exc)}, status_code=404)
    return JSONResponse(answer | {"status": "completed", "receipt": receipt})


def create_app(redis_url: str | None = None, *, queue: str = QUEUE) -> Starlette:
    """The web app, on `redis_url` (default: EMQ_REDIS_URL, else redis://localhost:6379/0),
    enqueueing on `queue`."""
    url = redis_url or os.environ.get("EMQ_REDIS_URL", "redis://localhost:6379/0")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with Producer.from_url(url) as producer:
            await producer.client.ping()  # an unreachable server fails the start-up, not a request
            app.state.producer = producer
            yield

    app = Starlette(
        routes=[
            Route("/orders", place_order, methods=["POST"]),
            Route("/orders/{job_id}", order, methods=["GET"], name="order"),
        ],
        lifespan=lifespan,
    )
    app.state.queue = queue
    return app
