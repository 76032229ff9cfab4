"""The blocking producer, for code without an event loop: `with sync_producer(url) as p:
p.enqueue(...)`. Each call runs the asynchronous Producer's on a portal thread."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Unpack

import anyio.from_thread

from emq_worker.jobs.flow_tree import Flow, FlowJob
from emq_worker.jobs.options import EnqueueOptions, Placement
from emq_worker.jobs.producer import Enqueued, JobSpec, Producer
from emq_worker.jobs.repeat import RepeatInfo
from emq_worker.protocol.ids import DEFAULT_NODE_ID
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.connection import DEFAULT_TIMEOUT_S, DEFAULT_URL


class SyncProducer:
    """A blocking facade over Producer for code without an event loop (a portal thread)."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, producer: Producer) -> None:
        self._portal = portal
        self._producer = producer

    def enqueue(
        self,
        queue: str,
        task: str,
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Enqueued:
        return self._portal.call(lambda: self._producer.enqueue(queue, task, kwargs, **options))

    def enqueue_raw(self, queue: str, payload: bytes, **options: Unpack[Placement]) -> Enqueued:
        return self._portal.call(lambda: self._producer.enqueue_raw(queue, payload, **options))

    def enqueue_many(self, queue: str, specs: Sequence[JobSpec]) -> list[Enqueued]:
        return self._portal.call(self._producer.enqueue_many, queue, specs)

    def enqueue_flow(self, queue: str, root: FlowJob) -> Flow:
        return self._portal.call(self._producer.enqueue_flow, queue, root)

    def repeat(
        self, queue: str, name: str, task: str, kwargs: Mapping[str, Any] | None = None, **when: Any
    ) -> RepeatInfo:
        return self._portal.call(lambda: self._producer.repeat(queue, name, task, kwargs, **when))

    def result(self, job_id: str, *, queue: str, timeout: float = 30.0) -> Any:
        return self._portal.call(
            lambda: self._producer.result(job_id, queue=queue, timeout=timeout)
        )


@contextmanager
def sync_producer(
    url: str = DEFAULT_URL,
    *,
    node_id: int = DEFAULT_NODE_ID,
    wire_version: str = DEFAULT_WIRE_VERSION,
    socket_timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> Iterator[SyncProducer]:
    """`with sync_producer(url) as p: p.enqueue("orders", "charge", {...})`; each call waits at
    most `socket_timeout_s` for the server (as `Producer.from_url`)."""
    with anyio.from_thread.start_blocking_portal() as portal:
        producer = portal.call(lambda: _make(url, node_id, wire_version, socket_timeout_s))
        try:
            yield SyncProducer(portal, producer)
        finally:
            portal.call(producer.aclose)


async def _make(
    url: str, node_id: int, wire_version: str, socket_timeout_s: float | None
) -> Producer:
    return Producer.from_url(
        url, node_id=node_id, wire_version=wire_version, socket_timeout_s=socket_timeout_s
    )
