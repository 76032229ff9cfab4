"""Lifecycle events: JSON messages on the pub/sub channel `emq:{q}:events`.

The scripts publish `claimed` (claim), `completed`, `failed`, `dead` and `fenced` (settle),
`reaped` (reap) and `fenced` (renew), each `{"event", "queue", "job_id", "attempts", "at_ms", ...}`
with `at_ms` on the server clock and, where they apply, `outcome`, `error` and `current`;
`progress` (from the job's handler) shares the shape. Delivery is at-most-once: a message goes to
whoever is subscribed at that moment and is never stored, so a subscriber that connects late or
drops its connection misses what was published meanwhile. Use events to watch and to react, not
as a record: the queue's keys are the record.

The scripts publish only while someone listens (one PUBSUB NUMSUB per script call), so a queue
nobody watches pays nothing per job. NUMSUB counts the subscribers of the node the script runs
on: on a cluster, subscribe through this module (redis-py sends SUBSCRIBE to the node that owns
the channel's slot, the queue's own), or events go unpublished.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from emq_worker.protocol.keys import QueueKeys

EVENTS: Final = "events"


def channel(queue: str) -> str:
    """The events channel of `queue` (it shares the queue's `{q}` hash tag)."""
    return QueueKeys.of(queue).prefix + EVENTS


@dataclass(frozen=True, slots=True)
class Event:
    event: str
    queue: str
    job_id: str
    attempts: int | None
    at_ms: int | None
    data: dict[str, Any] = field(compare=False)
    """The whole message as decoded (optional fields: outcome, error, current, progress...)."""


def parse_event(raw: bytes | str) -> Event | None:
    """An Event, or None for a message that is not a JSON object naming an event."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        return None
    # EchoMQ's own events name the job "job"; ours say "job_id".
    job_id = data.get("job_id", data.get("job", ""))
    return Event(
        event=data["event"],
        queue=str(data.get("queue", "")),
        job_id=str(job_id),
        attempts=_int_or_none(data.get("attempts")),
        at_ms=_int_or_none(data.get("at_ms")),
        data=data,
    )


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class EventStream:
    """The events of one queue, read from a subscribed connection; iterate it with `async for`."""

    def __init__(self, pubsub: PubSub) -> None:
        self._pubsub = pubsub

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        while True:
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            if message is None or message.get("type") != "message":
                continue
            event = parse_event(message["data"])
            if event is not None:
                yield event


@asynccontextmanager
async def open_events(client: Redis, queue: str) -> AsyncIterator[EventStream]:
    """Subscribe to `queue`'s events; the stream is live (the server confirmed the SUBSCRIBE)
    when this yields, so whatever happens after it is seen. The connection closes on exit."""
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel(queue))
        while True:  # the confirmation: from here on the server counts this subscriber
            message = await pubsub.get_message(timeout=None)
            if message is not None and message.get("type") == "subscribe":
                break
        yield EventStream(pubsub)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def subscribe(client: Redis, queue: str) -> AsyncIterator[Event]:
    """`async for event in subscribe(client, "orders"): ...`; the subscription starts with the
    first iteration (use `open_events` to know when it is live) and ends when the loop does."""
    async with open_events(client, queue) as stream:
        async for event in stream:
            yield event
