"""The transport's own floor for pickup latency: no job queue at all, only Redis on loopback.

`consume` parks in BLPOP on a bare list and reports, per value, how long after the producer
stamped it the pop returned; `produce` LPUSHes stamped values at the idle rate and, between them,
times one PING each (a single round trip from an idle process). Any queue's idle pickup costs at
least one such hand-off. emq-worker's costs about one too, plus the enqueue script's own work: a
parked worker's offer stands, so the script leases the job and pushes it onto the list the
worker's BLPOP waits on (with `--no-handoff`, a wake token and then a claim's round trip).
"""

from __future__ import annotations

import time
from typing import Any

import redis

from bench.runners.common import config, emit, finish, percentile

KEY = "bench:floor"


def consume(cfg: dict[str, Any]) -> None:
    client = redis.Redis.from_url(cfg["url"])
    client.ping()
    emit("ready")
    waits_ms = []
    for _ in range(cfg["n"]):
        popped = client.blpop([KEY], timeout=30)
        if popped is None:
            break
        waits_ms.append((time.time() - float(popped[1])) * 1000)
    emit("done", p50_ms=percentile(waits_ms, 50), p99_ms=percentile(waits_ms, 99))


def produce(cfg: dict[str, Any]) -> None:
    client = redis.Redis.from_url(cfg["url"])
    gap = 1 / cfg["rate"]
    pings_ms = []
    for _ in range(cfg["n"]):
        time.sleep(gap / 2)
        begun = time.perf_counter()
        client.ping()
        pings_ms.append((time.perf_counter() - begun) * 1000)
        time.sleep(gap / 2)
        client.lpush(KEY, repr(time.time()))
    emit("done", p50_ms=percentile(pings_ms, 50), p99_ms=percentile(pings_ms, 99))


def main() -> None:
    cfg = config()
    {"consume": consume, "produce": produce}[cfg["mode"]](cfg)
    finish()


if __name__ == "__main__":
    main()
