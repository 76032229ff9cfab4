"""Flows on the wire: writing one queue's part of a flow, the flow outbox and its entries, and
the reads of a parent's record of its children (docs/protocol.md, section 5b).

The scripts are `lua/flow.lua` (write), `lua/flow_deliver.lua` (count entries of another queue's
outbox in their parents), `lua/flow_ack.lua` (remove delivered entries) and the fan-in helpers
of `lua/includes/flows.lua`, which settle and reap call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from emq_worker.errors import EmqError, ScriptError
from emq_worker.protocol.keys import validate_queue_name
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.scripts import ArgValue
from emq_worker.protocol.values import ENQUEUE_MEMO_MS, new_nonce

OUTBOX: Final = "flow:outbox"
"""The per-queue LIST a child whose parent lives in another queue reports to."""
SEPARATOR: Final = b"\0"
Policy = Literal["fp", "id"]
"""fp: a child's death fails its parent (EchoMQ's default); id: its death counts as done."""


def outbox_key(queue: Queue) -> str:
    return queue.keys.prefix + OUTBOX


def subkey(queue: Queue, job_id: str, name: str) -> str:
    """A parent's flow subkey: `dependencies`, `processed`, `failed` or `unsuccessful`."""
    return f"{queue.keys.job(job_id)}:{name}"


class FlowNode(NamedTuple):
    """One job of a flow as `flow.lua` writes it."""

    id: JobId
    payload: bytes
    parent: str = ""
    """The parent's id; '' for the flow's root."""
    parent_queue: str = ""
    """The parent's queue when it is not this one, else ''."""
    policy: str = ""
    """'fp' or 'id' for a child; '' for the root."""
    children: int = 0
    """0: written ready (pending); n: held (awaiting_children) until n children are done."""


class FlowExistsError(EmqError):
    """A row with one of the ids of the part exists: nothing of the part was written."""

    def __init__(self, queue: str, job_id: str) -> None:
        self.queue = queue
        self.job_id = job_id
        super().__init__(f"job {job_id} already exists in queue {queue!r}")


async def write_part(queue: Queue, nodes: Sequence[FlowNode], nonce: str | None = None) -> int:
    """Write one queue's part of a flow, all or none (one script call); returns the jobs written.
    Raises FlowExistsError (nothing written) and KindError (an id not JOB-namespaced)."""
    args: list[ArgValue] = [queue.keys.prefix, nonce or new_nonce(), ENQUEUE_MEMO_MS]
    for node in nodes:
        args += [node.id, node.payload, node.parent, node.parent_queue, node.policy]
        args.append(node.children)
    reply = await queue.run("flow", args)
    status, detail = text(reply[0]), text(reply[1])
    if status == "exists":
        raise FlowExistsError(queue.name, detail)
    if status != "ok":
        raise ScriptError(f"flow replied {reply!r}")
    return int(detail)


# --- the outbox ---------------------------------------------------------------------------


class Completed(NamedTuple):
    """`<parent_queue> \\0 <parent> \\0 <child> \\0 <result>`: the child completed."""

    parent_queue: str
    parent: str
    child: str
    result: bytes


class Died(NamedTuple):
    """`'' \\0 'fail' \\0 <parent_queue> \\0 <parent> \\0 <child> \\0 <policy> \\0 <error>`."""

    parent_queue: str
    parent: str
    child: str
    policy: str
    error: bytes


OutboxEntry = Completed | Died


def parse_entry(raw: bytes) -> OutboxEntry | None:
    """An outbox entry, or None when it is not one (a field missing, a queue name that is not
    one, a policy that is neither fp nor id). The result or error is the rest of the entry,
    whatever bytes it holds."""
    try:
        if raw.startswith(SEPARATOR):
            tag, queue, parent, child, policy, error = raw[1:].split(SEPARATOR, 5)
            if tag != b"fail" or policy not in (b"fp", b"id"):
                return None
            name = validate_queue_name(queue.decode())
            return Died(name, parent.decode(), child.decode(), policy.decode(), error)
        queue, parent, child, result = raw.split(SEPARATOR, 3)
        return Completed(
            validate_queue_name(queue.decode()), parent.decode(), child.decode(), result
        )
    except (ValueError, EmqError):  # too few fields, not UTF-8, not a queue name
        return None


async def read_outbox(queue: Queue, batch: int) -> list[bytes]:
    """The first `batch` entries of the queue's outbox, oldest first (read, not removed)."""
    entries = await queue.client.lrange(outbox_key(queue), 0, batch - 1)
    return [entry if isinstance(entry, bytes) else entry.encode() for entry in entries]


@dataclass(frozen=True, slots=True)
class Delivery:
    entries: int
    released: int
    """Parents that went to pending."""


async def deliver(parents: Queue, entries: Sequence[OutboxEntry]) -> Delivery:
    """Count entries (all with parents in `parents`) in their parents: one script call."""
    args: list[ArgValue] = [parents.keys.prefix]
    for entry in entries:
        if isinstance(entry, Completed):
            args += ["done", entry.parent, entry.child, entry.result]
        else:
            args += [entry.policy, entry.parent, entry.child, entry.error]
    reply = await parents.run("flow_deliver", args)
    return Delivery(int(reply[0]), int(reply[1]))


async def ack(queue: Queue, raws: Sequence[bytes]) -> int:
    """Remove delivered (or unreadable) entries from the queue's outbox, each by its value."""
    if not raws:
        return 0
    reply = await queue.run("flow_ack", [queue.keys.prefix, *raws])
    return int(reply)


# --- a parent's record ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """What a parent's subkeys say about its children."""

    outstanding: int | None
    """`:dependencies`: children not yet done; None when the job has no such key."""
    processed: dict[str, bytes]
    """Completed children: id -> result (EchoMQ records a child's id when it has none)."""
    failed: dict[str, bytes]
    """Children whose death failed the parent (policy fp): id -> error."""
    unsuccessful: dict[str, bytes]
    """Children whose death counted as done (policy id): id -> error."""


async def read_record(queue: Queue, job_id: str) -> FlowRecord:
    """A parent's record of its children, in one round trip."""
    async with queue.client.pipeline(transaction=False) as pipe:
        pipe.get(subkey(queue, job_id, "dependencies"))
        for name in ("processed", "failed", "unsuccessful"):
            pipe.hgetall(subkey(queue, job_id, name))
        outstanding, processed, failed, unsuccessful = await pipe.execute()
    return FlowRecord(
        None if outstanding is None else int(outstanding),
        _texts(processed),
        _texts(failed),
        _texts(unsuccessful),
    )


def _texts(reply: dict[bytes, bytes]) -> dict[str, bytes]:
    return {text(key): value for key, value in reply.items()}
