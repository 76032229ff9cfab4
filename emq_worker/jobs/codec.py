"""The default payload codec: a small JSON envelope naming the task and its keyword arguments.

`{"task": "charge", "kwargs": {"order_id": "A1", "amount": 1200}}`, with an `"options"` object
only when the producer overrides the task's policy for this job (options.py). Never pickle: a
payload read from Redis is untrusted input.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

from emq_worker.errors import PayloadError
from emq_worker.jobs.policy import JobPolicy


def _pick_loads() -> Callable[[bytes], Any]:
    """orjson's loads where the `fast` extra is installed (several times faster; its errors are
    ValueErrors too), else the standard library's."""
    try:
        return cast(Callable[[bytes], Any], importlib.import_module("orjson").loads)
    except ImportError:
        return json.loads


_loads = _pick_loads()


def _refuse(value: object) -> Any:
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _pick_dumps() -> Callable[[Any], bytes] | None:
    """orjson's dumps where the `fast` extra is installed (about 10x faster), made as strict as
    the standard library's where it can be: subclasses, dataclasses and datetimes go to
    `_refuse` (the standard library's TypeError) instead of being encoded natively."""
    try:
        orjson = importlib.import_module("orjson")
    except ImportError:
        return None
    option = (
        orjson.OPT_PASSTHROUGH_SUBCLASS
        | orjson.OPT_PASSTHROUGH_DATACLASS
        | orjson.OPT_PASSTHROUGH_DATETIME
    )

    def dumps(value: Any) -> bytes:
        return cast(bytes, orjson.dumps(value, default=_refuse, option=option))

    return dumps


_dumps = _pick_dumps()


FLOW_CHILD = "flow_child"
"""The envelope field (true) of a flow child: the worker hands its return value to the parent."""

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Built once: json.dumps with any non-default option builds a new encoder on every call."""


def encode(
    task: str,
    kwargs: Mapping[str, Any] | None = None,
    options: JobPolicy | None = None,
    trace: Mapping[str, str] | None = None,
    *,
    flow_child: bool = False,
) -> bytes:
    """`trace`: the W3C trace context of the enqueue (`traceparent`, `tracestate`; tracing.py).
    `flow_child`: the job is a flow child, whose return value its parent reads
    (jobs/flow_tree.py)."""
    if not isinstance(task, str) or not task:
        raise PayloadError(f"task name must be a non-empty string; got {task!r}")
    envelope: dict[str, Any] = {"task": task, "kwargs": dict(kwargs or {})}
    if options is not None and not options.empty:
        envelope["options"] = options.to_wire()
    if trace:
        envelope["trace"] = dict(trace)
    if flow_child:
        envelope[FLOW_CHILD] = True
    if _dumps is not None:
        try:
            encoded = _dumps(envelope)
        except TypeError:
            pass  # what orjson refuses (an int key, a 65-bit int): the standard library decides
        else:
            # orjson writes NaN and infinities as null, where JSON has no such numbers: any
            # null goes through the standard library, which refuses them by name.
            if b"null" not in encoded:
                return encoded
    try:
        return _ENCODER.encode(envelope).encode()
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"kwargs of task {task!r} are not JSON-serialisable: {exc}") from exc


def encode_value(value: Any) -> bytes:
    """Compact JSON of any value (a handler's result, a progress value); raises TypeError or
    ValueError for what JSON cannot hold (NaN, infinity, objects)."""
    return _ENCODER.encode(value).encode()


def decode_value(data: bytes) -> Any:
    """Any JSON value; raises ValueError (or UnicodeDecodeError) for what is not JSON."""
    return _loads(data)


def decode(payload: bytes) -> tuple[str, dict[str, Any]]:
    """Return (task, kwargs), or raise PayloadError saying exactly what is wrong."""
    task, kwargs, _ = decode_job(payload)
    return task, kwargs


class Message(NamedTuple):
    task: str
    kwargs: dict[str, Any]
    options: JobPolicy | None
    trace: dict[str, str] | None
    """The enqueue's W3C trace context, when the envelope carries a well-formed one."""
    flow_child: bool = False
    """A flow child: its return value goes to its parent's record (jobs/flow_tree.py)."""


def decode_job(payload: bytes) -> tuple[str, dict[str, Any], JobPolicy | None]:
    """Return (task, kwargs, options or None), or raise PayloadError saying what is wrong."""
    message = decode_message(payload)
    return message.task, message.kwargs, message.options


def decode_message(payload: bytes) -> Message:
    """The envelope's fields, or PayloadError saying what is wrong. Fields it does not know are
    ignored (an envelope from a newer producer still runs), and so is a malformed `trace`:
    tracing never costs a job."""
    try:
        envelope = _loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # RecursionError: the standard library's parser on deeply nested arrays (orjson stops at
        # depth 1024 with a ValueError); either way the job is dead-lettered, the worker goes on.
        raise PayloadError(f"payload is not JSON: {exc!s:.200}; starts {payload[:40]!r}") from exc
    if not isinstance(envelope, dict):
        raise PayloadError(f"payload must be a JSON object; got {type(envelope).__name__}")
    task = envelope.get("task")
    if not isinstance(task, str) or not task:
        raise PayloadError(f'payload has no task name ("task": string); got {task!r}')
    kwargs = envelope.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise PayloadError(f"payload kwargs must be a JSON object; got {type(kwargs).__name__}")
    trace = _trace_of(envelope)
    child = envelope.get(FLOW_CHILD) is True
    options = envelope.get("options")
    if options is None:
        return Message(task, kwargs, None, trace, child)  # the common case: no per-job options
    return Message(task, kwargs, JobPolicy.from_wire(options), trace, child)


def _trace_of(envelope: dict[str, Any]) -> dict[str, str] | None:
    trace = envelope.get("trace")
    if not isinstance(trace, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in trace.items()
    ):
        return None
    return trace
