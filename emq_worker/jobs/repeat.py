"""Repeatable jobs: a named schedule (every N ms, or a cron expression) that mints a normal job at
each due time on the server clock.

Keys (the wire's `repeat` names): `emq:{q}:repeat` is a ZSET of repeat names scored by their next
due ms (+inf while paused); `emq:{q}:repeat:<name>` is a HASH holding the job `payload`, the
schedule (`every_ms` or `cron`), `paused` (presence), `minted`, `last_job` and `last_due`.

Who mints: every worker's beat calls `RepeatFirer.fire`, which reads the due names and the server
time, computes each one's following due time here (cron needs croniter), and sends all of them to
the `repeat` script. The script mints the job and moves the score in one step, but only if the
score still equals the due time read (a compare-and-set): when two workers race, one mints and
the other gets 'moved' and writes nothing, so an occurrence is minted exactly once. Occurrences
missed while no worker ran collapse into one: the next due time is always after the server's now.
Cron expressions are read in UTC (5 fields, or 6 with seconds last, as croniter takes them).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from croniter import croniter
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.typing import EncodableT, FieldT

from emq_worker.errors import ConfigError, PayloadError
from emq_worker.jobs import codec
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.keys import QueueKeys
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.scripts import ArgValue, wake_cap
from emq_worker.protocol.servertime import server_ms

REPEAT: Final = "repeat"
FIRE_BATCH: Final = 100
"""The most due repeats one script call mints."""
MAX_TAKEN_RETRIES: Final = 3
MAX_PASSES: Final = 10
"""Bounds one beat's minting; what is left is due at once, so the next pass comes soon."""
_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def validate_repeat_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"repeat name must match [A-Za-z0-9._:-]{{1,128}}; got {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class Schedule:
    """Exactly one of `every_ms` (> 0) and `cron` (a croniter expression, UTC)."""

    every_ms: int | None = None
    cron: str | None = None

    def __post_init__(self) -> None:
        if (self.every_ms is None) == (self.cron is None):
            raise ConfigError("give every_ms or cron, exactly one")
        if self.every_ms is not None and (
            not isinstance(self.every_ms, int)
            or isinstance(self.every_ms, bool)
            or self.every_ms < 1
        ):
            raise ConfigError(f"every_ms must be an integer >= 1; got {self.every_ms!r}")
        if self.cron is not None and not croniter.is_valid(self.cron):
            raise ConfigError(f"not a valid cron expression: {self.cron!r}")

    def following(self, due_ms: int, now_ms: int) -> int:
        """The first due time after both `due_ms` and the server's `now_ms`."""
        if self.every_ms is not None:
            if due_ms > now_ms:
                return due_ms
            return due_ms + self.every_ms * ((now_ms - due_ms) // self.every_ms + 1)
        start = dt.datetime.fromtimestamp(max(due_ms, now_ms) / 1000, tz=dt.UTC)
        following = croniter(str(self.cron), start).get_next(dt.datetime)
        return int(following.timestamp() * 1000)

    def first(self, now_ms: int) -> int:
        """The first due time of a schedule registered at `now_ms`."""
        if self.every_ms is not None:
            return now_ms + self.every_ms
        return self.following(now_ms, now_ms)

    def fields(self) -> dict[str, str]:
        if self.every_ms is not None:
            return {"every_ms": str(self.every_ms)}
        return {"cron": str(self.cron)}

    def __str__(self) -> str:
        return f"every {self.every_ms} ms" if self.every_ms is not None else f"cron {self.cron}"

    @classmethod
    def of(cls, spec: Mapping[str, str]) -> Schedule:
        every = spec.get("every_ms")
        return cls(every_ms=int(every)) if every else cls(cron=spec.get("cron"))


@dataclass(frozen=True, slots=True)
class RepeatInfo:
    queue: str
    name: str
    schedule: Schedule
    paused: bool
    next_due_ms: int | None
    """Unix ms on the server clock; None while paused."""
    minted: int
    last_job: str | None
    payload: bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "name": self.name,
            "schedule": str(self.schedule),
            "paused": self.paused,
            "next_due_ms": self.next_due_ms,
            "minted": self.minted,
            "last_job": self.last_job,
            "payload": self.payload.decode("utf-8", "replace"),
        }


def _wake(pipe: Pipeline, queue: str) -> None:
    """One wake token: a parked worker fires its repeats and learns the new due time, so the
    first occurrence is minted on time, not at the next beat."""
    wake = QueueKeys.of(queue).wake
    pipe.lpush(wake, "1")
    pipe.ltrim(wake, 0, wake_cap() - 1)


def _keys(queue: str, name: str) -> tuple[str, str]:
    prefix = QueueKeys.of(queue).prefix
    return prefix + REPEAT, f"{prefix}{REPEAT}:{validate_repeat_name(name)}"


def _decoded(row: Mapping[Any, Any]) -> dict[str, str]:
    return {
        text(k): v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        for k, v in row.items()
        if text(k) != "payload"
    }


