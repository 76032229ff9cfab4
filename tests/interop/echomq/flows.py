"""EchoMQ's side of flows, at the wire level: its flow add (one queue, across queues, a nested
tree), its complete and retry with their flow hooks, and its Pump's outbox delivery, restated
from its Flows, Jobs and Pump modules (docs/protocol.md, section 5b) as the Lua files beside
this module plus the host steps its Elixir code runs around them. Its defects are kept: no wake
on a release, a release that checks no state, a count only from active, a missing parent
written as a phantom, a sweep that trims by count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker.protocol.keys import QueueKeys
from tests.interop.echomq import EchoMQ, refusal, source

MAX_TREE_DEPTH = 8
"""EchoMQ's cap on a tree's depth (the root at level 1)."""
Policy = Literal["fp", "id"]


@dataclass(frozen=True, slots=True)
class Node:
    """One job of an EchoMQ flow: its id and payload, the queue it runs in (None: its
    parent's), its policy towards its parent, its children."""

    id: str
    payload: bytes
    queue: str | None = None
    policy: Policy = "fp"
    children: tuple[Node, ...] = field(default_factory=tuple)


class FlowTooDeepError(Exception):
    """EchoMQ's `{:error, {:flow_too_deep, 8}}`, before any write."""


def depth(node: Node) -> int:
    return 1 + max((depth(child) for child in node.children), default=0)


@dataclass(slots=True)
class EchoMQFlows:
    """One EchoMQ client's flow verbs, on any queue."""

    client: Redis

    def on(self, queue: str) -> EchoMQ:
        return EchoMQ.of(self.client, queue)

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self.client.eval(source(name), len(keys), *keys, *args)

    # --- add ------------------------------------------------------------------------------

    async def add(self, queue: str, root: Node) -> None:
        """Flows.add: a nested tree walks node by node; a flat flow with a child in another
        queue holds the parent, then writes each child; a flat one-queue flow is one call."""
        if any(child.children for child in root.children):
            if depth(root) > MAX_TREE_DEPTH:
                raise FlowTooDeepError(MAX_TREE_DEPTH)
            await self._land(queue, root, "", "", "fp")
        elif any((child.queue or queue) != queue for child in root.children):
            await self._hold(queue, root, "", "", "fp")
            for child in root.children:
                await self._land(child.queue or queue, child, root.id, queue, child.policy)
        else:
            await self._add_one_queue(queue, root)

    async def _add_one_queue(self, queue: str, root: Node) -> None:
        k = QueueKeys.of(queue)
        keys = [k.job(root.id), k.job(root.id) + ":dependencies", k.pending]
        args: list[Any] = [root.id, root.payload, len(root.children)]
        for child in root.children:
            keys.append(k.job(child.id))
            args += [child.id, child.payload]
        await self._run("flow_add", keys, args)
        for child in root.children:  # the host's policy write, after the atomic add
            await self.client.hset(k.job(child.id), "parent_policy", child.policy)

    async def _land(
        self, queue: str, node: Node, parent: str, parent_queue: str, policy: Policy
    ) -> None:
        if node.children:
            await self._hold(queue, node, parent, parent_queue, policy)
            for child in node.children:
                await self._land(child.queue or queue, child, node.id, queue, child.policy)
            return
        k = QueueKeys.of(queue)
        other = parent_queue if parent_queue != queue else ""
        await self._run(
            "flow_child", [k.job(node.id), k.pending], [node.id, node.payload, parent, other]
        )
        await self.client.hset(k.job(node.id), "parent_policy", policy)

    async def _hold(
        self, queue: str, node: Node, parent: str, parent_queue: str, policy: Policy
    ) -> None:
        row = QueueKeys.of(queue).job(node.id)
        await self._run(
            "flow_hold", [row, row + ":dependencies"], [node.id, node.payload, len(node.children)]
        )
        if parent:
            link = ["parent", parent, "parent_policy", policy]
            if parent_queue != queue:
                link += ["parent_queue", parent_queue]
            await self.client.hset(row, items=link)

    # --- complete and retry ----------------------------------------------------------------

    async def _link(self, queue: str, job_id: str) -> tuple[str | None, str | None, Policy]:
        """The host-side HMGET of parent, parent_queue, parent_policy (policy fp by default)."""
        parent, parent_queue, policy = await self.client.hmget(
            QueueKeys.of(queue).job(job_id), ["parent", "parent_queue", "parent_policy"]
        )
        text = [v.decode() if isinstance(v, bytes) else v for v in (parent, parent_queue)]
        return text[0], text[1], "id" if policy == b"id" else "fp"

    async def complete(
        self, queue: str, job_id: str, token: int, result: bytes | None = None
    ) -> str:
        """Jobs.complete/5: "ok", "gone" or "stale". A child without a result records its id."""
        k = QueueKeys.of(queue)
        keys, args = [k.active, k.job(job_id)], [job_id, token, k.prefix]
        parent, parent_queue, _ = await self._link(queue, job_id)
        value = job_id.encode() if result is None else result
        if parent is not None and parent_queue is not None and parent_queue != queue:
            keys.append(k.prefix + "flow:outbox")
            args += [parent, value, "xq", parent_queue]
        elif parent is not None:
            row = k.job(parent)
            keys += [row + ":dependencies", row + ":processed", row]
            args += [parent, value]
        try:
            reply = await self._run("flow_complete", keys, args)
        except ResponseError as exc:
            return refusal(exc)
        return "ok" if int(reply) == 1 else "gone"

    async def retry(
        self, queue: str, job_id: str, token: int, *, delay_ms: int, max_attempts: int, error: str
    ) -> str:
        """Jobs.retry/7: "scheduled", "dead" or "stale"; a same-queue death that failed the
        parent then climbs the tree through the outbox (its Pump's recursive hook)."""
        k = QueueKeys.of(queue)
        keys = [k.active, k.schedule, k.dead, k.job(job_id)]
        args: list[Any] = [job_id, token, delay_ms, max_attempts, error, k.prefix]
        parent, parent_queue, policy = await self._link(queue, job_id)
        same_queue = parent is not None and (parent_queue is None or parent_queue == queue)
        if parent is not None and not same_queue:
            keys.append(k.prefix + "flow:outbox")
            args += [f"xq:{policy}", parent_queue, parent]
        elif parent is not None:
            row = k.job(parent)
            keys += [row + ":failed", row + ":unsuccessful", row + ":dependencies", row]
            args += [f"sq:{policy}", parent]
        try:
            verdict = cast(bytes, await self._run("flow_retry", keys, args)).decode()
        except ResponseError as exc:
            return refusal(exc)
        dead = verdict == "dead" and same_queue and parent is not None
        if dead and parent is not None and await self._is_dead(queue, parent):
            await self._climb(queue, parent, error)
        return verdict

    async def _is_dead(self, queue: str, job_id: str) -> bool:
        return await self.client.hget(QueueKeys.of(queue).job(job_id), "state") == b"dead"

    async def _climb(self, queue: str, node: str, error: str) -> None:
        """A node just went dead: if it is itself a child, push its death to its own queue's
        outbox, addressed to its parent (whatever queue that is in)."""
        parent, parent_queue, policy = await self._link(queue, node)
        if parent is None:
            return
        entry = ["", "fail", parent_queue or queue, parent, node, policy, error]
        await self.client.rpush(QueueKeys.of(queue).prefix + "flow:outbox", "\0".join(entry))

    # --- the Pump's outbox delivery ---------------------------------------------------------

    async def pump(self, queue: str, batch: int = 100) -> int:
        """Pump.deliver_flow_completions: read the head, deliver each entry in order until one
        does not parse, then LTRIM that many off the head. Returns the count delivered."""
        outbox = QueueKeys.of(queue).prefix + "flow:outbox"
        entries = cast(list[bytes], await self.client.lrange(outbox, 0, batch - 1))
        delivered = 0
        for entry in entries:
            if not await self._deliver_one(entry):
                break
            delivered += 1
        if delivered:
            await self.client.ltrim(outbox, delivered, -1)
        return delivered

    async def _deliver_one(self, entry: bytes) -> bool:
        if entry.startswith(b"\0"):
            parts = entry[1:].split(b"\0", 5)
            if len(parts) != 6 or parts[0] != b"fail":
                return False
            _, parent_queue, parent, child, policy, error = parts
            k = QueueKeys.of(parent_queue.decode())
            row = k.job(parent.decode())
            was_dead = await self._is_dead(k.queue, parent.decode())
            await self._run(
                "flow_fail_deliver",
                [row + ":dependencies", row + ":failed", row + ":unsuccessful", row],
                [child, error, policy, k.prefix, parent],
            )
            if not was_dead and await self._is_dead(k.queue, parent.decode()):
                await self._climb(k.queue, parent.decode(), error.decode())
            return True
        parts = entry.split(b"\0", 3)
        if len(parts) != 4:
            return False
        parent_queue, parent, child, result = parts
        k = QueueKeys.of(parent_queue.decode())
        row = k.job(parent.decode())
        await self._run(
            "flow_deliver",
            [row + ":dependencies", row + ":processed", row],
            [child, result, parent, k.prefix],
        )
        return True

    # --- reads ------------------------------------------------------------------------------

    async def children_values(self, queue: str, parent: str) -> dict[str, bytes]:
        """Flows.children_values: HGETALL of the parent's :processed."""
        reply = await self.client.hgetall(QueueKeys.of(queue).job(parent) + ":processed")
        return {k.decode(): v for k, v in cast(dict[bytes, bytes], reply).items()}
