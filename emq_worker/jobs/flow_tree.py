"""Flows: a parent job that runs once its children are done, and reads their results.

A flow is a tree of `FlowJob`s, at most MAX_DEPTH levels (EchoMQ's cap; the root is level 1).
Every job with children is held (`awaiting_children`) until each child has completed, or died
under `on_failure="ignore"`; a child that dies under `on_failure="fail_parent"` (the default)
sends its parent to `dead`. The leaves start at once.

Written in parts, one script call per part: a part is a parent with every descendant reachable
through jobs of the same queue, so a flow in one queue is one call, all or none. Across queues
the parts go parents first (a child never exists before its parent): a part that fails leaves
the parts written before it holding their parents forever (fail-closed, never released early),
and FlowWriteError says which.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, Literal, NamedTuple

from redis.exceptions import RedisError

from emq_worker.errors import EmqError, FlowError, FlowWriteError
from emq_worker.jobs import codec
from emq_worker.jobs.policy import JobPolicy
from emq_worker.protocol.flow_wire import FlowExistsError, FlowNode, write_part
from emq_worker.protocol.ids import job_id
from emq_worker.protocol.keys import validate_queue_name
from emq_worker.protocol.names import JobId
from emq_worker.protocol.payload_limits import check_payload_size
from emq_worker.protocol.queue import Queue

MAX_DEPTH: Final = 8
"""EchoMQ's cap on a flow's depth (its Flows module's `@max_tree_depth`); the root is level 1."""
OnFailure = Literal["fail_parent", "ignore"]
WIRE_POLICY: Final[dict[str, str]] = {"fail_parent": "fp", "ignore": "id"}


@dataclass(frozen=True, slots=True)
class FlowJob:
    """One job of a flow: a task and its JSON kwargs (or a raw payload), and its children."""

    task: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    _: KW_ONLY
    children: Sequence[FlowJob] = ()
    """Jobs that must be done before this one runs; none: it runs at once."""
    queue: str | None = None
    """The queue it runs in; None: its parent's (the root: the queue given to enqueue_flow)."""
    on_failure: OnFailure = "fail_parent"
    """What its death does to its parent: "fail_parent" sends the parent to dead; "ignore"
    counts it as done (the parent runs, and `ctx.children_failures()` lists it)."""
    payload: bytes | None = None
    """Raw bytes instead of task and kwargs (for a raw handler or an EchoMQ consumer)."""
    job_id: str | None = None
    """A caller-chosen JOB id; None mints one."""
    options: JobPolicy | None = None
    """Per-job overrides of the task's policy (in the JSON envelope; not for raw payloads)."""


class Flow(NamedTuple):
    """The ids a flow was written with, in the shape of the tree given."""

    job_id: JobId
    queue: str
    children: tuple[Flow, ...] = ()


@dataclass(slots=True)
class _Part:
    queue: str
    nodes: list[FlowNode]


class _Planner:
    """Walks the tree once: checks it, mints ids, encodes payloads, cuts it into parts."""

    def __init__(self, mint: Callable[[], JobId], trace: Mapping[str, str] | None) -> None:
        self.mint = mint
        self.trace = trace
        self.seen: set[str] = set()
        self.parts: list[_Part] = []
        self.shape: dict[JobId, tuple[str, list[JobId]]] = {}
        """Each job's queue and children's ids, to answer with the tree of ids."""
        self._open: deque[tuple[FlowJob, str, str, str, JobId]] = deque()

    def plan(self, queue: str, root: FlowJob) -> Flow:
        check_depth(root)
        root_id = self._id_of(root)
        self._open.append((root, validate_queue_name(queue), "", "", root_id))
        while self._open:  # parts in breadth-first order: each after its parent's part
            job, part_queue, parent, parent_queue, new_id = self._open.popleft()
            part = _Part(part_queue, [])
            self.parts.append(part)
            self._place(part, job, parent, parent_queue, new_id)
        return self._flow(root_id)

    def _place(
        self, part: _Part, job: FlowJob, parent: str, parent_queue: str, new_id: JobId
    ) -> None:
        policy = WIRE_POLICY.get(job.on_failure, "") if parent else ""
        other = parent_queue if parent_queue != part.queue else ""
        payload = self._payload(job, child=bool(parent))
        part.nodes.append(FlowNode(new_id, payload, parent, other, policy, len(job.children)))
        child_ids: list[JobId] = []
        self.shape[new_id] = (part.queue, child_ids)
        for child in job.children:
            child_id = self._id_of(child)
            child_ids.append(child_id)
            child_queue = validate_queue_name(child.queue or part.queue)
            if child_queue == part.queue:
                self._place(part, child, new_id, part.queue, child_id)
            else:  # another queue: its own part, written after this one
                self._open.append((child, child_queue, new_id, part.queue, child_id))

    def _flow(self, job: JobId) -> Flow:
        queue, children = self.shape[job]
        return Flow(job, queue, tuple(self._flow(child) for child in children))

    def _id_of(self, job: FlowJob) -> JobId:
        new_id = job_id(job.job_id) if job.job_id is not None else self.mint()
        if new_id in self.seen:
            raise FlowError(f"job id {new_id} appears twice in the flow")
        self.seen.add(new_id)
        return new_id

    def _payload(self, job: FlowJob, *, child: bool) -> bytes:
        if job.on_failure not in WIRE_POLICY:
            raise FlowError(f"on_failure must be 'fail_parent' or 'ignore'; got {job.on_failure!r}")
        if job.payload is not None:
            if job.options is not None or job.task:
                raise FlowError("a flow job with a raw payload takes no task, kwargs or options")
            payload = job.payload
        else:
            if not job.task:
                raise FlowError("every flow job needs a task (or a raw payload)")
            payload = codec.encode(job.task, job.kwargs, job.options, self.trace, flow_child=child)
        check_payload_size(payload)
        return payload


def check_depth(root: FlowJob) -> None:
    """Raise FlowError when the tree is deeper than MAX_DEPTH levels (before any write)."""
    level, depth = [root], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise FlowError(
                f"flow is deeper than {MAX_DEPTH} levels (EchoMQ's cap, the root at level 1): "
                f"a job at level {depth}"
            )
        level = [child for job in level for child in job.children]


async def write_flow(
    queue_of: Callable[[str], Queue],
    mint: Callable[[], JobId],
    queue: str,
    root: FlowJob,
    trace: Mapping[str, str] | None = None,
) -> Flow:
    """Write the flow rooted at `root` in `queue`: see the module's docstring."""
    planner = _Planner(mint, trace)
    planned = planner.plan(queue, root)
    written: list[tuple[str, tuple[str, ...]]] = []
    for part in planner.parts:
        try:
            await write_part(queue_of(part.queue), part.nodes)
        except (RedisError, EmqError) as exc:
            raise _write_error(written, part, exc) from exc
        written.append((part.queue, tuple(node.id for node in part.nodes)))
    return planned


def _write_error(
    written: list[tuple[str, tuple[str, ...]]], part: _Part, exc: Exception
) -> Exception:
    cause = str(exc) if isinstance(exc, FlowExistsError) else f"{type(exc).__name__}: {exc}"
    if not written:
        return FlowWriteError(f"flow not written: {cause}", ())
    first_queue, first_ids = written[0]
    held = ", ".join(f"{q}: {', '.join(ids)}" for q, ids in written)
    return FlowWriteError(
        f"flow written only in part: the part in queue {part.queue!r} failed ({cause}); "
        f"written before it, and holding their parents forever (never released): {held}. "
        f"Remove the root job {first_ids[0]} in queue {first_queue!r} and its written jobs, "
        "or write the missing part yourself",
        tuple(written),
    )
