"""Promote a scheduled job now and delete a job in any state but held, from its page, over HTTP:
each asks first (nothing changes before the yes), runs a script that keeps the protocol (promote
as at its due time, with a wake; remove refuses a held job: EMQLOCK), and is refused without
actions, our CSRF token or our origin."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from emq_worker.jobs.producer import Producer
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts
from tests.dashboard.test_dashboard_http import BASE, browsing, claim, csrf_of, enqueue, kill

HOUR_MS = 3_600_000


@pytest.fixture
def queue(client: Redis, queue_name: str) -> Queue:
    return Queue(client, Scripts(), queue_name)


async def scheduled(queue: Queue, group: str | None = None) -> JobId:
    """A job due in an hour (in `group`'s lane once due, when given)."""
    producer = Producer(queue.client)
    if group is None:
        return (await producer.enqueue(queue.name, "charge", {}, delay_ms=HOUR_MS)).job_id
    enqueued = await producer.enqueue(queue.name, "charge", {}, delay_ms=HOUR_MS, group=group)
    return enqueued.job_id


async def test_promote_asks_first_then_makes_the_job_pending_with_a_wake(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job_id = await scheduled(queue)
    async with browsing(client, redis_url, allow_actions=True) as http:
        page_path = f"/queues/{queue.name}/jobs/{job_id}"
        page = await http.get(page_path)
        assert 'id="promote-job"' in page.text
        token = csrf_of(page.text)
        asked = await http.post(f"{page_path}/promote", data={"csrf": token})
        assert asked.status_code == 200
        assert f"Promote {job_id} now?" in asked.text
        assert await queue.state_of(job_id) == "scheduled"  # nothing before the yes
        await client.delete(queue.keys.wake)
        done = await http.post(
            f"{page_path}/promote", data={"csrf": csrf_of(asked.text), "confirmed": "yes"}
        )
        assert done.status_code == 303
        assert done.headers["location"] == page_path
        assert await queue.state_of(job_id) == "pending"
        assert await client.llen(queue.keys.wake) == 1  # a parked worker hears of it
        assert [job.id for job in (await queue.claim(1, 30_000)).jobs] == [job_id]
        again = await http.post(f"{page_path}/promote", data={"csrf": token, "confirmed": "yes"})
    assert again.status_code == 409
    assert "is not scheduled (active)" in again.text


async def test_promote_keeps_the_jobs_priority_and_lane(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    job_id = await scheduled(queue, "tenant-a")
    async with browsing(client, redis_url, allow_actions=True) as http:
        token = csrf_of((await http.get(f"/queues/{queue.name}/jobs/{job_id}")).text)
        done = await http.post(
            f"/queues/{queue.name}/jobs/{job_id}/promote", data={"csrf": token, "confirmed": "yes"}
        )
    assert done.status_code == 303
    assert await queue.state_of(job_id) == "pending"
    assert not await client.zscore(queue.keys.pending, job_id)  # in its lane, not flat pending
    assert [job.id for job in (await queue.claim(1, 30_000)).jobs] == [job_id]


async def test_delete_asks_first_and_deletes_a_pending_or_scheduled_job(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    pending, later = await enqueue(queue), await scheduled(queue)
    async with browsing(client, redis_url, allow_actions=True) as http:
        for job_id, where in ((pending, "pending"), (later, "scheduled")):
            path = f"/queues/{queue.name}/jobs/{job_id}"
            page = await http.get(path)
            assert 'id="delete-job"' in page.text
            asked = await http.post(f"{path}/delete", data={"csrf": csrf_of(page.text)})
            assert f"Delete {job_id} ({where}) for good?" in asked.text
            assert await queue.state_of(job_id) == where
            done = await http.post(
                f"{path}/delete", data={"csrf": csrf_of(asked.text), "confirmed": "yes"}
            )
            assert done.status_code == 303
            assert await queue.state_of(job_id) == "absent"
    assert (await queue.counts()).pending == (await queue.counts()).scheduled == 0


async def test_a_held_job_is_not_deleted(client: Redis, redis_url: str, queue: Queue) -> None:
    await enqueue(queue)
    held = await claim(queue)
    async with browsing(client, redis_url, allow_actions=True) as http:
        path = f"/queues/{queue.name}/jobs/{held.id}"
        page = await http.get(path)
        assert 'id="delete-job"' not in page.text  # a running job offers Cancel instead
        refused = await http.post(
            f"{path}/delete", data={"csrf": csrf_of(page.text), "confirmed": "yes"}
        )
    assert refused.status_code == 409
    assert "is held by a worker" in refused.text
    assert await queue.state_of(held.id) == "active"


@pytest.mark.parametrize("verb", ["promote", "delete"])
async def test_promote_and_delete_are_refused_without_actions_csrf_or_origin(
    client: Redis, redis_url: str, queue: Queue, verb: str
) -> None:
    job_id = await scheduled(queue)
    path = f"/queues/{queue.name}/jobs/{job_id}/{verb}"
    yes = {"confirmed": "yes"}
    async with browsing(client, redis_url) as http:
        page = await http.get(f"/queues/{queue.name}/jobs/{job_id}")
        read_only = await http.post(path, data={**yes, "csrf": "0" * 64})
    assert f'id="{verb}-job"' not in page.text
    async with browsing(client, redis_url, allow_actions=True) as http:
        token = csrf_of((await http.get(f"/queues/{queue.name}/jobs/{job_id}")).text)
        forged = await http.post(path, data={**yes, "csrf": "0" * 64})
        foreign = await http.post(
            path, data={**yes, "csrf": token}, headers={"origin": "http://evil.test"}
        )
        same = await http.post(path, data={**yes, "csrf": token}, headers={"origin": BASE})
    assert [r.status_code for r in (read_only, forged, foreign)] == [403] * 3
    assert same.status_code == 303  # the same form from our own origin passes


# --- ticked jobs on a tab -------------------------------------------------------------------


async def test_ticked_jobs_on_the_pending_tab_are_deleted_after_a_confirm_the_held_one_skipped(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    await enqueue(queue)
    held = await claim(queue)
    one, two = await enqueue(queue), await enqueue(queue)
    async with browsing(client, redis_url, allow_actions=True) as http:
        tab = await http.get(f"/queues/{queue.name}/pending")
        assert f'name="job_id" value="{one}" form="bulk"' in tab.text
        ticked = {"tab": "pending", "job_id": [one, two, held.id]}
        asked = await http.post(
            f"/queues/{queue.name}/delete", data={**ticked, "csrf": csrf_of(tab.text)}
        )
        assert f"Delete 3 job(s) of {queue.name}?" in asked.text
        assert all(f"<li>{job_id}</li>" in asked.text for job_id in (one, two, held.id))
        assert (await queue.counts()).pending == 2  # nothing before the yes
        done = await http.post(
            f"/queues/{queue.name}/delete",
            data={**ticked, "confirmed": "yes", "csrf": csrf_of(asked.text)},
        )
        assert done.headers["location"] == f"/queues/{queue.name}/pending"
        after = await http.get(done.headers["location"])
    assert "deleted 2 job(s)" in after.text
    assert f"skipped {held.id}: held by a worker" in after.text
    assert [await queue.state_of(j) for j in (one, two, held.id)] == ["absent", "absent", "active"]


async def test_ticked_scheduled_jobs_are_promoted_and_ticked_dead_jobs_retried(
    client: Redis, redis_url: str, queue: Queue
) -> None:
    later = [await scheduled(queue) for _ in range(3)]
    dead = [await kill(queue) for _ in range(2)]
    async with browsing(client, redis_url, allow_actions=True) as http:
        tab = await http.get(f"/queues/{queue.name}/scheduled")
        assert 'id="promote-ticked"' in tab.text
        token = csrf_of(tab.text)
        promoted = await http.post(
            f"/queues/{queue.name}/promote",
            data={"tab": "scheduled", "job_id": later[:2], "confirmed": "yes", "csrf": token},
        )
        dead_tab = await http.get(f"/queues/{queue.name}/dead")
        assert f'name="job_id" value="{dead[0]}" form="bulk"' in dead_tab.text
        retried = await http.post(
            f"/queues/{queue.name}/dead/retry", data={"job_id": dead, "csrf": token}
        )
        nothing = await http.post(f"/queues/{queue.name}/promote", data={"csrf": token})
    assert (promoted.status_code, retried.status_code) == (303, 303)
    assert [await queue.state_of(j) for j in later] == ["pending", "pending", "scheduled"]
    assert [await queue.state_of(j) for j in dead] == ["pending", "pending"]
    assert nothing.status_code == 400
    assert "no job ticked" in nothing.text


@pytest.mark.parametrize("verb", ["promote", "delete"])
async def test_ticked_actions_are_refused_without_actions_or_csrf(
    client: Redis, redis_url: str, queue: Queue, verb: str
) -> None:
    job_id = await scheduled(queue)
    ticked = {"tab": "scheduled", "job_id": job_id, "confirmed": "yes"}
    async with browsing(client, redis_url) as http:
        tab = await http.get(f"/queues/{queue.name}/scheduled")
        read_only = await http.post(f"/queues/{queue.name}/{verb}", data=ticked)
    async with browsing(client, redis_url, allow_actions=True) as http:
        forged = await http.post(f"/queues/{queue.name}/{verb}", data={**ticked, "csrf": "0" * 64})
    assert 'form="bulk"' not in tab.text
    assert [read_only.status_code, forged.status_code] == [403, 403]
    assert await queue.state_of(job_id) == "scheduled"
