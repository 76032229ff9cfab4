"""The default payload codec: a small JSON envelope naming the task and its keyword arguments.

`{"task": "charge", "kwargs": {"order_id": "A1", "amount": 1200}}`. Never pickle: a payload read
from Redis is untrusted input.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from typing import Any, cast

from emq_worker.errors import PayloadError


def _pick_loads() -> Callable[[bytes], Any]:
    """orjson's loads where the `fast` extra is installed (several times faster; its errors are
    ValueErrors too), else the standard library's."""
    try:
        return cast(Callable[[bytes], Any], importlib.import_module("orjson").loads)
    except ImportError:
        return json.loads


_loads = _pick_loads()


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Built once: json.dumps with any non-default option builds a new encoder on every call."""


def encode(task: str, kwargs: Mapping[str, Any] | None = None) -> bytes:
    if not isinstance(task, str) or not task:
        raise PayloadError(f"task name must be a non-empty string; got {task!r}")
    try:
        return _ENCODER.encode({"task": task, "kwargs": dict(kwargs or {})}).encode()
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"kwargs of task {task!r} are not JSON-serialisable: {exc}") from exc


def decode(payload: bytes) -> tuple[str, dict[str, Any]]:
    """Return (task, kwargs), or raise PayloadError saying exactly what is wrong."""
    try:
        envelope = _loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PayloadError(f"payload is not JSON: {exc}; starts {payload[:40]!r}") from exc
    if not isinstance(envelope, dict):
        raise PayloadError(f"payload must be a JSON object; got {type(envelope).__name__}")
    task = envelope.get("task")
    if not isinstance(task, str) or not task:
        raise PayloadError(f'payload has no task name ("task": string); got {task!r}')
    kwargs = envelope.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise PayloadError(f"payload kwargs must be a JSON object; got {type(kwargs).__name__}")
    return task, kwargs
