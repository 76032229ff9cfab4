"""How long handlers take against how long a claim takes: what sizes the drain's claims.

A claim that fills every free slot at once starts all its jobs together; jobs that await I/O
(a store, an API) then finish together too, and the next claim goes out only after that whole
wave, so the worker waits for every claim's reply (the server's run of the script and the round
trip) with nothing to do: 10-30 % of its time, measured with jobs that make one Redis call each
(`python -m bench --scenarios realistic`). Claiming half the slots at a time keeps two waves half
a wave apart, so each claim is in flight while the other half's jobs run. For jobs that never
await (no-ops, CPU work) the next claim goes out when the last job has ended whatever the claim
size, and smaller claims only cost more calls: the drain splits its claims only while handlers
run longer than a quarter of a claim (a job that awaits any I/O takes at least a round trip; one
that awaits nothing, a few microseconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WEIGHT = 0.05
"""Each new observation's share in the running averages (about the last 20 count)."""
SPLIT_SHARE = 4
"""Claims are split while a handler runs longer than a claim takes / SPLIT_SHARE."""
AHEAD_SHARE = 8
"""Jobs are claimed ahead of a free slot while a handler runs shorter than AHEAD_SHARE claims."""


@dataclass(slots=True)
class Pace:
    handler_s: float = 0.0
    """Running average of handlers' run time (seconds)."""
    claim_s: float = 0.0
    """Running average of a claim's time, from sent to reply (seconds)."""
    handled_at: float = -math.inf
    """When the last handler ended (monotonic)."""

    def handled(self, seconds: float, now: float) -> None:
        self.handler_s += (seconds - self.handler_s) * WEIGHT
        self.handled_at = now

    def claimed(self, seconds: float) -> None:
        self.claim_s += (seconds - self.claim_s) * WEIGHT

    def split_claims(self) -> bool:
        """True while handlers await something: claim half the slots at a time."""
        return self.handler_s * SPLIT_SHARE > self.claim_s

    def claims_ahead(self, now: float) -> bool:
        """True while handlers are short against a claim and one ended lately: claim the next
        jobs before a slot frees. False until a handler ended and a claim was timed, and once
        none has ended for as long (the running ones are long, whatever the average says)."""
        window = self.claim_s * AHEAD_SHARE
        return self.handler_s < window and now - self.handled_at < window
