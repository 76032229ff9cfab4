"""EchoMQ's fair lanes (`EchoMQ.Lanes` and the grouped branches of `EchoMQ.Jobs`), played at the
wire level: its grouped scripts restated as the `g*.lua` files beside this module (the shared
grouped branch in `lane_transition.lua`; complete and retry are its one complete.lua and
retry.lua, which dispatch on the row's group as EchoMQ's do), driven with the keys and arguments
its callers send. Its defects are kept: the claim answers empty at a stale ring entry, the reaper
has no cap and drops a job's priority (score 0), and the claim checks no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import ResponseError

from tests.interop.echomq import EchoMQ, refusal


@dataclass(frozen=True, slots=True)
class GroupedJob:
    id: str
    payload: bytes
    token: int
    group: str


@dataclass(slots=True)
class EchoLanes:
    """EchoMQ's grouped verbs on the queue of `emq`."""

    emq: EchoMQ

    async def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self.emq.run(name, keys, args)

    def key(self, suffix: str) -> str:
        return self.emq.p + suffix

    async def enqueue(self, group: str, job_id: str, payload: bytes) -> bool:
        keys = [
            self.emq.keys.job(job_id),
            self.emq.keys.lane(group),
            *(self.key(name) for name in ("ring", "paused", "glimit", "gactive", "wake")),
        ]
        return int(await self.run("genqueue", keys, [job_id, payload, group])) == 1

    async def claim(self, lease_ms: int = 60_000) -> GroupedJob | None:
        """Lanes.claim: the host-side queue pause gate, then one rotation step."""
        if await self.emq.client.hget(self.emq.keys.meta, "paused") is not None:
            return None
        reply = await self.run(
            "gclaim", [self.key("ring"), self.emq.keys.active], [self.emq.p, lease_ms]
        )
        if not reply:
            return None
        job_id, payload, token, group = reply
        return GroupedJob(job_id.decode(), payload or b"", int(token), group.decode())

    async def complete(self, job_id: str, token: int) -> str:
        keys = [self.emq.keys.active, self.emq.keys.job(job_id)]
        try:
            reply = await self.run("complete", keys, [job_id, token, self.emq.p])
        except ResponseError as exc:
            return refusal(exc)
        return "ok" if int(reply) == 1 else "gone"

    async def retry(
        self, job_id: str, token: int, *, delay_ms: int, max_attempts: int, error: str
    ) -> str:
        k = self.emq.keys
        keys = [k.active, k.schedule, k.dead, k.job(job_id)]
        try:
            reply = await self.run(
                "retry", keys, [job_id, token, delay_ms, max_attempts, error, self.emq.p]
            )
        except ResponseError as exc:
            return refusal(exc)
        return cast(bytes, reply).decode()

    async def reap(self) -> int:
        keys = [self.emq.keys.active, self.emq.keys.pending]
        return int(await self.run("greap", keys, [self.emq.p]))

    async def promote(self, batch: int = 100) -> int:
        keys = [self.emq.keys.schedule, self.emq.keys.pending]
        return int(await self.run("gpromote", keys, [self.emq.p, batch]))

    async def pause(self, group: str) -> None:
        await self.run("gpause", [self.key("paused"), self.key("ring")], [group])

    async def resume(self, group: str) -> None:
        await self.run("gresume", [self.key("paused"), self.key("ring")], [self.emq.p, group])

    async def limit(self, group: str, n: int) -> None:
        await self.run("glimit", [self.key("glimit"), self.key("ring")], [self.emq.p, group, n])

    async def depth(self, group: str) -> int:
        """Lanes.depth / Metrics.lane_depths: ZCARD of the lane."""
        return int(await self.emq.client.zcard(self.emq.keys.lane(group)))
