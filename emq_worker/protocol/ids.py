"""Branded ids: a 3-letter namespace and 11 base62 characters of a 63-bit snowflake.

Fixed width and an ASCII-ordered alphabet make byte order equal mint order, which is what
lets `pending` keep every score at 0 and still pop the oldest job first.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Final

from emq_worker.errors import ConfigError, JobIdError
from emq_worker.protocol.names import JOB_NAMESPACE, JobId

ALPHABET: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
WIDTH: Final = 11
EPOCH_MS: Final = 1_704_067_200_000  # 2024-01-01T00:00:00Z
MAX_SNOWFLAKE: Final = 2**63 - 1
MAX_NODE_ID: Final = 1023
DEFAULT_NODE_ID: Final = 1000
"""Python producers mint as node 1000; give Elixir nodes ids below 896 (docs/how-to/echomq.md)."""

_INDEX = {char: value for value, char in enumerate(ALPHABET)}
_NAMESPACE = re.compile(r"[A-Z]{3}")
_MAX_ENCODED = "AzL8n0Y58m7"


_PAIRS = [a + b for a in ALPHABET for b in ALPHABET]
"""Every two-digit base62 string in order: encoding takes 6 divisions instead of 11."""


_LOW = 62**5
_last_high: tuple[int, str] = (-1, "")
"""The six high digits of the last id encoded: ids minted together share them."""


def encode_base62(value: int) -> str:
    global _last_high
    if not 0 <= value <= MAX_SNOWFLAKE:
        raise JobIdError(f"snowflake must be in [0, 2^63-1]; got {value}")
    high, low = divmod(value, _LOW)
    cached_high, prefix = _last_high
    if high != cached_high:
        rest, last = divmod(high, 62)
        mid, pair2 = divmod(rest, 3844)
        top, pair1 = divmod(mid, 3844)
        prefix = _PAIRS[top] + _PAIRS[pair1] + _PAIRS[pair2] + ALPHABET[last]
        prefix = prefix[-6:]
        _last_high = (high, prefix)
    rest, last = divmod(low, 62)
    upper, lower = divmod(rest, 3844)
    return prefix + _PAIRS[upper] + _PAIRS[lower] + ALPHABET[last]


def encode(namespace: str, snowflake: int) -> str:
    if not _NAMESPACE.fullmatch(namespace):
        raise JobIdError(f"namespace must be three letters A-Z; got {namespace!r}")
    return namespace + encode_base62(snowflake)


def parse(branded: str) -> tuple[str, int]:
    """Split a branded id into (namespace, snowflake), or raise JobIdError naming it."""
    if len(branded) != 3 + WIDTH or not _NAMESPACE.fullmatch(branded[:3]):
        raise JobIdError(f"not a branded id (3 letters A-Z + 11 base62 chars): {branded!r}")
    body = branded[3:]
    if any(char not in _INDEX for char in body) or body > _MAX_ENCODED:
        raise JobIdError(f"not a branded id (payload out of base62 range): {branded!r}")
    value = 0
    for char in body:
        value = value * 62 + _INDEX[char]
    return branded[:3], value


def is_valid(branded: str) -> bool:
    try:
        parse(branded)
    except JobIdError:
        return False
    return True


def job_id(value: str) -> JobId:
    """Check that `value` is a JOB-namespaced branded id and type it as a JobId."""
    namespace, _ = parse(value)
    if namespace != JOB_NAMESPACE:
        raise JobIdError(f"job ids must be JOB-namespaced; got {value!r}")
    return JobId(value)


def unix_ms(snowflake: int) -> int:
    return (snowflake >> 22) + EPOCH_MS


class SnowflakeMinter:
    """Mints strictly increasing snowflakes for one node id, even across clock regression.

    Layout: `ms since 2024-01-01 (41 bits) << 22 | node (10) << 12 | seq (12)`. A burst of more
    than 4096 ids in one millisecond borrows from the next millisecond, as EchoMQ's does.
    """

    def __init__(self, node_id: int, now_ms: Callable[[], int] | None = None) -> None:
        if not 0 <= node_id <= MAX_NODE_ID:
            raise ConfigError(f"node_id must be in [0, {MAX_NODE_ID}]; got {node_id}")
        self.node_id = node_id
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._last = 0  # ts << 12 | seq
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            cell = max((self._now_ms() - EPOCH_MS) << 12, self._last + 1)
            self._last = cell
        ts, seq = cell >> 12, cell & 0xFFF
        return (ts << 22) | (self.node_id << 12) | seq

    def job_id(self) -> JobId:
        return JobId(encode(JOB_NAMESPACE, self.next()))

    def job_ids(self, count: int) -> list[JobId]:
        """`count` ids from consecutive cells, reserved under one lock (a bulk enqueue)."""
        if count <= 0:
            return []
        with self._lock:
            first = max((self._now_ms() - EPOCH_MS) << 12, self._last + 1)
            self._last = first + count - 1
        node = self.node_id << 12
        return [
            JobId("JOB" + encode_base62(((cell >> 12) << 22) | node | (cell & 0xFFF)))
            for cell in range(first, first + count)
        ]
