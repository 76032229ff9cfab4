"""A completed job's return value, as `settle` stores it (`p result:<id>`, PX the task's
`result_ttl_ms`): `{"value": ...}`, or `{"error": ...}` when JSON could not hold it. A page reads
at most RESULT_READ bytes of it: a huge result is shown cut, never read whole."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from emq_worker.admin import verbs
from emq_worker.jobs import codec
from emq_worker.protocol.keys import QueueKeys

RESULT_READ = 65_536
"""Bytes of a stored result a page reads at most."""


@dataclass(frozen=True, slots=True)
class StoredResult:
    stored: dict[str, Any] | None
    """The stored object, decoded (None when it was cut at RESULT_READ or does not decode)."""
    text: str
    """What a page shows: the value as indented JSON (or the stored text), cut at PAYLOAD_SHOWN."""
    size: int
    """The stored bytes."""

    @property
    def truncated(self) -> bool:
        return self.size > RESULT_READ or len(self.text) >= verbs.PAYLOAD_SHOWN

    def as_dict(self) -> dict[str, Any]:
        """`{"value": ...}` or `{"error": ...}` as stored; a result too big to read whole gives
        its bytes and the start of its text instead."""
        if self.stored is not None:
            return {**self.stored, "bytes": self.size}
        return {"bytes": self.size, "text": self.text, "truncated": True}


def result_key(keys: QueueKeys, job_id: str) -> str:
    return f"{keys.prefix}result:{job_id}"


async def stored_result(client: Redis, queue: str, job_id: str) -> StoredResult | None:
    """The job's stored result, or None when none is kept (none was stored, or it expired)."""
    key = result_key(QueueKeys.of(queue), job_id)
    async with client.pipeline(transaction=False) as pipe:
        pipe.strlen(key)
        pipe.getrange(key, 0, RESULT_READ - 1)
        size, head = await pipe.execute()
    if not size:
        return None
    stored = _decoded(head) if int(size) <= RESULT_READ else None
    if stored is None:
        shown = head.decode("utf-8", "replace")
    elif "value" in stored:
        shown = json.dumps(stored["value"], indent=2, ensure_ascii=False)
    else:
        shown = f"(not stored: {stored.get('error')})"
    return StoredResult(stored, shown[: verbs.PAYLOAD_SHOWN], int(size))


def _decoded(raw: bytes) -> dict[str, Any] | None:
    try:
        stored = codec.decode_value(raw)
    except ValueError:
        return None
    return stored if isinstance(stored, dict) else None