async def register(
    client: Redis, queue: str, name: str, payload: bytes, schedule: Schedule
) -> RepeatInfo:
    """Create or update the repeat `name`. Registering the same payload and schedule again (an
    application that registers at every start) changes nothing, so its next due time stays put;
    a change re-times it from now. A paused repeat stays paused."""
    index, spec_key = _keys(queue, name)
    current = await get_repeat(client, queue, name)
    if current and current.payload == payload and current.schedule == schedule:
        return current
    now = await server_ms(client, index)
    async with client.pipeline(transaction=True) as pipe:
        pipe.hdel(spec_key, "every_ms", "cron")
        fields: dict[FieldT, EncodableT] = {"payload": payload}
        fields.update(schedule.fields())
        pipe.hset(spec_key, mapping=fields)
        if current is None or not current.paused:
            pipe.zadd(index, {name: schedule.first(now)})
            _wake(pipe, queue)
        await pipe.execute()
    info = await get_repeat(client, queue, name)
    assert info is not None
    return info


async def get_repeat(client: Redis, queue: str, name: str) -> RepeatInfo | None:
    index, spec_key = _keys(queue, name)
    async with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(spec_key)
        pipe.zscore(index, name)
        row, score = await pipe.execute()
    if not row or b"payload" not in row:
        return None
    spec = _decoded(row)
    return RepeatInfo(
        queue=queue,
        name=name,
        schedule=Schedule.of(spec),
        paused="paused" in spec,
        next_due_ms=None if score is None or math.isinf(score) else int(score),
        minted=int(spec.get("minted", "0")),
        last_job=spec.get("last_job"),
        payload=row[b"payload"],
    )


async def list_repeats(client: Redis, queue: str) -> list[RepeatInfo]:
    index = QueueKeys.of(queue).prefix + REPEAT
    names = [text(name) for name in await client.zrange(index, 0, -1)]
    found = [await get_repeat(client, queue, name) for name in names]
    return [info for info in found if info is not None]


async def pause_repeat(client: Redis, queue: str, name: str) -> RepeatInfo:
    """Stop minting `name` (its score becomes +inf) until resumed."""
    index, spec_key = _keys(queue, name)
    await _require(client, queue, name)
    async with client.pipeline(transaction=True) as pipe:
        pipe.hset(spec_key, "paused", "1")
        pipe.zadd(index, {name: math.inf}, xx=True)
        await pipe.execute()
    return await _require(client, queue, name)


async def resume_repeat(client: Redis, queue: str, name: str) -> RepeatInfo:
    """Mint `name` again from its first due time after now (missed occurrences are skipped)."""
    index, spec_key = _keys(queue, name)
    info = await _require(client, queue, name)
    if info.paused:
        now = await server_ms(client, index)
        async with client.pipeline(transaction=True) as pipe:
            pipe.hdel(spec_key, "paused")
            pipe.zadd(index, {name: info.schedule.first(now)})
            _wake(pipe, queue)
            await pipe.execute()
    return await _require(client, queue, name)


async def remove_repeat(client: Redis, queue: str, name: str) -> bool:
    """Delete the schedule (jobs it already minted stay); False when there was none."""
    index, spec_key = _keys(queue, name)
    async with client.pipeline(transaction=True) as pipe:
        pipe.zrem(index, name)
        pipe.delete(spec_key)
        removed, deleted = await pipe.execute()
    return bool(removed or deleted)


async def _require(client: Redis, queue: str, name: str) -> RepeatInfo:
    info = await get_repeat(client, queue, name)
    if info is None:
        raise ConfigError(f"no repeat named {name!r} on queue {queue!r}")
    return info


class RepeatFirer:
    """Mints due occurrences for a worker's beat (see the module docstring for the race)."""

    def __init__(self, minter: SnowflakeMinter) -> None:
        self.minter = minter

    async def fire(self, queue: Queue) -> int | None:
        """Mint every due occurrence on `queue`; ms until its next repeat is due (None: none)."""
        k = queue.keys
        for _ in range(MAX_PASSES):
            reply = await queue.run("repeat_due", [k.prefix, FIRE_BATCH])
            now, next_in = int(reply[0]), int(reply[1])
            due = [
                (text(reply[i]), int(reply[i + 1]), text(reply[i + 2]), text(reply[i + 3]))
                for i in range(2, len(reply), 4)
            ]
            if not due:
                return None if next_in < 0 else next_in
            # Then one more pass: it reads the new scores (and mints past FIRE_BATCH).
            await self._mint(queue, due, now)
        return 0

    async def _mint(self, queue: Queue, due: Sequence[tuple[str, int, str, str]], now: int) -> None:
        todo: list[tuple[str, int, int | str]] = []
        for name, due_ms, every, cron in due:
            following: int | str
            try:
                following = Schedule.of({"every_ms": every, "cron": cron}).following(due_ms, now)
            except (ConfigError, ValueError):
                following = "+inf"  # a schedule damaged by hand: mint once, then park it
            todo.append((name, due_ms, following))
        k = queue.keys
        for _ in range(MAX_TAKEN_RETRIES):
            args: list[ArgValue] = [k.prefix]
            for name, due_ms, following in todo:
                args += [name, due_ms, following, self.minter.job_id()]
            reply = await queue.run("repeat", args)
            todo = [
                entry for entry, status in zip(todo, reply, strict=True) if text(status) == "taken"
            ]
            if not todo:
                return


def encode_payload(task: str, kwargs: Mapping[str, Any] | None) -> bytes:
    """The payload each occurrence carries: the usual JSON envelope."""
    try:
        return codec.encode(task, kwargs)
    except PayloadError as exc:
        raise ConfigError(str(exc)) from exc


__all__ = [
    "RepeatFirer",
    "RepeatInfo",
    "Schedule",
    "get_repeat",
    "list_repeats",
    "pause_repeat",
    "register",
    "remove_repeat",
    "resume_repeat",
    "validate_repeat_name",
]
