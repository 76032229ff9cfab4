"""Fenced writes a running job makes about itself: its progress (row field plus an event on the
queue's `events` channel) and lines of its job log (`job:<id>:logs`, the last N kept).

Both go through a script that runs the same fence as a settle, so a holder whose lease was lost
(reaped, re-claimed, removed) is refused and gets a FencedError.
"""

from __future__ import annotations

import math
from typing import Any, Final

from emq_worker.errors import ConfigError, FencedError
from emq_worker.jobs import codec
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import text
from emq_worker.protocol.values import HeldLease

LOG_KEEP: Final = 1000
"""Lines a job log keeps by default (the oldest are trimmed)."""
MAX_LOG_LINE: Final = 64 * 1024
"""Bytes of one log line at most."""
MAX_PROGRESS: Final = 4 * 1024
"""Bytes of a progress value's JSON at most: progress is a small status, not a payload."""


def progress_json(value: object) -> bytes:
    """The JSON of a progress value (a finite number, or a small JSON object), or ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int | float | dict):
        raise ConfigError(f"progress must be a number or a JSON object; got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"progress must be a finite number; got {value!r}")
    try:
        data = codec.encode_value(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"progress is not JSON-serialisable: {exc}; got {value!r}") from exc
    if len(data) > MAX_PROGRESS:
        raise ConfigError(
            f"progress JSON is {len(data)} bytes; at most {MAX_PROGRESS} (got {data[:60]!r}...)"
        )
    return data


def _checked(lease: HeldLease, reply: Any) -> int:
    status, detail = text(reply[0]), text(reply[1])
    if status != "ok":
        raise FencedError(lease.id, status, detail)
    return int(detail)


async def report_progress(queue: Queue, lease: HeldLease, value: object) -> int:
    """HSET the row's `progress` and publish a `progress` event; the number of subscribers that
    received it. Raises FencedError when this holder no longer owns the job."""
    data = progress_json(value)
    reply = await queue.run(
        "progress",
        [queue.keys.prefix, queue.name, lease.id, lease.token, lease.nonce, data],
        job_id=lease.id,
    )
    return _checked(lease, reply)


async def append_log(queue: Queue, lease: HeldLease, line: str, keep: int = LOG_KEEP) -> int:
    """Append `line` to the job's log, keeping its last `keep` lines; the number kept. Raises
    FencedError when this holder no longer owns the job."""
    if not isinstance(line, str):
        raise ConfigError(f"a job log line must be a str; got {type(line).__name__}: {line!r}")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"keep must be an integer >= 1; got {keep!r}")
    data = line.encode()
    if len(data) > MAX_LOG_LINE:
        raise ConfigError(
            f"a job log line is at most {MAX_LOG_LINE} bytes; got {len(data)} ({line[:60]!r}...)"
        )
    reply = await queue.run(
        "joblog",
        [queue.keys.prefix, lease.id, lease.token, lease.nonce, keep, data],
        job_id=lease.id,
    )
    return _checked(lease, reply)


async def read_log(queue: Queue, job_id: str) -> list[str]:
    """Every line the job's log keeps, oldest first (decoded as UTF-8 with replacement)."""
    lines = await queue.client.lrange(queue.keys.logs(job_id), 0, -1)
    return [
        line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line) for line in lines
    ]
