"""The largest payload a job may carry, checked at enqueue and again by the claim script.

A payload is read by the worker in full (the claim reply carries it), so an unbounded one bounds
nothing: a 100 MB row written straight into Redis would be pulled into every worker that claims
it. The producer refuses a larger payload before it is sent; the claim script reads only the
payload's length (HSTRLEN) and dead-letters a larger one with the reason, never reading it.
`lua/claim.lua` repeats the number (a test checks that the two agree).
"""

from __future__ import annotations

from emq_worker.errors import PayloadError

MAX_PAYLOAD_BYTES = 16 * 1024 * 1024


def check_payload_size(payload: bytes) -> bytes:
    """`payload`, or PayloadError naming its size and the limit."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise PayloadError(
            f"payload is {len(payload)} bytes, over the limit of {MAX_PAYLOAD_BYTES} bytes "
            "(store large data elsewhere and pass a reference)"
        )
    return payload
