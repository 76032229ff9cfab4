"""`emq-worker demo`: play the four stories on a throwaway server and print the verdicts."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

import click

from emq_worker.cli.demo.recorder import capture_in_process_logs
from emq_worker.cli.demo.server import DemoError, find_server, throwaway_server
from emq_worker.cli.demo.stories import STORIES, Story
from emq_worker.jobs.producer import Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.binary import label
from emq_worker.valkey.connection import connect


async def tell(url: str, echo: Callable[[str], None]) -> bool:
    capture_in_process_logs()
    client = connect(url, DEFAULT_WIRE_VERSION)
    producer = Producer(client)
    all_ok = True
    try:
        for number, (slug, title, play) in enumerate(STORIES, start=1):
            story = Story(number, title, f"demo-{number}-{slug}", client, producer)
            story.every_renewal = slug == "renewal"
            echo(f"\n{number}. {title}")
            try:
                ok, verdict = await play(story, url)
            finally:
                await story.finish()
            for line in story.timeline():
                echo(line)
            echo(f"  verdict: {verdict}")
            all_ok = all_ok and ok
    finally:
        await client.aclose()
    return all_ok


def run_demo(server: str | None, echo: Callable[[str], None]) -> int:
    """Play the four stories; 0 when each went as the lease protocol says, else 1."""
    binary = find_server(server)
    started = time.monotonic()
    with throwaway_server(binary) as url:
        echo(
            f"emq-worker demo: {label(binary)} on {url} (throwaway: no persistence, "
            "removed on exit)"
        )
        echo("times are ms from each story's enqueue; deadlines as the server holds them")
        ok = asyncio.run(tell(url, echo))
    echo(f"\ndone in {time.monotonic() - started:.1f} s; server stopped, temp dir removed")
    return 0 if ok else 1


@click.command()
@click.option(
    "--server",
    "server",
    default=None,
    metavar="PATH",
    help="The server binary: a path, or `valkey` / `redis` (default: valkey-server or "
    "redis-server on PATH, else the embedded Valkey of the `embedded` extra).",
)
def demo(server: str | None) -> None:
    """Replay the lease story with real jobs on a throwaway server (no setup needed)."""
    try:
        code = run_demo(server, click.echo)
    except DemoError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)
