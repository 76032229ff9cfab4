"""The producer's re-send of an enqueue call whose reply was lost.

A dropped connection or a timeout leaves the caller not knowing whether the call ran. It is sent
again, nonce and all: when the first copy ran, the enqueue script finds that call's memo and
answers as the first copy did, writing nothing (lua/enqueue.lua), so no job is written twice and
no id this call minted is mistaken for another producer's.

Re-sends are bounded in time as each call is: only while the call is younger than the client's
socket timeout is it sent again, so against a server that never answers the caller has its error
after one timeout, not four (a dropped connection is re-sent at once, well inside it).
"""

from __future__ import annotations

import time
from typing import Final

import anyio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue
from emq_worker.protocol.values import NewJob, new_nonce
from emq_worker.valkey.connection import socket_timeout_of
from emq_worker.valkey.failures import fatal

RESEND_PAUSES_S: Final = (0.05, 0.2, 1.0)
"""The pause before each re-send; after the last re-send fails, the error is raised. The whole
window (with reconnects) stays well inside the memo's ENQUEUE_MEMO_MS."""


async def send_enqueue(queue: Queue, jobs: list[NewJob]) -> list[bool | JobId]:
    """One enqueue call (Queue.enqueue's reply), re-sent with its nonce while the reply is lost."""
    nonce = new_nonce()
    window = socket_timeout_of(queue.client)
    began = time.monotonic()
    for pause in RESEND_PAUSES_S:
        try:
            return await queue.enqueue(jobs, nonce=nonce)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if fatal(exc):
                raise  # credentials or ACL: no re-send cures them
            if window is not None and time.monotonic() - began + pause >= window:
                raise  # the caller waited a whole socket timeout already
            await anyio.sleep(pause)
    return await queue.enqueue(jobs, nonce=nonce)
