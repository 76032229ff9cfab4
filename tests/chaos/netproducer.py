"""The producer of the cut-mid-burst row, run inside the cut-off namespace (netheal.py starts it
with `ip netns exec ... python -m tests.chaos.netproducer`).

It enqueues `bursts` bursts of `burst` jobs with ids it chose itself, one `enqueue_many` call per
burst, `pause_ms` apart. A call that fails (its reply did not come within the socket timeout, or
no connection opened: the link is down) is re-sent with the very same ids until one answers, as
an application that chose its ids does; the server runs each id once however many copies of the
call arrive (a copy sent into the cut may still be delivered by TCP after the heal). Each
acknowledged burst's ids are appended to `<out>/acked` (one id per line); the count of re-sends
is kept in `<out>/resends`, and of ids a re-send found already enqueued (its first copy got
through) in `<out>/duplicates`, so the test can cut mid-burst and check every id afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from redis.exceptions import RedisError

from emq_worker import JobSpec, Producer
from emq_worker.protocol.ids import SnowflakeMinter

CHOSEN_NODE_ID = 902
GIVE_UP_S = 120.0
RETRY_PAUSE_S = 0.05


async def produce(args: argparse.Namespace) -> None:
    out = Path(args.out)
    minter = SnowflakeMinter(CHOSEN_NODE_ID)
    resends = duplicates = 0
    until = time.monotonic() + GIVE_UP_S
    producer = Producer.from_url(args.url, socket_timeout_s=args.timeout_ms / 1000)
    async with producer:
        for _ in range(args.bursts):
            ids = [minter.job_id() for _ in range(args.burst)]
            specs = [JobSpec("work", {}, job_id=job_id) for job_id in ids]
            while True:
                try:
                    results = await producer.enqueue_many(args.queue, specs)
                    duplicates += sum(result.duplicate for result in results)
                    break
                except (RedisError, OSError):
                    if time.monotonic() > until:
                        raise
                    resends += 1
                    (out / "resends").write_text(str(resends), encoding="utf-8")
                    await asyncio.sleep(RETRY_PAUSE_S)
            (out / "duplicates").write_text(str(duplicates), encoding="utf-8")
            with (out / "acked").open("a", encoding="utf-8") as acked:
                acked.write("".join(f"{job_id}\n" for job_id in ids))
            await asyncio.sleep(args.pause_ms / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.netproducer")
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("out")
    parser.add_argument("--bursts", type=int, required=True)
    parser.add_argument("--burst", type=int, required=True)
    parser.add_argument("--pause-ms", type=int, required=True)
    parser.add_argument("--timeout-ms", type=int, required=True)
    asyncio.run(produce(parser.parse_args()))


if __name__ == "__main__":
    main()
