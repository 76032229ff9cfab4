"""Hand-off offers: a parked worker stands ready to take the next job enqueued on a queue.

A claim that empties a queue's pending set leaves the worker's offer there (lua/claim.lua). The
worker parks with its BLPOP on the offer's hand-off list as well as on the wake key, and
lua/enqueue.lua leases the next job straight to the newest live offer and pushes it onto that
list: the job starts without a claim round trip, so an idle worker picks a job up in about one
hop from the producer instead of three.

An offer counts as a slot taken from the moment the claim that may leave it is sent until its job
arrives or a later claim withdraws it, so a hand-off never takes the worker past its concurrency.
The offer's nonce is kept until a job is handed to it: a claim whose reply was lost may or may not
have left the offer, and the next claim withdraws it either way, taking over whatever was handed
to it. A graceful stop withdraws every offer and hands their jobs back to pending.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from emq_worker.protocol.queue import Queue
from emq_worker.protocol.replies import ClaimedJob, ClaimResult, handed_off_job
from emq_worker.protocol.values import OfferTerms, new_nonce
from emq_worker.runtime.config import WorkerSettings

OFFER_LEASE_SHARE = 3
"""An offer lasts a third of the lease: the worker counts a job handed to it as leased from the
moment the offer's claim was sent, so the job arrives with two thirds of its lease left as far as
the worker knows, and the next renewal tick confirms it before its self-fence would."""
OFFER_SLACK_MS = 500
"""A standing offer is renewed (lua/offer.lua moves its lapse; when it no longer stands, a claim
takes over what was handed to it and leaves a new one) this long before it lapses, or half its
life before when that is shorter: it never lapses while the worker is parked, and an idle queue
costs one renewal per offer's life, not one claim per beat."""
OFFERS_PER_QUEUE = 1
"""The most live offers lua/claim.lua lets stand on one queue (its own number, checked against
this one by the script tests): in a fleet parked on one queue, one worker pays offer renewals,
not every one (a job enqueued while the offer is used up wakes a parked worker with its token)."""
MAX_OFFERED_QUEUES = 8
"""Only a worker's first queues (in the order given) get offers: each offer holds a slot and
costs a renewal (lua/offer.lua) every third of a lease, and the other queues are woken by their
tokens just the same."""


def offer_ms(settings: WorkerSettings, park_spans_slots: bool) -> int:
    """How long a worker's offers stand; 0 makes none: hand-offs are off, the worker exits when
    idle (burst), or its park takes several BLPOPs (wakes.py), one of which may be cancelled
    after it took a hand-off."""
    if not settings.handoff or settings.burst or park_spans_slots:
        return 0
    return settings.lease_ms // OFFER_LEASE_SHARE


@dataclass(slots=True)
class Offer:
    nonce: str
    standing: bool = False
    """A claim may have left this offer, and no later claim has withdrawn it."""
    made_at: float = 0.0
    """Monotonic time at which the claim that left it was sent: a job handed to it is leased
    until at least made_at + lease_ms."""


@dataclass(frozen=True, slots=True)
class HandedOff:
    job: ClaimedJob
    made_at: float


class Offers:
    """The worker's offer on each of its queues. `offer_ms` 0 turns hand-offs off."""

    def __init__(self, queues: Iterable[Queue], offer_ms: int) -> None:
        self.offer_ms = offer_ms
        self._queues = {queue.name: queue for queue in queues}
        self._by_queue = {name: Offer(new_nonce()) for name in self._queues}
        self._offered = set(list(self._queues)[:MAX_OFFERED_QUEUES])
        self.renew_s = (offer_ms - min(OFFER_SLACK_MS, offer_ms // 2)) / 1000

    def reserved(self, other_than: str) -> int:
        """Slots held by offers that a claim on `other_than` does not withdraw."""
        return sum(offer.standing for name, offer in self._by_queue.items() if name != other_than)

    def terms(self, queue: str, may_offer: bool) -> OfferTerms:
        """What the next claim on `queue` is told: withdraw a standing offer, leave a new one,
        but only with a slot to spare for each other queue that holds no offer (so an idle
        queue's offer never keeps a busy one from being claimed)."""
        offer = self._by_queue[queue]
        offer_ms = self.offer_ms if may_offer and queue in self._offered else 0
        if not (offer.standing or offer_ms):
            return OfferTerms()
        others = sum(not other.standing for name, other in self._by_queue.items() if name != queue)
        return OfferTerms(offer.nonce, offer_ms, offer.standing, room=1 + others)

    def claimed(
        self, queue: str, terms: OfferTerms, sent_at: float, result: ClaimResult | None
    ) -> None:
        """Record what a claim with `terms` did; `result` None: its reply never came."""
        offer = self._by_queue[queue]
        if result is None:
            if terms.offer_ms:  # it may have left an offer: treat it as standing
                offer.standing, offer.made_at = True, sent_at
            return
        offer.standing = result.offered
        if result.offered:
            offer.made_at = sent_at

    def nonce(self, queue: str) -> str:
        return self._by_queue[queue].nonce

    def kept(self, queue: str, sent_at: float, standing: bool) -> None:
        """Record a renewal (lua/offer.lua) sent at `sent_at`: the offer stands from then, as if
        a claim sent then had left it (a job handed to it after the renewal is leased from a
        later time still; one handed before makes the renewal find nothing, and keeps the time
        the offer was made). `standing` False: the next claim takes over what was handed."""
        if standing:
            self._by_queue[queue].made_at = sent_at

    def renew_at(self, queue: str) -> float | None:
        """When the standing offer on `queue` is to be renewed (monotonic); None: none stands."""
        offer = self._by_queue[queue]
        return offer.made_at + self.renew_s if offer.standing else None

    def mailboxes(self, queues: Iterable[Queue]) -> list[str]:
        """The hand-off lists of the standing offers on `queues`."""
        return [
            queue.keys.handoff(offer.nonce)
            for queue in queues
            if (offer := self._by_queue[queue.name]).standing
        ]

    def received(self, key: str, item: bytes) -> HandedOff | None:
        """The job a park's BLPOP took from `key`; None when `key` is no hand-off list."""
        for name, offer in self._by_queue.items():
            if offer.standing and key == self._queues[name].keys.handoff(offer.nonce):
                # Used up: the next offer on this queue is a new one.
                self._by_queue[name] = Offer(new_nonce())
                return HandedOff(handed_off_job(name, offer.nonce, item), offer.made_at)
        return None

    async def withdraw(self, lease_ms: int) -> int:
        """Take back every standing offer; returns how many handed jobs went back to pending."""
        released = 0
        for name, offer in self._by_queue.items():
            if offer.standing:
                released += await self._queues[name].withdraw(offer.nonce, lease_ms)
                self._by_queue[name] = Offer(new_nonce())
        return released
