"""Per-queue concurrency ceiling and rate limit: stored in `emq:{q}:meta`, enforced by claim.

`meta.concurrency` caps the jobs active across every worker of the queue; `meta.max` jobs may be
leased per window of `meta.duration` ms, counted in the `emq:{q}:limiter` key (the wire's names;
`duration` is emq-worker's, EchoMQ keeps the window in its caller). The claim script reads all
three with one HMGET and enforces them atomically, so a limit holds whatever the number of
workers; see lua/claim.lua for the reply a limited claim gives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from emq_worker.errors import ConfigError
from emq_worker.protocol.keys import QueueKeys

LIMITER: Final = "limiter"
"""The rate limit's counter, `emq:{q}:limiter`: jobs leased in the current window."""
CONCURRENCY_FIELD: Final = "concurrency"
MAX_FIELD: Final = "max"
DURATION_FIELD: Final = "duration"
CEILING_POLL_MS: Final = 50
"""How soon a worker refused by the concurrency ceiling claims again: a slot freed by another
worker announces nothing, so the worker polls (one HMGET and one ZCARD) at this pace."""

_UNITS_MS: Final = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}
_RATE = re.compile(r"(\d+)/(\d*)(ms|s|m|h)")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `max` jobs leased per window of `duration_ms` (windows aligned on the server
    clock: [k x duration_ms, (k + 1) x duration_ms))."""

    max: int
    duration_ms: int

    def __post_init__(self) -> None:
        if self.max < 1:
            raise ConfigError(f"rate max must be an integer >= 1; got {self.max!r}")
        if self.duration_ms < 1:
            raise ConfigError(f"rate window must be >= 1 ms; got {self.duration_ms!r}")

    def __str__(self) -> str:
        return f"{self.max}/{self.duration_ms}ms"


@dataclass(frozen=True, slots=True)
class Limits:
    concurrency: int | None = None
    """The most jobs active at once across all workers; None: no ceiling."""
    rate: Rate | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"concurrency must be an integer >= 1; got {self.concurrency!r}")

    def as_dict(self) -> dict[str, int | None]:
        return {
            "concurrency": self.concurrency,
            "rate_max": self.rate.max if self.rate else None,
            "rate_window_ms": self.rate.duration_ms if self.rate else None,
        }


def parse_rate(text: str) -> Rate:
    """`100/1s`, `100/s`, `5/250ms`, `60/1m`, `1000/1h` as a Rate, or ConfigError naming it."""
    match = _RATE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            f"rate must be MAX/WINDOW with WINDOW a count of ms, s, m or h (e.g. 100/1s or "
            f"5/250ms); got {text!r}"
        )
    count, amount, unit = match.groups()
    return Rate(int(count), int(amount or "1") * _UNITS_MS[unit])


def _positive(raw: bytes | str | None) -> int | None:
    """A meta field as the claim script reads it: a positive integer, else no limit."""
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None


async def read_limits(client: Redis, queue: str) -> Limits:
    meta = QueueKeys.of(queue).meta
    concurrency, rate_max, duration = await client.hmget(
        meta, [CONCURRENCY_FIELD, MAX_FIELD, DURATION_FIELD]
    )
    ceiling, most, window = _positive(concurrency), _positive(rate_max), _positive(duration)
    rate = Rate(most, window) if most is not None and window is not None else None
    return Limits(concurrency=ceiling, rate=rate)


async def set_limits(
    client: Redis, queue: str, *, concurrency: int | None = None, rate: Rate | None = None
) -> Limits:
    """Set whichever of the ceiling and rate are given (others are kept); the limits now held."""
    if concurrency is not None:
        Limits(concurrency=concurrency)  # validates
    fields: dict[FieldT, EncodableT] = {}
    if concurrency is not None:
        fields[CONCURRENCY_FIELD] = concurrency
    if rate is not None:
        fields[MAX_FIELD] = rate.max
        fields[DURATION_FIELD] = rate.duration_ms
    if fields:
        await client.hset(QueueKeys.of(queue).meta, mapping=fields)
    return await read_limits(client, queue)


async def clear_limits(
    client: Redis, queue: str, *, concurrency: bool = True, rate: bool = True
) -> None:
    """Lift the ceiling and/or the rate limit (the limiter counter goes with the rate)."""
    keys = QueueKeys.of(queue)
    fields = ([CONCURRENCY_FIELD] if concurrency else []) + (
        [MAX_FIELD, DURATION_FIELD] if rate else []
    )
    async with client.pipeline(transaction=True) as pipe:
        if fields:
            pipe.hdel(keys.meta, *fields)
        if rate:
            pipe.delete(keys.prefix + LIMITER)
        await pipe.execute()
