"""Names of a partitioned queue's partitions, and which partition a job goes to. Pure: no I/O.

A logical queue `q` split into N partitions is N plain EchoMQ queues (any EchoMQ worker can serve
one by name). With N = 1 the one partition is `q` itself, so an existing queue is the first
generation of its own partitioning. For N > 1, partition i of N is named `q.p<i>of<N>-<k>`,
where k is the smallest integer >= 0 that puts the name's cluster slot (CRC16 of the hash tag,
which is the whole queue name) in the i-th of N equal slot ranges,
[i * 16384 // N, (i + 1) * 16384 // N). So the N partitions land on N distinct slot ranges: on
a cluster whose primaries own equal contiguous ranges (what `redis-cli --cluster create` makes),
N partitions over P primaries put N / P on each, whatever the queue's name. The rule is
deterministic: every process computes the same names from (q, N) alone.
"""

from __future__ import annotations

import functools
import zlib

from emq_worker.errors import ConfigError
from emq_worker.protocol.keys import hash_slot, validate_queue_name

SLOTS = 16384
MAX_PARTITIONS = 256
"""At most this many partitions (each range holds 64 slots; a name is found in ~N tries)."""
LONGEST_LOGICAL_NAME = 100
"""A logical name leaves room for the longest suffix (`.p255of256-<k>`) within 128 chars."""


def validate_partition_count(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
        raise ConfigError(f"partitions must be an integer from 1 to {MAX_PARTITIONS}; got {n!r}")
    return n


def validate_logical_name(queue: str) -> str:
    validate_queue_name(queue)
    if len(queue) > LONGEST_LOGICAL_NAME:
        raise ConfigError(
            f"a partitioned queue's name is at most {LONGEST_LOGICAL_NAME} characters "
            f"(its partitions add a suffix); got {len(queue)}"
        )
    return queue


def slot_range(index: int, n: int) -> range:
    """The slots partition `index` of `n` must land on."""
    return range(index * SLOTS // n, (index + 1) * SLOTS // n)


@functools.lru_cache(maxsize=4096)
def partition_name(queue: str, index: int, n: int) -> str:
    """Partition `index` (0-based) of `queue` split `n` ways (`queue` itself when n = 1)."""
    if n == 1:
        return queue
    wanted = slot_range(index, n)
    salt = 0
    while True:
        name = f"{queue}.p{index}of{n}-{salt}"
        if hash_slot(f"{{{name}}}") in wanted:
            return name
        salt += 1


def partition_names(queue: str, n: int) -> list[str]:
    return [partition_name(queue, index, n) for index in range(n)]


def key_partition(key: str, n: int) -> int:
    """The partition of a job's key: CRC32 of its UTF-8 bytes mod n (stable across processes
    and languages, unlike Python's salted `hash`)."""
    return zlib.crc32(key.encode()) % n
