"""The web example (emq_worker/examples/web.py) as a user runs it: its ASGI lifespan opens the
Producer, requests go through httpx's ASGI transport, and a real in-process worker (the testing
kit's run_until_idle, or a running worker for the blocking wait) runs the jobs on a real server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette

from emq_worker import Producer
from emq_worker.examples import checkout, web
from emq_worker.testing import expect_completed, expect_dead, outcome, run_until_idle
from tests.support.running import running_worker, worker_settings

BASE = "http://shop"


@asynccontextmanager
async def serving(redis_url: str, queue: str) -> AsyncIterator[httpx.AsyncClient]:
    """The example app on `queue`, its lifespan entered as a server enters it (httpx's ASGI
    transport only sends requests), and a client that talks to it."""
    app: Starlette = web.create_app(redis_url, queue=queue)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            yield client


async def place(client: httpx.AsyncClient, order_id: str, amount: int) -> str:
    placed = await client.post("/orders", json={"order_id": order_id, "amount": amount})
    assert placed.status_code == 202, placed.text
    job_id = placed.json()["job_id"]
    assert isinstance(job_id, str)
    url = f"{BASE}/orders/{job_id}"
    assert placed.json() == {"job_id": job_id, "duplicate": False, "url": url}
    assert placed.headers["location"] == url
    return job_id


async def test_an_order_is_enqueued_once_run_by_a_worker_and_its_receipt_polled(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async with serving(redis_url, queue_name) as http:
        job_id = await place(http, "A1", 1200)
        pending = await http.get(f"/orders/{job_id}")
        assert pending.status_code == 202
        assert pending.json() == {"job_id": job_id, "status": "pending"}
        again = await http.post("/orders", json={"order_id": "A1", "amount": 1200})
        assert again.status_code == 200, "the same order is the same job"
        assert (again.json()["job_id"], again.json()["duplicate"]) == (job_id, True)

        counters = await run_until_idle(checkout.app, queue_name, url=redis_url)
        assert counters.completed == 1

        done = await http.get(f"/orders/{job_id}")
        assert done.status_code == 200, done.text
        assert done.json() == {
            "job_id": job_id,
            "status": "completed",
            "receipt": {"order_id": "A1", "amount": 1200, "attempt": 1},
        }
    expect_completed(await outcome(Producer(client).queue(queue_name), job_id), attempts=1)


async def test_a_poll_with_wait_answers_as_soon_as_the_running_worker_completes_the_job(
    redis_url: str, queue_name: str
) -> None:
    async with serving(redis_url, queue_name) as http:
        job_id = await place(http, "A2", 5)
        async with running_worker(worker_settings(queue_name, redis_url), checkout.app):
            done = await http.get(f"/orders/{job_id}", params={"wait": "10"})
    assert done.status_code == 200, done.text
    assert done.json()["receipt"] == {"order_id": "A2", "amount": 5, "attempt": 1}


async def test_an_order_declined_on_every_attempt_is_dead_with_its_error(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async with serving(redis_url, queue_name) as http:
        job_id = await place(http, "B1", checkout.LIMIT + 1)
        counters = await run_until_idle(checkout.app, queue_name, url=redis_url)
        assert (counters.retried, counters.dead_lettered) == (2, 1)
        dead = await http.get(f"/orders/{job_id}")
    error = f"DeclinedError: order B1: {checkout.LIMIT + 1} is over the limit of {checkout.LIMIT}"
    assert dead.status_code == 200
    assert dead.json() == {"job_id": job_id, "status": "dead", "error": error}
    expect_dead(await outcome(Producer(client).queue(queue_name), job_id), attempts=3)


async def test_bad_input_is_refused_naming_the_value_and_nothing_is_enqueued(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    refusals = {
        b"": "the body must be a JSON object",
        b"[1]": "the body must be a JSON object; got b'[1]'",
        b'{"amount": 3}': "order_id must be 1 to 64 letters, digits, '.', '_' or '-'; got None",
        b'{"order_id": "A 1", "amount": 3}': "order_id must be 1 to 64 letters",
        b'{"order_id": "A1"}': "amount must be a positive integer; got None",
        b'{"order_id": "A1", "amount": "12"}': "amount must be a positive integer; got '12'",
        b'{"order_id": "A1", "amount": true}': "amount must be a positive integer; got True",
        b'{"order_id": "A1", "amount": 0}': "amount must be a positive integer; got 0",
    }
    async with serving(redis_url, queue_name) as http:
        for body, error in refusals.items():
            refused = await http.post("/orders", content=body)
            assert refused.status_code == 422, body
            assert refused.json()["error"].startswith(error), (body, refused.json())
        unknown = await http.get("/orders/JOB-nope")
        assert unknown.status_code == 404
        assert "JOB-nope" in unknown.json()["error"]
        for wait in ("abc", "-1", "26", "nan"):
            refused = await http.get("/orders/JOB-nope", params={"wait": wait})
            assert refused.status_code == 422, wait
            assert refused.json()["error"] == (
                f"wait must be a number of seconds from 0 to 25; got {wait!r}"
            )
    counts = await Producer(client).queue(queue_name).counts()
    assert (counts.pending, counts.active, counts.scheduled) == (0, 0, 0)
