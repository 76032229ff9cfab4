"""EchoMQ's side of a shared queue, at the wire level: its scripts restated from the wire notes
(`/work/shared/echomq-wire.md`, sections 4 and 7) and its own source (`echo_mq/jobs.ex`; each
file's header names the script it restates) as Lua files beside this module, defects D1-D3 and
D7-D9 included, driven with the keys and arguments its Elixir callers send. `complete` and
`retry` are the scripts `Jobs.complete`/`Jobs.retry` run for a job without a flow parent, flat or
grouped (its flow branches: flows.py).

Each call sends the script text with EVAL (EchoMQ runs EVALSHA with its own SHAs; interop
depends only on the effects on keys). Replies are mapped the way EchoMQ's host code maps them:
"ok", "gone", "stale", "locked", "state".
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker.protocol.keys import QueueKeys

FOLDER = Path(__file__).resolve().parent
GROUPED_BRANCH = ("complete", "retry", "greap", "gpromote", "gresume", "glimit")
"""The scripts whose text opens with the grouped branch they share (lane_transition.lua).
EchoMQ's complete and retry are one script each for flat and grouped jobs alike."""
DEFAULT_LEASE_MS = 30_000
"""The Locks plane's lease; its marker TTL is twice that."""


@cache
def source(name: str) -> str:
    return (FOLDER / f"{name}.lua").read_text(encoding="utf-8")


async def command(client: Redis, *args: Any) -> Any:
    """A raw command redis-py has no method for (the hash-field TTL family)."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


def refusal(error: ResponseError) -> str:
    """EchoMQ's typed refusal as its host code reads it: the class word decides."""
    word = str(error).split(" ", 1)[0]
    known = {"EMQSTALE": "stale", "EMQLOCK": "locked", "EMQSTATE": "state", "EMQKIND": "kind"}
    if word not in known:
        raise error
    return known[word]


@dataclass(frozen=True, slots=True)
class Claimed:
    id: str
    payload: bytes
    token: int


