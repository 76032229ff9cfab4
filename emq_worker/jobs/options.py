"""Per-job options: what a producer may override, per enqueue, of a task's declared policy.

They travel in the JSON envelope as `"options": {...}` beside `task` and `kwargs`, only when
some option is given, so the common payload is unchanged:
`{"task": "charge", "kwargs": {...}, "options": {"max_attempts": 5, "backoff": "fixed:500"}}`.
A worker applies them over the task's own policy, which applies over the worker's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emq_worker.errors import ConfigError, PayloadError
from emq_worker.retry import Backoff, format_backoff, parse_backoff

WIRE_NAMES = frozenset({"max_attempts", "backoff", "timeout_ms", "result_ttl_ms"})


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Overrides for one job; None leaves the task's (or the worker's) setting in force."""

    max_attempts: int | None = None
    """Runs before the job is dead-lettered (>= 1)."""
    backoff: Backoff | None = None
    """The delay policy between retries."""
    timeout_ms: int | None = None
    """The handler's time limit (>= 1)."""
    result_ttl_ms: int | None = None
    """Store the handler's return value for this long (>= 1), or 0 to store none even when the
    task declares a result TTL."""

    def __post_init__(self) -> None:
        _check_int("max_attempts", self.max_attempts, minimum=1)
        _check_int("timeout_ms", self.timeout_ms, minimum=1)
        _check_int("result_ttl_ms", self.result_ttl_ms, minimum=0)

    @property
    def empty(self) -> bool:
        return (
            self.max_attempts is None
            and self.backoff is None
            and self.timeout_ms is None
            and self.result_ttl_ms is None
        )

    def to_wire(self) -> dict[str, Any]:
        """The envelope's `options` object: only the options that are set."""
        wire: dict[str, Any] = {}
        if self.max_attempts is not None:
            wire["max_attempts"] = self.max_attempts
        if self.backoff is not None:
            wire["backoff"] = format_backoff(self.backoff)
        if self.timeout_ms is not None:
            wire["timeout_ms"] = self.timeout_ms
        if self.result_ttl_ms is not None:
            wire["result_ttl_ms"] = self.result_ttl_ms
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> JobOptions:
        """Parse the envelope's `options`, or raise PayloadError naming the offending value."""
        if not isinstance(wire, dict):
            raise PayloadError(f"payload options must be a JSON object; got {wire!r}")
        unknown = wire.keys() - WIRE_NAMES
        if unknown:
            raise PayloadError(
                f"unknown job option(s) {sorted(unknown)}; known: {sorted(WIRE_NAMES)}"
            )
        backoff = wire.get("backoff")
        try:
            if backoff is not None:
                if not isinstance(backoff, str):
                    raise ConfigError(
                        f"backoff must be a string such as 'fixed:500'; got {backoff!r}"
                    )
                backoff = parse_backoff(backoff)
            return cls(
                max_attempts=wire.get("max_attempts"),
                backoff=backoff,
                timeout_ms=wire.get("timeout_ms"),
                result_ttl_ms=wire.get("result_ttl_ms"),
            )
        except ConfigError as exc:
            raise PayloadError(f"bad job options {wire!r}: {exc}") from exc


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer; got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}; got {value}")
