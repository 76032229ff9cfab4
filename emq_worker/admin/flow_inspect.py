"""`inspect` of a flow job: for a child, its parent and where that parent is; for a parent, its
record of its children (how many are still out, which completed, which died). EchoMQ keeps no
list of a parent's children, only their count, so the ones still out are counted, not named.

The record is read bounded: each of its hashes is counted (HLEN) and at most CHILDREN_SHOWN of
its children named (HKEYS of a small hash, else one HSCAN page), so a parent of 100 000
children costs an inspect or a dashboard page no more than one of 100."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emq_worker.protocol.flow_wire import subkey
from emq_worker.protocol.names import Field, JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text

CHILDREN_SHOWN = 100
"""Children of each kind (completed, failed, ignored) an inspect names at most."""
RECORD_HASHES = ("processed", "failed", "unsuccessful")


@dataclass(frozen=True, slots=True)
class FlowView:
    parent: str | None = None
    """A child's parent id."""
    parent_queue: str | None = None
    parent_where: str | None = None
    """Where the parent is now (awaiting_children until its children are done; absent)."""
    policy: str | None = None
    """fp: this child's death fails its parent; id: it counts as done."""
    outstanding: int | None = None
    """A parent's children not yet done (its `:dependencies`); None: not a parent."""
    completed: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    """Children whose death failed this parent (policy fp), with their error."""
    ignored: tuple[tuple[str, str], ...] = ()
    """Children whose death counted as done (policy id), with their error."""
    counts: tuple[int, int, int] = (0, 0, 0)
    """How many children completed, failed and were ignored (the lists name CHILDREN_SHOWN of
    each at most)."""

    @property
    def is_parent(self) -> bool:
        return self.outstanding is not None or any(self.counts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "parent": self.parent,
            "parent_queue": self.parent_queue,
            "parent_where": self.parent_where,
            "parent_policy": self.policy,
            "children_outstanding": self.outstanding,
            "children_completed": list(self.completed),
            "children_failed": dict(self.failed),
            "children_ignored": dict(self.ignored),
            "children_counts": dict(
                zip(("completed", "failed", "ignored"), self.counts, strict=True)
            ),
        }


async def flow_view(queue: Queue, job_id: JobId, row: dict[str, str]) -> FlowView | None:
    """The flow facts of a job whose row is `row`; None for a job in no flow."""
    outstanding, counts = await _counts(queue, job_id)
    parent = row.get(Field.PARENT)
    if parent is None and outstanding is None and not any(counts):
        return None
    parent_queue = row.get(Field.PARENT_QUEUE) or queue.name
    where = None
    if parent is not None:
        holder = (
            queue
            if parent_queue == queue.name
            else Queue(queue.client, queue.scripts, parent_queue)
        )
        where = await holder.state_of(JobId(parent))
    return FlowView(
        parent=parent,
        parent_queue=parent_queue if parent is not None else None,
        parent_where=where,
        policy=row.get(Field.PARENT_POLICY),
        outstanding=outstanding,
        completed=tuple(sorted(await _named(queue, job_id, "processed", counts[0]))),
        failed=_texts(await _named(queue, job_id, "failed", counts[1])),
        ignored=_texts(await _named(queue, job_id, "unsuccessful", counts[2])),
        counts=counts,
    )


async def _counts(queue: Queue, job_id: str) -> tuple[int | None, tuple[int, int, int]]:
    """A parent's children still out (None: no `:dependencies`) and the size of each hash."""
    async with queue.client.pipeline(transaction=False) as pipe:
        pipe.get(subkey(queue, job_id, "dependencies"))
        for name in RECORD_HASHES:
            pipe.hlen(subkey(queue, job_id, name))
        outstanding, done, failed, ignored = await pipe.execute()
    return (
        None if outstanding is None else int(outstanding),
        (int(done), int(failed), int(ignored)),
    )


async def _named(queue: Queue, job_id: str, name: str, size: int) -> dict[str, bytes]:
    """At most CHILDREN_SHOWN entries of one record hash: the whole of a small one, else one
    HSCAN page (a completed child's value is its result: HKEYS keeps results off the wire)."""
    key = subkey(queue, job_id, name)
    if size == 0:
        return {}
    if size <= CHILDREN_SHOWN:
        if name == "processed":
            return dict.fromkeys(map(text, await queue.client.hkeys(key)), b"")
        return _entries(await queue.client.hgetall(key))
    _, page = await queue.client.hscan(key, 0, count=CHILDREN_SHOWN)
    return _entries(page)


def _entries(reply: object) -> dict[str, bytes]:
    """The first CHILDREN_SHOWN pairs of a hash reply (redis-py's dict), ids as text and values
    as bytes."""
    pairs = list(reply.items())[:CHILDREN_SHOWN] if isinstance(reply, dict) else []
    return {text(k): v if isinstance(v, bytes) else str(v).encode() for k, v in pairs}


def _texts(errors: dict[str, bytes]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((child, e.decode("utf-8", "replace")) for child, e in errors.items()))


def flow_lines(view: FlowView) -> list[tuple[str, str]]:
    """(name, text) lines for `inspect`'s table (text not yet escaped)."""
    lines = []
    if view.parent is not None:
        policy = {"id": "its death counts as done", "fp": "its death fails the parent"}
        lines.append(
            (
                "flow parent",
                f"{view.parent} in queue {view.parent_queue!r} ({view.parent_where}); "
                f"{policy.get(view.policy or 'fp', view.policy or '')}",
            )
        )
    if view.is_parent:
        out = "?" if view.outstanding is None else str(max(view.outstanding, 0))
        done, failed, ignored = view.counts
        said = f"{out} still out; {done} completed"
        said += "".join(
            f"; {count} {name}"
            for name, count in (("failed", failed), ("ignored", ignored))
            if count
        )
        if max(view.counts) > CHILDREN_SHOWN:
            said += f" (at most {CHILDREN_SHOWN} of each named)"
        lines.append(("flow children", said))
        lines += [("  completed", child) for child in view.completed]
        lines += [("  failed", f"{child}: {error}") for child, error in view.failed]
        lines += [("  ignored", f"{child}: {error}") for child, error in view.ignored]
    return lines
