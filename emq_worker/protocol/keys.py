"""Key names of the EchoMQ keyspace. Pure: no I/O.

Every per-queue key shares the `{q}` hash tag, so a queue lives on one cluster slot and every
script touches one slot only. The reserve keys (`{emq}:...`) live on their own slot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from emq_worker.errors import QueueNameError
from emq_worker.valkey.fence import VERSION_KEY as VERSION_KEY

QUEUES_KEY = "{emq}:queues"
"""ZSET of the queues emq-worker workers serve (score: the last time one said so, unix ms): how
the dashboard finds queues without a SCAN of the whole keyspace. Ours, not EchoMQ's."""
WORKERS_KEY = "{emq}:workers"
"""ZSET of the workers announcing themselves (score: their last beat, unix ms): each one's entry
is `worker_entry_key(id)`, one per worker whatever the number of queues it serves. Ours."""


def worker_entry_key(worker_id: str) -> str:
    """A worker's presence entry (JSON, with a TTL of a few beats): one key for all its queues."""
    return f"{{emq}}:worker:{worker_id}"


def worker_ask_key(worker_id: str) -> str:
    """A LIST an operator pushes a token onto after writing a request into the worker's entry:
    its park watches it, so an idle worker hears the request at once. Under the entry's own
    name, so the ACL that grants the entries (`~{emq}:worker:*`, docs/how-to/secure.md) grants
    it. Ours."""
    return f"{{emq}}:worker:{worker_id}:ask"


PARTITIONED_KEY = "{emq}:partitioned"
"""SET of the logical queues with a partition registry entry: a worker asks it (SMISMEMBER,
one command) whether any queue it serves is partitioned before reading entries. Ours."""


def partitions_key(queue: str) -> str:
    """A partitioned queue's registry entry (HASH: `n` and one `g<N>` per generation still
    served; docs/protocol.md section 2). Ours, not EchoMQ's."""
    return f"{{emq}}:partitions:{queue}"


_QUEUE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


def validate_queue_name(name: str) -> str:
    """Return `name` if it is a legal queue name, else raise QueueNameError naming it."""
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name):
        raise QueueNameError(f"queue name must match [A-Za-z0-9._-]{{1,128}}; got {name!r}")
    if name == "emq":
        raise QueueNameError("queue name 'emq' is reserved (it would share the {emq} hash tag)")
    return name


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue `q`, all under the prefix `emq:{q}:`."""

    queue: str
    prefix: str
    pending: str
    active: str
    schedule: str
    dead: str
    meta: str
    wake: str
    completed: str
    failed: str
    cancel: str
    """SET of running job ids an operator asked to cancel (read by the renewal sweep)."""
    suspects: str
    """SET of job ids the reaper took back twice, or before their last attempt: each is claimed
    alone (see lua/reap.lua)."""
    offers: str
    """ZSET of hand-off offers of workers parked with a free slot (see lua/claim.lua)."""
    workers: str
    """ZSET of the workers announcing themselves on the queue (score: their last beat, ms)."""
    settled_log: str
    """LIST of the jobs workers settled lately, newest first (JSON; see lua/history.lua)."""
    upkeep: str
    """STRING: the fleet's note that a check found nothing due on the queue (see lua/upkeep.lua)."""

    @classmethod
    def of(cls, queue: str) -> QueueKeys:
        p = f"emq:{{{validate_queue_name(queue)}}}:"
        return cls(
            queue=queue,
            prefix=p,
            pending=p + "pending",
            active=p + "active",
            schedule=p + "schedule",
            dead=p + "dead",
            meta=p + "meta",
            wake=p + "wake",
            completed=p + "metrics:completed",
            failed=p + "metrics:failed",
            cancel=p + "cancel",
            suspects=p + "suspects",
            offers=p + "offers",
            workers=p + "workers",
            settled_log=p + "history:settled",
            upkeep=p + "upkeep",
        )

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def lock(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}:lock"

    def receipt(self, job_id: str) -> tuple[str, str]:
        """Where the settle receipt of `job_id` is: a hash shared with the ids that differ only
        in their last character, and the field named by that character
        (lua/includes/receipts.lua)."""
        return f"{self.prefix}receipts:{job_id[:-1]}", job_id[-1:]

    def logs(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}:logs"

    def claim_memo(self, nonce: str) -> str:
        return f"{self.prefix}claim:{nonce}"

    def worker(self, worker_id: str) -> str:
        """A worker's presence entry on this queue (JSON, with a TTL of a few beats)."""
        return f"{self.prefix}worker:{worker_id}"

    def history_minute(self, start_ms: int) -> str:
        """The history bucket of the minute starting at `start_ms` (unix ms, server clock)."""
        return f"{self.prefix}history:m:{start_ms}"

    def history_hour(self, start_ms: int) -> str:
        """The history bucket of the hour starting at `start_ms` (unix ms, server clock)."""
        return f"{self.prefix}history:h:{start_ms}"

    def lane(self, group: str) -> str:
        """A fair lane: the jobs of `group` waiting their turn (EchoMQ's `g:<group>:pending`)."""
        return f"{self.prefix}g:{group}:pending"

    def handoff(self, offer_nonce: str) -> str:
        """The list a parked worker's BLPOP waits on for the jobs handed to its offer."""
        return f"{self.prefix}handoff:{offer_nonce}"


def hash_slot(key: str) -> int:
    """The cluster slot of `key`: CRC16-XMODEM mod 16384 of the text between its first `{` and
    the next `}` when that is non-empty, else of the whole key (Redis' hash-tag rule)."""
    data = key.encode()
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc % 16384
