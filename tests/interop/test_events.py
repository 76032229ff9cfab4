"""Our script events name the job `job_id`; EchoMQ's name it `job`. We publish both, so an
EchoMQ subscriber matching `"job":<id>` sees our claims, completions and reaps."""

from __future__ import annotations

import json
from typing import Any

import anyio
from redis.asyncio import Redis

from tests.support.conformance import Harness


async def next_event(pubsub: Any) -> dict[str, Any]:
    with anyio.fail_after(5):
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None:
                event: dict[str, Any] = json.loads(message["data"])
                return event


async def test_events_carry_job_and_job_id(client: Redis, conf: Harness) -> None:
    pubsub = client.pubsub()
    await pubsub.subscribe(conf.keys.prefix + "events")
    try:
        job_id = await conf.enqueue()
        job = await conf.claim_one()
        claimed = await next_event(pubsub)
        await conf.complete(job)
        completed = await next_event(pubsub)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
    for event, name in ((claimed, "claimed"), (completed, "completed")):
        assert event["event"] == name
        assert (event["job"], event["job_id"]) == (job_id, job_id)
