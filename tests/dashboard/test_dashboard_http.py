"""The dashboard over HTTP: every endpoint, against the ASGI app and the real test Redis.

State is built through the Queue API (claim, renew, complete, fail, reap) so each test knows
exactly which leases exist; the pages are read with httpx over an ASGI transport.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner
from redis.asyncio import Redis
from ruamel.yaml import YAML

from emq_worker.cli.main import main
from emq_worker.dashboard.app import create_app
from emq_worker.dashboard.settings import Bind, DashboardSettings, parse_bind
from emq_worker.dashboard.timeline import LeaseTracker
from emq_worker.errors import ConfigError
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION, JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, text
from emq_worker.protocol.scripts import Scripts
from emq_worker.protocol.values import HeldLease
from emq_worker.valkey.connection import connect
from tests.support.processes import EMQ_WORKER
from tests.support.wait import eventually

BASE = "http://dash.test"
LEASE_MS = 30_000
TOKEN = "s3cret-token-for-tests"
SCRIPT = "<script>window.pwned = 1</script>"
IMG = '<img src=x onerror="window.pwned = 2">'


@asynccontextmanager
async def browsing(
    client: Redis, redis_url: str, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(DashboardSettings(redis_url=redis_url, **settings), client)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        yield http


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def enqueue(queue: Queue, **kwargs: Any) -> JobId:
    return (await Producer(queue.client).enqueue(queue.name, "charge", kwargs)).job_id


async def claim(queue: Queue, lease_ms: int = LEASE_MS) -> ClaimedJob:
    claimed = await queue.claim(1, lease_ms)
    assert len(claimed.jobs) == 1, claimed
    return claimed.jobs[0]


def lease_of(job: ClaimedJob) -> HeldLease:
    return HeldLease(job.id, job.token, job.nonce)


async def kill(queue: Queue, error: str = "card declined", **kwargs: Any) -> JobId:
    await enqueue(queue, **kwargs)
    job = await claim(queue)
    await queue.fail(lease_of(job), 1000, delay_ms=0, max_attempts=0, error=error)
    return job.id


@pytest.fixture
def queue(client: Redis, queue_name: str) -> Queue:
    return Queue(client, Scripts(), queue_name)


async def server_now_ms(client: Redis) -> int:
    sec, usec = await client.time()
    return int(sec) * 1000 + int(usec) // 1000


async def leases(http: httpx.AsyncClient, queue: Queue) -> dict[str, Any]:
    response = await http.get(f"/api/queues/{queue.name}/leases")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


# --- queues -------------------------------------------------------------------------------


async def test_every_queue_is_listed_with_its_depths_and_counters(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await enqueue(queue)
    await queue.complete(lease_of(await claim(queue)), 1000)
    await kill(queue)
    await enqueue(queue)
    await claim(queue)
    await enqueue(queue)
    await enqueue(queue)
    async with browsing(client, redis_url) as http:
        api = (await http.get("/api/queues")).json()
        page = await http.get("/")
        fragment = await http.get("/fragments/queues")
    mine = next(q for q in api["queues"] if q["queue"] == queue.name)
    assert mine == {
        "queue": queue.name,
        "paused": False,
        "pending": 2,
        "active": 1,
        "scheduled": 0,
        "dead": 1,
        "completed": 1,
        "dead_lettered": 1,
        "failed": 1,
    }
    for html in (page.text, fragment.text):
        row = re.search(rf'<tr data-queue="{re.escape(queue.name)}">(.*?)</tr>', html, re.S)
        assert row, html
        assert re.search(r'class="num pending">2<', row.group(1))
        assert re.search(r'class="num dead">1<', row.group(1))
        assert re.search(r'class="num completed">1<', row.group(1))
    assert 'data-poll="/fragments/queues"' in page.text  # the page refreshes itself


async def test_a_queue_with_a_wrong_typed_key_shows_why_and_the_others_still_list(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await enqueue(queue)
    broken = f"{queue.name}-broken"
    await client.set(f"emq:{{{broken}}}:pending", "not a sorted set")
    try:
        async with browsing(client, redis_url) as http:
            api = await http.get("/api/queues")
            page = await http.get("/")
    finally:
        await client.delete(f"emq:{{{broken}}}:pending")
    assert api.status_code == 200
    listed = {q["queue"]: q for q in api.json()["queues"]}
    assert listed[queue.name]["pending"] == 1
    assert "WRONGTYPE" in listed[broken]["error"]
    assert page.status_code == 200
    row = re.search(rf'<tr data-queue="{re.escape(broken)}">(.*?)</tr>', page.text, re.S)
    assert row, page.text
    assert "cannot read its counts: WRONGTYPE" in row.group(1)


async def test_an_unknown_queue_is_404_and_a_malformed_name_400(
    client: Redis, redis_url: str, queue_name: str
) -> None:
    async with browsing(client, redis_url) as http:
        unknown = await http.get(f"/queues/{queue_name}")
        api = await http.get(f"/api/queues/{queue_name}/leases")
        bad = await http.get("/queues/bad%20name!")
    assert unknown.status_code == 404
    assert f"no such queue &#39;{queue_name}&#39;" in unknown.text
    assert api.status_code == 404
    assert queue_name in api.text
    assert bad.status_code == 400
    assert "queue name must match" in bad.text


# --- the lease timeline -------------------------------------------------------------------


async def test_a_held_lease_shows_its_deadline_on_the_server_clock(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job = await claim_after_enqueue(queue)
    deadline = int(await client.zscore(queue.keys.active, job.id) or 0)
    before = await server_now_ms(client)
    async with browsing(client, redis_url) as http:
        timeline = await leases(http, queue)
        page = await http.get(f"/queues/{queue.name}")
        fragment = await http.get(f"/fragments/queues/{queue.name}")
    after = await server_now_ms(client)
    assert before <= timeline["now_ms"] <= after
    assert timeline["held"] == 1
    [lease] = timeline["leases"]
    assert lease["job_id"] == job.id
    assert lease["deadline_ms"] == deadline
    assert lease["left_ms"] == deadline - timeline["now_ms"]
    assert lease["status"] == "held"
    assert lease["attempts"] == 1
    for html in (page.text, fragment.text):
        assert f'data-job="{job.id}" data-status="held"' in html
        assert f'href="/queues/{queue.name}/jobs/{job.id}"' in html
    assert f'data-poll="/fragments/queues/{queue.name}"' in page.text


async def claim_after_enqueue(queue: Queue, lease_ms: int = LEASE_MS) -> ClaimedJob:
    await enqueue(queue)
    return await claim(queue, lease_ms)


async def test_a_deadline_that_moved_forward_is_a_renewal(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job = await claim_after_enqueue(queue)
    async with browsing(client, redis_url) as http:
        first = (await leases(http, queue))["leases"][0]
        assert first["renewals"] == []
        first_deadline = int(first["deadline_ms"])

        async def renewed() -> bool:
            await queue.renew([lease_of(job)], LEASE_MS)
            return int(await client.zscore(queue.keys.active, job.id) or 0) > first_deadline

        await eventually(renewed, what="the renew to move the deadline (server clock ticks)")
        second = (await leases(http, queue))["leases"][0]
        page = await http.get(f"/queues/{queue.name}")
    assert second["deadline_ms"] > first_deadline
    assert len(second["renewals"]) == 1
    row = re.search(rf'data-job="{job.id}".*?</tr>', page.text, re.S)
    assert row
    assert row.group(0).count('class="renewal"') == 1  # one tick on the lane


async def test_a_lease_left_to_lapse_goes_at_risk_then_expired_then_reaped(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job = await claim_after_enqueue(queue, lease_ms=1500)
    async with browsing(client, redis_url) as http:
        assert (await leases(http, queue))["leases"][0]["status"] == "held"

        async def status() -> str:
            return str((await leases(http, queue))["leases"][0]["status"])

        await eventually(lambda: _is(status, "at-risk"), what="the lease to be at risk")
        await eventually(lambda: _is(status, "expired"), what="the lease to expire")
        page = await http.get(f"/queues/{queue.name}")
        assert f'data-job="{job.id}" data-status="expired"' in page.text
        reaped = await queue.reap(100, 3)
        assert reaped.returned == 1
        timeline = await leases(http, queue)
        page = await http.get(f"/queues/{queue.name}")
    assert timeline["leases"] == []
    [ended] = timeline["ended"]
    assert (ended["job_id"], ended["ended"]) == (job.id, "reaped")
    assert f'data-job="{job.id}" data-status="reaped"' in page.text


async def _is(probe: Any, wanted: str) -> bool:
    return bool(await probe() == wanted)


async def test_a_lease_reaped_and_claimed_again_between_samples_is_seen_reaped(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job = await claim_after_enqueue(queue, lease_ms=200)
    async with browsing(client, redis_url) as http:
        await leases(http, queue)

        async def reaped() -> bool:
            return (await queue.reap(100, 3)).returned == 1

        await eventually(reaped, what="the short lease to be reaped")
        again = await claim(queue)
        timeline = await leases(http, queue)
    assert again.id == job.id
    assert [(lease["job_id"], lease["attempts"]) for lease in timeline["leases"]] == [(job.id, 2)]
    assert [(e["job_id"], e["attempts"], e["ended"]) for e in timeline["ended"]] == [
        (job.id, 1, "reaped")
    ]


async def test_settled_leases_end_completed_or_dead_not_reaped(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    done = await claim_after_enqueue(queue)
    dies = await claim_after_enqueue(queue)
    async with browsing(client, redis_url) as http:
        assert (await leases(http, queue))["held"] == 2
        await queue.complete(lease_of(done), 60_000)
        await queue.fail(lease_of(dies), 60_000, delay_ms=0, max_attempts=0, error="no")
        timeline = await leases(http, queue)
    ended = {e["job_id"]: e["ended"] for e in timeline["ended"]}
    assert ended == {done.id: "completed", dies.id: "dead"}


# --- a job --------------------------------------------------------------------------------


async def test_a_job_page_shows_row_progress_logs_and_last_error_escaped(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job_id = await kill(queue, error=f"ValueError: {IMG}", note=SCRIPT)
    row = queue.keys.job(job_id)
    await client.hset(row, "progress", '{"done": 3, "of": 4}')  # as ctx.progress writes it
    await client.rpush(queue.keys.logs(job_id), "step 1 ok", f"step 2 {SCRIPT}")
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/jobs/{job_id}")
        fragment = await http.get(f"/fragments/queues/{queue.name}/jobs/{job_id}")
        api = (await http.get(f"/api/queues/{queue.name}/jobs/{job_id}")).json()
    assert page.status_code == 200
    for html in (page.text, fragment.text):
        assert SCRIPT not in html
        assert IMG not in html
        assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in html
        assert "ValueError: &lt;img src=x onerror=&#34;window.pwned = 2&#34;&gt;" in html
        assert "{&#34;done&#34;: 3, &#34;of&#34;: 4}" in html
        assert "step 1 ok" in html
        assert re.search(r'class="where">dead<', html)
    assert html.count("<script") == 0
    assert page.text.count("<script") == 1  # only our own, from /static
    assert api["progress"] == '{"done": 3, "of": 4}'
    assert api["logs"] == ["step 1 ok", f"step 2 {SCRIPT}"]
    assert api["last_error"] == f"ValueError: {IMG}"
    assert api["where"] == "dead"


async def test_an_absent_job_is_404_and_a_malformed_id_400(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job_id = await enqueue(queue)
    await queue.complete(lease_of(await claim(queue)), 1000)
    async with browsing(client, redis_url) as http:
        gone = await http.get(f"/queues/{queue.name}/jobs/{job_id}")
        bad = await http.get(f"/queues/{queue.name}/jobs/not-a-job")
    assert gone.status_code == 404
    assert f"no job {job_id} in queue" in gone.text
    assert bad.status_code == 400


# --- dead letter and actions --------------------------------------------------------------


async def test_dead_letter_lists_jobs_with_their_errors_escaped(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    first = await kill(queue, error=IMG)
    second = await kill(queue, error="timeout")
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/dead")
        api = (await http.get(f"/api/queues/{queue.name}/dead?limit=1")).json()
        bad = await http.get(f"/queues/{queue.name}/dead?limit=0")
    assert page.status_code == 200
    assert page.text.index(first) < page.text.index(second)
    assert IMG not in page.text
    assert "&lt;img src=x" in page.text
    assert api == {
        "queue": queue.name,
        "total": 2,
        "jobs": [{"id": first, "attempts": 1, "last_error": IMG}],
    }
    assert bad.status_code == 400


async def test_read_only_by_default_offers_no_forms_and_refuses_posts(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    dead = await kill(queue)
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/dead")
        queue_page = await http.get(f"/queues/{queue.name}")
        refused = [
            await http.post(path, data={"job_id": dead, "csrf": "0" * 64})
            for path in (
                f"/queues/{queue.name}/dead/retry",
                f"/queues/{queue.name}/dead/purge",
                f"/queues/{queue.name}/pause",
                f"/queues/{queue.name}/resume",
                f"/queues/{queue.name}/jobs/{dead}/cancel",
            )
        ]
    for html in (page.text, queue_page.text):
        assert 'method="post"' not in html  # the one form left is the search (a GET)
        assert html.count("<form") == 1
        assert '<form class="search" method="get" action="/search"' in html
    assert "read-only" in page.text
    assert [r.status_code for r in refused] == [403] * 5
    assert "--allow-actions" in refused[0].text
    assert await queue.state_of(dead) == "dead"
    assert not await client.hexists(queue.keys.meta, "paused")


async def test_retry_one_then_all_from_the_dead_letter_page(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    one, two, three = [await kill(queue) for _ in range(3)]
    async with browsing(client, redis_url, allow_actions=True) as http:
        page = await http.get(f"/queues/{queue.name}/dead")
        token = csrf_of(page.text)
        retried = await http.post(
            f"/queues/{queue.name}/dead/retry", data={"job_id": one, "csrf": token}
        )
        assert retried.status_code == 303
        assert retried.headers["location"] == f"/queues/{queue.name}/dead"
        after = await http.get(retried.headers["location"])
        assert f"retried 1 dead job(s) in queue &#39;{queue.name}&#39;" in after.text
        assert one not in after.text
        assert two in after.text
        assert await queue.state_of(one) == "pending"
        again = await http.get(f"/queues/{queue.name}/dead")
        assert "retried" not in again.text  # the message is shown once
        every = await http.post(
            f"/queues/{queue.name}/dead/retry", data={"all": "1", "csrf": token}
        )
    assert every.status_code == 303
    assert [await queue.state_of(j) for j in (one, two, three)] == ["pending"] * 3


async def test_purge_asks_for_confirmation_first(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    kept, purged = await kill(queue), await kill(queue)
    async with browsing(client, redis_url, allow_actions=True) as http:
        token = csrf_of((await http.get(f"/queues/{queue.name}/dead")).text)
        asked = await http.post(
            f"/queues/{queue.name}/dead/purge", data={"job_id": purged, "csrf": token}
        )
        assert asked.status_code == 200
        assert "Purge 1 dead job(s)" in asked.text
        assert 'name="confirmed" value="yes"' in asked.text
        assert await queue.state_of(purged) == "dead"
        done = await http.post(
            f"/queues/{queue.name}/dead/purge",
            data={"job_id": purged, "confirmed": "yes", "csrf": csrf_of(asked.text)},
        )
        assert done.status_code == 303
        assert await queue.state_of(purged) == "absent"
        assert await queue.state_of(kept) == "dead"
        everything = await http.post(
            f"/queues/{queue.name}/dead/purge",
            data={"all": "1", "confirmed": "yes", "csrf": token},
        )
        neither = await http.post(f"/queues/{queue.name}/dead/purge", data={"csrf": token})
    assert everything.status_code == 303
    assert await queue.state_of(kept) == "absent"
    assert neither.status_code == 400
    assert "no dead job named" in neither.text


async def test_pause_and_resume_a_queue(client: Redis, redis_url: str, queue: Queue) -> None:
    await enqueue(queue)
    async with browsing(client, redis_url, allow_actions=True) as http:
        page = await http.get(f"/queues/{queue.name}")
        assert 'id="toggle-pause">Pause<' in page.text
        paused = await http.post(f"/queues/{queue.name}/pause", data={"csrf": csrf_of(page.text)})
        assert paused.status_code == 303
        assert await client.hexists(queue.keys.meta, "paused")
        page = await http.get(f"/queues/{queue.name}")
        assert 'id="toggle-pause">Resume<' in page.text
        assert "paused: workers stop claiming" in page.text
        assert (await queue.claim(1, LEASE_MS)).paused
        resumed = await http.post(f"/queues/{queue.name}/resume", data={"csrf": csrf_of(page.text)})
    assert resumed.status_code == 303
    assert not await client.hexists(queue.keys.meta, "paused")


async def test_cancel_asks_the_holder_to_stop_and_refuses_a_job_not_running(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    running = await claim_after_enqueue(queue)
    waiting = await enqueue(queue)
    async with browsing(client, redis_url, allow_actions=True) as http:
        page = await http.get(f"/queues/{queue.name}/jobs/{running.id}")
        assert 'id="cancel"' in page.text
        token = csrf_of(page.text)
        cancelled = await http.post(
            f"/queues/{queue.name}/jobs/{running.id}/cancel", data={"csrf": token}
        )
        refused = await http.post(
            f"/queues/{queue.name}/jobs/{waiting}/cancel", data={"csrf": token}
        )
        waiting_page = await http.get(f"/queues/{queue.name}/jobs/{waiting}")
    assert cancelled.status_code == 303
    assert await client.sismember(queue.keys.cancel, running.id)
    assert refused.status_code == 409
    assert "is not running (pending)" in refused.text
    assert 'id="cancel"' not in waiting_page.text


# --- CSRF, origin, token --------------------------------------------------------------------


async def test_a_post_without_our_csrf_token_or_from_another_origin_is_refused(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    dead = await kill(queue)
    path = f"/queues/{queue.name}/dead/retry"
    async with browsing(client, redis_url, allow_actions=True) as http:
        token = csrf_of((await http.get(f"/queues/{queue.name}/dead")).text)
        missing = await http.post(path, data={"job_id": dead})
        forged = await http.post(path, data={"job_id": dead, "csrf": "0" * 64})
        foreign = await http.post(
            path,
            data={"job_id": dead, "csrf": token},
            headers={"origin": "http://evil.example"},
        )
        cross_site = await http.post(
            path, data={"job_id": dead, "csrf": token}, headers={"sec-fetch-site": "cross-site"}
        )
        http.cookies.clear()  # another browser: its cookie does not match our page's token
        other = await http.post(path, data={"job_id": dead, "csrf": token})
        assert [r.status_code for r in (missing, forged, foreign, cross_site, other)] == [403] * 5
        assert "CSRF" in missing.text
        assert "evil.example" in foreign.text
        assert await queue.state_of(dead) == "dead"
        token = csrf_of((await http.get(f"/queues/{queue.name}/dead")).text)
        same = await http.post(path, data={"job_id": dead, "csrf": token}, headers={"origin": BASE})
    assert same.status_code == 303
    assert await queue.state_of(dead) == "pending"


async def test_with_a_token_every_page_asks_for_it(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await enqueue(queue)
    async with browsing(client, redis_url, token=TOKEN) as http:
        api = await http.get("/api/queues")
        page = await http.get("/", headers={"accept": "text/html"})
        bearer = await http.get("/api/queues", headers={"authorization": f"Bearer {TOKEN}"})
        wrong_bearer = await http.get("/api/queues", headers={"authorization": "Bearer nope"})
        form = await http.get("/login")
        static = await http.get("/static/dashboard.js")
        wrong = await http.post("/login", data={"token": "guess", "csrf": csrf_of(form.text)})
        right = await http.post("/login", data={"token": TOKEN, "csrf": csrf_of(form.text)})
        after = await http.get("/api/queues")
    assert api.status_code == 401
    assert (page.status_code, page.headers["location"]) == (303, "/login")
    assert bearer.status_code == 200
    assert wrong_bearer.status_code == 401
    assert form.status_code == 200
    assert 'name="token"' in form.text
    assert static.status_code == 200
    assert wrong.status_code == 401
    assert "not the token" in wrong.text
    assert right.status_code == 303
    assert after.status_code == 200
    assert queue.name in after.text


async def test_every_response_carries_a_strict_content_security_policy(
    client: Redis, redis_url: str
) -> None:
    async with browsing(client, redis_url) as http:
        for path in ("/", "/api/queues", "/static/dashboard.css", "/queues/nope"):
            response = await http.get(path)
            policy = response.headers["content-security-policy"]
            assert "script-src 'self'" in policy
            assert "frame-ancestors 'none'" in policy
            assert response.headers["x-content-type-options"] == "nosniff"


# --- settings and the command -------------------------------------------------------------


def test_actions_beyond_loopback_need_a_token(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="EMQ_DASHBOARD_TOKEN"):
        DashboardSettings(redis_url, bind=Bind("0.0.0.0", 8080), allow_actions=True)
    DashboardSettings(redis_url, bind=Bind("0.0.0.0", 8080))  # read-only is fine
    DashboardSettings(redis_url, bind=Bind("::1", 8080), allow_actions=True)
    DashboardSettings(redis_url, bind=Bind("0.0.0.0", 8080), allow_actions=True, token=TOKEN)
    with pytest.raises(ConfigError, match="at least 16 characters"):
        DashboardSettings(redis_url, token="short")


@pytest.mark.parametrize(
    ("value", "bind"),
    [
        ("127.0.0.1:8080", Bind("127.0.0.1", 8080)),
        ("[::1]:0", Bind("::1", 0)),
        ("0.0.0.0:9000", Bind("0.0.0.0", 9000)),
    ],
)
def test_bind_parses_host_and_port(value: str, bind: Bind) -> None:
    assert parse_bind(value) == bind


@pytest.mark.parametrize("value", ["8080", "host:", "host:http", ":8080", "h:70000"])
def test_a_malformed_bind_is_named(value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(repr(value))):
        parse_bind(value)


def test_the_command_refuses_actions_beyond_loopback_without_a_token(redis_url: str) -> None:
    result = CliRunner().invoke(
        main,
        ["dashboard", "--redis-url", redis_url, "--bind", "0.0.0.0:8080", "--allow-actions"],
        env={"EMQ_DASHBOARD_TOKEN": ""},
    )
    assert result.exit_code == 2
    assert "needs a token: set EMQ_DASHBOARD_TOKEN" in result.output


def test_the_command_without_the_extra_says_which_to_install(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "starlette", None)  # import starlette now fails
    result = CliRunner().invoke(main, ["dashboard", "--redis-url", redis_url])
    assert result.exit_code == 2
    assert "python -m pip install -e '" in result.output  # the checkout it was installed from
    assert "[dashboard]'" in result.output


def test_the_worker_command_does_not_import_starlette() -> None:
    probe = "import sys, emq_worker.cli.main; print('starlette' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_healthz_answers_without_the_token_and_names_nothing(
    client: Redis, redis_url: str
) -> None:
    async with browsing(client, redis_url, token=TOKEN) as http:
        response = await http.get("/healthz")
    assert response.status_code == 200
    assert response.text == "ok\n"


def test_the_compose_dashboard_is_read_only_and_published_on_loopback_only(
    repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose = YAML(typ="safe").load(repo_root / "deploy" / "compose" / "docker-compose.yml")
    service = compose["services"]["dashboard"]
    for name, value in service["environment"].items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("EMQ_DASHBOARD_ALLOW_ACTIONS", raising=False)
    monkeypatch.delenv("EMQ_DASHBOARD_TOKEN", raising=False)
    [command, *args] = service["command"]
    with main.commands[command].make_context(command, args) as ctx:
        params = ctx.params
    settings = DashboardSettings(
        params["redis_url"].url,
        bind=parse_bind(params["bind"]),
        allow_actions=params["allow_actions"],
    )
    assert not settings.allow_actions
    port = settings.bind.port
    assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert f"127.0.0.1:{port}/healthz" in " ".join(service["healthcheck"]["test"])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_the_command_serves_the_dashboard_until_terminated(
    redis_url: str, queue: Queue, tmp_path: Path
) -> None:
    await enqueue(queue)
    port = free_port()
    env = {**os.environ, "EMQ_DASHBOARD_BIND": f"127.0.0.1:{port}", "EMQ_REDIS_URL": redis_url}
    env.pop("EMQ_DASHBOARD_TOKEN", None)
    log = tmp_path / "dashboard.log"
    with log.open("wb") as sink:
        process = await anyio.open_process(
            [str(EMQ_WORKER), "dashboard"], env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def healthy() -> bool:
                assert process.returncode is None, log.read_text()
                try:
                    return (await http.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(healthy, timeout=30, what="`emq-worker dashboard` to answer")
            page = await http.get(f"/queues/{queue.name}")
            css = await http.get("/static/dashboard.css")
    finally:
        process.terminate()
        with anyio.fail_after(30):
            await process.wait()
    assert page.status_code == 200
    assert f"Queue {queue.name}" in page.text
    assert css.status_code == 200
    output = log.read_text()
    # uvicorn shuts down gracefully, then re-raises the SIGTERM it caught (exit by that signal).
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert "Traceback" not in output


async def test_a_lease_renewed_past_the_leases_shown_is_not_taken_for_ended(
    client: Redis, queue: Queue
) -> None:
    first, second = await claim_after_enqueue(queue), await claim_after_enqueue(queue)
    tracker = LeaseTracker(client, shown=1)  # a sample reads only the earliest deadline
    assert [lease.job_id for lease in (await tracker.sample(queue.name)).leases] == [first.id]

    async def first_is_last() -> bool:
        await queue.renew([lease_of(first)], LEASE_MS)
        order = await client.zrange(queue.keys.active, 0, -1)
        return [text(m) for m in order] == [second.id, first.id]

    await eventually(first_is_last, what="the renewal to move the first lease past the second")
    timeline = await tracker.sample(queue.name)
    assert [lease.job_id for lease in timeline.leases] == [second.id]
    assert timeline.held == 2
    assert timeline.ended == []


async def test_a_form_not_url_encoded_or_too_large_is_refused(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    dead = await kill(queue)
    path = f"/queues/{queue.name}/dead/retry"
    async with browsing(client, redis_url, allow_actions=True) as http:
        token = csrf_of((await http.get(f"/queues/{queue.name}/dead")).text)
        as_json = await http.post(path, json={"job_id": dead, "csrf": token})
        huge = await http.post(path, data={"job_id": dead, "csrf": token, "pad": "x" * 70_000})
    assert as_json.status_code == 400
    assert "application/x-www-form-urlencoded" in as_json.text
    assert huge.status_code == 400
    assert "form larger than" in huge.text
    assert await queue.state_of(dead) == "dead"


async def test_an_unreachable_redis_is_a_503_naming_it_without_its_password() -> None:
    url = "redis://:hunter2@127.0.0.1:1/0"
    unreachable = connect(url, DEFAULT_WIRE_VERSION)
    try:
        async with browsing(unreachable, url) as http:
            page = await http.get("/")
            health = await http.get("/healthz")
    finally:
        await unreachable.aclose()
    assert page.status_code == 503
    assert "redis at redis://:***@127.0.0.1:1/0" in page.text
    assert "hunter2" not in page.text
    assert health.status_code == 503
