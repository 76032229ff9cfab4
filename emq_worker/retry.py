"""Backoff policies for failed jobs. Pure: the random source is injected."""

from __future__ import annotations

import random
from dataclasses import dataclass

from emq_worker.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Fixed:
    delay_ms: int

    def __post_init__(self) -> None:
        if self.delay_ms < 0:
            raise ConfigError(f"fixed backoff delay_ms must be >= 0; got {self.delay_ms}")


@dataclass(frozen=True, slots=True)
class Exponential:
    """`min(base_ms * 2**(attempt-1), cap_ms)`."""

    base_ms: int
    cap_ms: int

    def __post_init__(self) -> None:
        if self.base_ms < 1 or self.cap_ms < 1:
            raise ConfigError(
                f"exponential backoff needs base_ms >= 1 and cap_ms >= 1; "
                f"got base_ms={self.base_ms}, cap_ms={self.cap_ms}"
            )
        if self.base_ms > self.cap_ms:
            raise ConfigError(
                f"exponential backoff needs base_ms <= cap_ms (the cap bounds every delay); "
                f"got base_ms={self.base_ms}, cap_ms={self.cap_ms}"
            )


@dataclass(frozen=True, slots=True)
class Jitter:
    """A uniform integer in [0, inner's delay] ("full jitter")."""

    inner: Fixed | Exponential


Backoff = Fixed | Exponential | Jitter
DEFAULT_BACKOFF: Backoff = Exponential(base_ms=1_000, cap_ms=300_000)


def delay_ms(policy: Backoff, attempt: int, rng: random.Random) -> int:
    """The delay before retrying after `attempt` (counted from 1) failed."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1; got {attempt}")
    match policy:
        case Fixed(delay):
            return int(delay)
        case Exponential(base, cap):
            return int(min(base * 2 ** min(attempt - 1, 62), cap))
        case Jitter(inner):
            bound = delay_ms(inner, attempt, rng)
            return 0 if bound <= 0 else rng.randint(0, bound)


def parse_backoff(spec: str) -> Backoff:
    """Parse `fixed:MS`, `exponential:BASE_MS:CAP_MS`, or `jitter:` before either."""
    jitter = spec.startswith("jitter:")
    body = spec.removeprefix("jitter:")
    kind, *numbers = body.split(":")
    try:
        values = [int(n) for n in numbers]
    except ValueError:
        values = []
    inner: Fixed | Exponential
    if kind == "fixed" and len(values) == 1:
        inner = Fixed(values[0])
    elif kind == "exponential" and len(values) == 2:
        inner = Exponential(values[0], values[1])
    else:
        raise ConfigError(
            "backoff must be fixed:MS, exponential:BASE_MS:CAP_MS, or jitter: before either; "
            f"got {spec!r}"
        )
    return Jitter(inner) if jitter else inner


def format_backoff(policy: Backoff) -> str:
    match policy:
        case Fixed(delay):
            return f"fixed:{delay}"
        case Exponential(base, cap):
            return f"exponential:{base}:{cap}"
        case Jitter(inner):
            return "jitter:" + format_backoff(inner)
