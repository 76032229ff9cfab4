"""`inspect` of a flow job: for a child, its parent and where that parent is; for a parent, its
record of its children (how many are still out, which completed, which died). EchoMQ keeps no
list of a parent's children, only their count, so the ones still out are counted, not named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emq_worker.protocol.flows import read_record
from emq_worker.protocol.names import Field, JobId
from emq_worker.protocol.queue import Queue


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
        }


async def flow_view(queue: Queue, job_id: JobId, row: dict[str, str]) -> FlowView | None:
    """The flow facts of a job whose row is `row`; None for a job in no flow."""
    record = await read_record(queue, job_id)
    parent = row.get(Field.PARENT)
    is_parent = record.outstanding is not None or record.processed or record.failed
    if parent is None and not is_parent:
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
        outstanding=record.outstanding,
        completed=tuple(sorted(record.processed)),
        failed=_texts(record.failed),
        ignored=_texts(record.unsuccessful),
    )


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
    if view.outstanding is not None or view.completed or view.failed:
        out = "?" if view.outstanding is None else str(max(view.outstanding, 0))
        text = f"{out} still out; {len(view.completed)} completed"
        text += "".join(
            f"; {len(group)} {name}"
            for name, group in (("failed", view.failed), ("ignored", view.ignored))
            if group
        )
        lines.append(("flow children", text))
        lines += [("  completed", child) for child in view.completed]
        lines += [("  failed", f"{child}: {error}") for child, error in view.failed]
        lines += [("  ignored", f"{child}: {error}") for child, error in view.ignored]
    return lines