@dataclass(slots=True)
class EchoMQ:
    """One EchoMQ client on queue `keys.queue`."""

    client: Redis
    keys: QueueKeys

    @classmethod
    def of(cls, client: Redis, queue: str) -> EchoMQ:
        return cls(client, QueueKeys.of(queue))

    @property
    def p(self) -> str:
        return self.keys.prefix

    async def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        text = source(name)
        if name in GROUPED_BRANCH:
            text = source("lane_transition") + text
        return await self.client.eval(text, len(keys), *keys, *args)

    async def enqueue(self, job_id: str, payload: bytes) -> bool:
        reply = await self.run(
            "enqueue", [self.keys.job(job_id), self.keys.pending], [job_id, payload]
        )
        return int(reply) == 1

    async def claim_batch(self, size: int, lease_ms: int) -> list[Claimed]:
        """Jobs.claim_batch: the host-side pause gate (D6), then bclaim."""
        if await self.client.hget(self.keys.meta, "paused") is not None:
            return []
        k = self.keys
        reply = await self.run("bclaim", [k.pending, k.active], [self.p + "job:", lease_ms, size])
        return [Claimed(i.decode(), payload or b"", int(att)) for i, payload, att in reply]

    async def claim(self, lease_ms: int) -> Claimed | None:
        jobs = await self.claim_batch(1, lease_ms)
        return jobs[0] if jobs else None

    async def complete(self, job_id: str, token: int) -> str:
        try:
            reply = await self.run(
                "complete", [self.keys.active, self.keys.job(job_id)], [job_id, token, self.p]
            )
        except ResponseError as exc:
            return refusal(exc)
        return "ok" if int(reply) == 1 else "gone"

    async def retry(
        self, job_id: str, token: int, *, delay_ms: int, max_attempts: int, error: str
    ) -> str:
        """Reply "scheduled", "dead", or "stale" (its "job gone" maps to stale too: D10)."""
        k = self.keys
        try:
            reply = await self.run(
                "retry",
                [k.active, k.schedule, k.dead, k.job(job_id)],
                [job_id, token, delay_ms, max_attempts, error, self.p],
            )
        except ResponseError as exc:
            return refusal(exc)
        return cast(bytes, reply).decode()

    async def delay(self, job_id: str, token: int, ms: int) -> str:
        """Delay mode "in": "ok", or "stale" (a token mismatch or the job gone)."""
        k = self.keys
        try:
            await self.run(
                "delay", [k.job(job_id), k.active, k.schedule], [job_id, token, "in", ms]
            )
        except ResponseError as exc:
            return refusal(exc)
        return "ok"

    async def promote(self, batch: int = 100) -> int:
        return int(
            await self.run("promote", [self.keys.schedule, self.keys.pending], [self.p, batch])
        )

    async def reap(self) -> int:
        return int(await self.run("reap", [self.keys.active, self.keys.pending], [self.p]))

    async def extend_locks(self, leases: list[tuple[str, int]], lease_ms: int) -> list[str]:
        """The Locks beat's renew-many: the ids that failed (stale and gone alike)."""
        args: list[Any] = [self.p, lease_ms]
        for job_id, token in leases:
            args += [job_id, token]
        reply = await self.run("extend_locks", [self.keys.active], args)
        return [member.decode() for member in reply]

    async def stalled(self, max_stalled: int = 1, limit: int = 100) -> tuple[list[str], list[str]]:
        """EchoMQ.Stalled.check: (recovered ids, dead ids)."""
        k = self.keys
        recovered, dead = await self.run(
            "stalled", [k.active, k.pending, k.dead], [self.p, max_stalled, limit]
        )
        return [i.decode() for i in recovered], [i.decode() for i in dead]

    async def remove_job(self, job_id: str, did: str = "") -> str:
        k = self.keys
        keys = [k.job(job_id), k.pending, k.active, k.schedule, k.dead, f"{self.p}de:{did}"]
        try:
            reply = await self.run("remove_job", keys, [job_id, did])
        except ResponseError as exc:
            return refusal(exc)
        return "ok" if int(reply) == 1 else "gone"

    async def reprocess(self, job_id: str) -> str:
        keys = [self.keys.job(job_id), self.keys.dead, self.keys.pending]
        try:
            reply = await self.run("reprocess", keys, [job_id])
        except ResponseError as exc:
            return refusal(exc)
        return "ok" if int(reply) == 1 else "gone"

    async def pause(self) -> None:
        await self.client.hset(self.keys.meta, "paused", "1")

    async def drain(self, *, include_schedule: bool = False) -> int:
        keys = [self.p, self.keys.pending]
        if include_schedule:
            keys.append(self.keys.schedule)
        return int(await self.run("drain", keys, []))

    async def obliterate(self, *, force: bool = False, budget: int = 1000) -> str:
        """Reply "ok", "more", or "state" (not paused, or active jobs present without force)."""
        try:
            reply = await self.run(
                "obliterate", [self.keys.meta, self.p], ["force" if force else "", budget]
            )
        except ResponseError as exc:
            return refusal(exc)
        return "ok" if int(reply) == 0 else "more"

    # --- the Locks plane (mq/locks.ex): plain commands, every result discarded (D13) ---------

    async def track_job(self, job_id: str, token: int, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        """SET the :lock marker PX 2 x lease, HSET the row's `lock` field, HPEXPIRE that field
        (an error on a server without hash-field TTL, which EchoMQ ignores)."""
        row, marker_ttl = self.keys.job(job_id), 2 * lease_ms
        await self.client.set(self.keys.lock(job_id), token, px=marker_ttl)
        await self.client.hset(row, "lock", token)
        with contextlib.suppress(ResponseError):  # Redis < 7.4: the field never expires (D13)
            await command(self.client, "HPEXPIRE", row, marker_ttl, "FIELDS", 1, "lock")

    async def untrack_job(self, job_id: str) -> None:
        await self.client.delete(self.keys.lock(job_id))
        await self.client.hdel(self.keys.job(job_id), "lock")
