"""Keeping one broken queue from stopping the beat: the supervisor's side of queue_health.py.

An error that belongs to one queue (serverchecks.queue_scoped: a wrong-typed key, a script error
on a corrupt row, or on a cluster the node owning the queue's slot down) met while reaping,
promoting or claiming for that queue rests it alone; the beat goes on with the others. Anything
else propagates to the beat, which backs off whole: a lost connection to a single server or a
server-wide refusal (OOM, READONLY, ...) would fail every queue alike.

On a cluster the park's BLPOPs go one per slot (wakes.py); one whose node is lost ends the park
with the keys it waited on, and the queues on that slot rest alone, as their claims would.

The park leaves a failing queue's wake key out of its BLPOP: that key may itself be the broken
one, and one wrong-typed key fails the whole BLPOP. A refused BLPOP is traced to the wake keys
that are not lists; their queues' wake keys rest (claims go on, woken by the timer) until TYPE
says the key is usable again.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import InitVar, dataclass, field

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError
from structlog.typing import FilteringBoundLogger

from emq_worker.observe.clock import Clock
from emq_worker.protocol.keys import hash_slot
from emq_worker.protocol.queue import Queue
from emq_worker.runtime.offers import Offers
from emq_worker.runtime.queue_health import QueueHealth
from emq_worker.runtime.wakes import ParkUnavailableError, Popped, WakeWaiter
from emq_worker.valkey.failures import describe, fatal, queue_scoped

USABLE_WAKE_TYPES = frozenset({b"list", b"none", "list", "none"})
"""What TYPE answers for a wake key BLPOP can wait on (bytes, or str with decode_responses)."""


@dataclass(eq=False)
class QueueIsolation:
    """Which queues the beat serves now; logs `queue_failed` and `queue_recovered`."""

    client: Redis
    queues: Sequence[Queue]
    clock: Clock
    rng: InitVar[random.Random]
    """Jitters each resting queue's backoff (queue_health.py)."""
    log: FilteringBoundLogger
    health: QueueHealth = field(init=False)

    def __post_init__(self, rng: random.Random) -> None:
        self.health = QueueHealth(rng)

    def ready(self) -> list[Queue]:
        """The queues to reap, promote and claim now: those not resting after a failure."""
        now = self.clock.monotonic()
        return [queue for queue in self.queues if self.health.ready(queue.name, now)]

    @contextmanager
    def isolated(self, queue: Queue) -> Iterator[None]:
        """A failure of this queue's own rests it, logged once per step of its streak; anything
        else (a lost server, a server-wide or fatal refusal) propagates to the beat."""
        try:
            yield
        except RedisError as exc:
            if not queue_scoped(exc):
                raise
            self.rest(queue.name, describe(exc))

    def rest(self, name: str, error: str, *, wake: bool = False) -> None:
        pause = self.health.failed(name, self.clock.monotonic(), wake=wake)
        self.log.warning("queue_failed", queue=name, error=error, retry_in_ms=int(pause * 1000))

    def recovered(self, name: str, *, wake: bool = False) -> None:
        if self.health.succeeded(name, wake=wake):
            self.log.info("queue_recovered", queue=name)

    def next_retry(self) -> float | None:
        """When the park should end to retry a resting queue; None when none rests."""
        return self.health.next_retry(self.clock.monotonic())

    async def park(
        self, wakes: WakeWaiter, seconds: float, offers: Offers, also: Sequence[str] = ()
    ) -> Popped | None:
        """BLPOP the wake keys of the queues not failing, and the hand-off lists of their
        standing offers (first: a hand-off is taken before a wake token), and `also` (the
        operator's token list), else sleep; returns what was popped, None when nothing was."""
        parked = await self.parkable()
        if not parked:
            await anyio.sleep(seconds)
            return None
        keys = [*offers.mailboxes(parked), *(queue.keys.wake for queue in parked), *also]
        try:
            return await wakes.wait(keys, seconds)
        except ParkUnavailableError as exc:
            self.rest_slots(parked, exc)
            return None
        except ResponseError as exc:
            broken = [queue for queue in parked if await self.wake_key_broken(queue)]
            if fatal(exc) or not broken:
                raise
            return None

    def rest_slots(self, parked: Sequence[Queue], exc: ParkUnavailableError) -> None:
        """Rest the parked queues living on the slot of the keys whose BLPOP failed."""
        slots = {hash_slot(key) for key in exc.keys}
        for queue in parked:
            if hash_slot(queue.keys.wake) in slots:
                self.rest(queue.name, describe(exc))

    async def parkable(self) -> list[Queue]:
        """The queues whose wake keys the park may BLPOP: not failing, or a wake key that failed
        and, its pause over, is a list again."""
        now = self.clock.monotonic()
        parked: list[Queue] = []
        for queue in self.queues:
            if self.health.wake_due(queue.name, now) and not await self.wake_key_broken(queue):
                self.recovered(queue.name, wake=True)
            if not self.health.failing(queue.name):
                parked.append(queue)
        return parked

    async def wake_key_broken(self, queue: Queue) -> bool:
        """True, and the queue's wake key rests, when the key is not a list (WRONGTYPE)."""
        kind = await self.client.type(queue.keys.wake)
        if kind in USABLE_WAKE_TYPES:
            return False
        named = kind.decode() if isinstance(kind, bytes) else str(kind)
        self.rest(queue.name, f"WRONGTYPE the wake key {queue.keys.wake} is a {named}", wake=True)
        return True
