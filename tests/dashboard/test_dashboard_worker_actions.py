"""Quiet and Stop on the workers page, over HTTP: each writes the worker's control key only
with actions on, our CSRF token, our origin and (when the dashboard has one) the login token;
the worker (in-process here; tests/test_worker_control.py runs real processes) honours it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from redis.asyncio import Redis

from emq_worker import App, Worker
from emq_worker.protocol.keys import worker_entry_key
from emq_worker.runtime.presence import live_workers
from tests.dashboard.test_dashboard_http import TOKEN, browsing, csrf_of
from tests.support.running import running_worker, worker_settings
from tests.support.wait import eventually, until

PATHS = ("/workers/quiet", "/workers/stop")


async def live_id(client: Redis, queue: str) -> str:
    found = await eventually(lambda: live_workers(client, queue), what="the worker's entry")
    return str(found[0]["id"])


@asynccontextmanager
async def actions_beside_a_worker(
    client: Redis, redis_url: str, queue: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Worker, str]]:
    """The dashboard with actions on, and a live worker on `queue` (whose row carries forms,
    so the workers page has a CSRF token): the client, the worker and its id."""
    async with (
        browsing(client, redis_url, allow_actions=True) as http,
        running_worker(worker_settings(queue, redis_url), App()) as worker,
    ):
        yield http, worker, await live_id(client, queue)


async def told(client: Redis, worker_id: str) -> str:
    """What the worker's entry says it was asked: the request itself until the worker's next
    refresh reads it, then what the worker honours (`control`)."""
    raw = await client.get(worker_entry_key(worker_id))
    fields = json.loads(raw) if raw else {}
    return str(fields.get("asked") or fields.get("control") or "")


async def test_quiet_then_stop_from_the_workers_page(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async with actions_beside_a_worker(client, redis_url, queue_name) as (http, worker, worker_id):
        page = await http.get("/workers")
        assert f'name="worker" value="{worker_id}"' in page.text
        quieted = await http.post(
            "/workers/quiet", data={"worker": worker_id, "csrf": csrf_of(page.text)}
        )
        assert quieted.status_code == 303
        assert await told(client, worker_id) == "quiet"
        flashed = (await http.get("/workers")).text  # the page the redirect leads to
        assert f"asked worker {worker_id} to quiet" in flashed

        async def quiet_shown() -> bool:
            html = (await http.get("/workers")).text
            return '<span class="control">quiet</span>' in html and "/workers/quiet" not in html

        await eventually(quiet_shown, what="the workers page to show it quiet")
        page = await http.get("/workers")
        stopped = await http.post(
            "/workers/stop", data={"worker": worker_id, "csrf": csrf_of(page.text)}
        )
        assert stopped.status_code == 303
        await until(lambda: worker.stop.requested, what="the worker to stop")
        assert worker.stop.hand_back


async def test_an_unknown_or_malformed_worker_is_refused(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async with actions_beside_a_worker(client, redis_url, queue_name) as (http, _, _):
        token = csrf_of((await http.get("/workers")).text)
        unknown = await http.post("/workers/stop", data={"worker": "gone:1:ab", "csrf": token})
        spaced = await http.post("/workers/stop", data={"worker": "a b", "csrf": token})
    assert unknown.status_code == 404
    assert "no live worker &#39;gone:1:ab&#39;" in unknown.text
    assert spaced.status_code == 400
    assert not await client.exists(worker_entry_key("gone:1:ab"))


@pytest.mark.parametrize("path", PATHS)
async def test_quiet_and_stop_are_refused_without_actions_token_or_csrf(
    client: Redis, redis_url: str, queue_name: str, path: str
) -> None:
    settings = worker_settings(queue_name, redis_url)
    async with running_worker(settings, App()):
        worker_id = await live_id(client, queue_name)
        async with browsing(client, redis_url) as http:  # read-only: no forms, no posts
            page = await http.get("/workers")
            read_only = await http.post(path, data={"worker": worker_id, "csrf": "0" * 64})
        assert 'method="post"' not in page.text
        async with browsing(client, redis_url, allow_actions=True) as http:
            forged = await http.post(path, data={"worker": worker_id, "csrf": "0" * 64})
            token = csrf_of((await http.get("/workers")).text)
            foreign = await http.post(
                path, data={"worker": worker_id, "csrf": token}, headers={"origin": "http://evil"}
            )
        async with browsing(client, redis_url, allow_actions=True, token=TOKEN) as http:
            no_login = await http.post(path, data={"worker": worker_id, "csrf": token})
        assert [r.status_code for r in (read_only, forged, foreign)] == [403] * 3
        assert no_login.status_code == 401
        assert await told(client, worker_id) == ""
