"""The fencing token a claim hands out: attempts + 1, exactly as HINCRBY counts it.

claim.lua writes a plain counter and the state in one HSET and leaves every other value to
HINCRBY; whatever the row holds, the outcome must be the one HINCRBY alone would give: the next
integer, or a dead-letter naming a value that is not one.
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from emq_worker import Producer
from emq_worker.protocol.ids import SnowflakeMinter
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.scripts import Scripts

MINTER = SnowflakeMinter(1002)
PAYLOAD = b'{"task":"work","kwargs":{}}'
ATTEMPTS = [
    None,  # absent: counts 0
    "0",
    "7",
    "999999999999999",  # the longest plain counter claim.lua adds to itself
    "9007199254740993",  # past what a Lua number holds exactly: HINCRBY's
    "-3",
    "07",
    "+5",
    " 5",
    "5.0",
    "",
    "abc",
    "123456789012345678901",  # past 64 bits
]


async def hincrby_says(client: Redis, value: str | None) -> int | None:
    """What HINCRBY makes of `value` on a scratch hash: the next integer, or None (refused)."""
    scratch = f"scratch:{MINTER.job_id()}"
    if value is not None:
        await client.hset(scratch, "attempts", value)
    try:
        return int(await client.hincrby(scratch, "attempts", 1))
    except ResponseError:
        return None
    finally:
        await client.delete(scratch)


@pytest.mark.parametrize("grouped", [False, True], ids=["pending", "lane"])
@pytest.mark.parametrize("value", ATTEMPTS)
async def test_a_claim_counts_attempts_as_hincrby_does(
    client: Redis, scripts: Scripts, queue_name: str, value: str | None, grouped: bool
) -> None:
    """Both ways a claim leases a job: from pending, and from a fair lane (lanes_claim.lua)."""
    queue = Queue(client, scripts, queue_name)
    producer = Producer(client)
    job = (await producer.enqueue_raw(queue_name, PAYLOAD, group="g" if grouped else None)).job_id
    row = queue.keys.job(job)
    if value is None:
        await client.hdel(row, "attempts")
    else:
        await client.hset(row, "attempts", value)
    expected = await hincrby_says(client, value)

    result = await queue.claim(10, 30_000)

    state, attempts, error = await client.hmget(row, "state", "attempts", "last_error")
    if expected is None:
        assert result.jobs == ()
        assert result.phantoms == 1
        assert (state, error) == (b"dead", f"attempts is not an integer: {value}".encode())
        assert attempts == (value or "").encode()
        return
    assert [(j.id, int(j.token)) for j in result.jobs] == [(job, expected)]
    assert (state, attempts) == (b"active", str(expected).encode())
    assert await client.get(f"{row}:lock") == f"{expected}:{result.jobs[0].nonce}".encode()
