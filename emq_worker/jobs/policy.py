"""A job's policy: how often it may run, how it backs off, how long it may take, how long its
result is kept. One value, one merge rule.

`JobPolicy` is a set of overrides (None leaves a field to the layer below); `Policy` is the
resolved value a handler runs under. `resolve(defaults, task, job)` applies the layers in one
order everywhere: the worker's defaults, then the task's declared policy, then the producer's
per-job overrides. The per-job ones travel in the JSON envelope as `"options": {...}` beside
`task` and `kwargs`, only when some option is given, so the common payload is unchanged:
`{"task": "charge", "kwargs": {...}, "options": {"max_attempts": 5, "backoff": "fixed:500"}}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

from emq_worker.errors import ConfigError, PayloadError
from emq_worker.retry import Backoff, format_backoff, parse_backoff


class PolicyOptions(TypedDict, total=False):
    """A task's (`@app.task(...)`) or one job's (`Producer.enqueue(...)`) policy overrides, as
    keywords: declared once, taken with `Unpack` everywhere; None leaves the layer below."""

    max_attempts: int | None
    """Runs before the job is dead-lettered (>= 1)."""
    backoff: Backoff | None
    """The delay policy between retries."""
    timeout_ms: int | None
    """The handler's time limit (>= 1)."""
    result_ttl_ms: int | None
    """Store the handler's return value for this long (>= 1), or 0 to store none."""


WIRE_NAMES = PolicyOptions.__optional_keys__
"""The policy's names, as the JSON envelope's `options` carries them."""


class Policy(NamedTuple):
    """A resolved policy: every field set."""

    max_attempts: int
    backoff: Backoff
    timeout_ms: int
    result_ttl_ms: int
    """0: keep no result."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPolicy:
    """Overrides, for a task or for one job; None leaves the layer below in force."""

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
    def from_wire(cls, wire: Any) -> JobPolicy:
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


def resolve(defaults: Policy, *layers: JobPolicy | None) -> Policy:
    """The one merge rule: each layer's set fields override those below it, in order."""
    max_attempts, backoff, timeout_ms, result_ttl_ms = defaults
    for layer in layers:
        if layer is None:
            continue
        if layer.max_attempts is not None:
            max_attempts = layer.max_attempts
        if layer.backoff is not None:
            backoff = layer.backoff
        if layer.timeout_ms is not None:
            timeout_ms = layer.timeout_ms
        if layer.result_ttl_ms is not None:
            result_ttl_ms = layer.result_ttl_ms
    return Policy(max_attempts, backoff, timeout_ms, result_ttl_ms)


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer; got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}; got {value}")


def declared_policy(owner: str, options: PolicyOptions) -> JobPolicy:
    """The overrides `options` give, or ConfigError naming `owner` and the value (a task's
    declaration: `task 'charge': max_attempts must be ...`)."""
    unknown = sorted(set(options) - WIRE_NAMES)
    if unknown:
        raise TypeError(f"{owner}: unexpected keyword argument {unknown[0]!r}")
    try:
        return JobPolicy(**options)
    except ConfigError as exc:
        raise ConfigError(f"{owner}: {exc}") from exc
