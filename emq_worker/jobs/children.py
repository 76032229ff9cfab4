"""What a flow parent reads about its children while it runs (`ctx.children_results()`,
`ctx.children_failures()`): its record of them, kept in its flow subkeys until it completes."""

from __future__ import annotations

from typing import Any

from emq_worker.jobs import codec
from emq_worker.protocol.flow_wire import subkey
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text


def child_value(stored: bytes) -> Any:
    """A completed child's value: what its handler returned, when one of our workers ran it
    (stored as `{"value": ...}`); else the bytes as recorded: what an EchoMQ child completed
    with (its own id when it gave none), or a raw handler's bytes."""
    try:
        envelope = codec.decode_value(stored)
    except ValueError:
        return stored
    if isinstance(envelope, dict) and list(envelope) == ["value"]:
        return envelope["value"]
    return stored


async def children_results(queue: Queue, parent: JobId) -> dict[JobId, Any]:
    """Every completed child of `parent`: id -> value (child_value)."""
    record = await queue.client.hgetall(subkey(queue, parent, "processed"))
    return {JobId(text(child)): child_value(_bytes(value)) for child, value in record.items()}


async def children_failures(queue: Queue, parent: JobId) -> dict[JobId, str]:
    """Every child of `parent` that died under on_failure="ignore": id -> its last error."""
    record = await queue.client.hgetall(subkey(queue, parent, "unsuccessful"))
    return {
        JobId(text(child)): _bytes(error).decode("utf-8", "replace")
        for child, error in record.items()
    }


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
