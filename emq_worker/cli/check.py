"""`emq-worker run --check`: everything `run` would check before it serves, then exit.

Imports the app and lists its tasks with the policy each would run under, pings the server and
runs the version fence, on the settings `run` was given. Exit 0 when all of it passes, 1 (naming
the server, never its password) when the server cannot be reached or the fence refuses.
"""

from __future__ import annotations

import anyio
import click
from redis.exceptions import RedisError, ResponseError

from emq_worker.cli.options import failure_message
from emq_worker.errors import EmqError
from emq_worker.jobs.policy import resolve
from emq_worker.jobs.tasks import App, Task
from emq_worker.protocol.replies import text
from emq_worker.retry import format_backoff
from emq_worker.runtime.config import WorkerSettings
from emq_worker.valkey.connection import connect
from emq_worker.valkey.reach import explaining


def describe_task(task: Task, settings: WorkerSettings, kind: str) -> str:
    policy = resolve(settings.policy, task.policy)
    options = (
        f"max_attempts={policy.max_attempts} backoff={format_backoff(policy.backoff)} "
        f"timeout_ms={policy.timeout_ms} result_ttl_ms={policy.result_ttl_ms}"
    )
    if task.in_process:
        options += " executor=process"
    return f"  {kind} {task.name}({task.parameters_text()})  {options}"


def server_version(info: object) -> str:
    """`valkey 9.1.2` or `redis 7.0.15` from INFO server: Valkey reports its own name and
    version (`server_name`, `valkey_version`) beside a `redis_version` kept for old clients."""
    if not isinstance(info, dict):
        return "unknown"
    name = text(info.get("server_name") or "redis")
    version = info.get(f"{name}_version") or info.get("redis_version") or "unknown"
    return f"{name} {text(version)}"


async def _probe(settings: WorkerSettings) -> str:
    """The server's name and version, after a PING through the fenced connection."""
    timeout_s = settings.check_timeout_ms / 1000
    client = connect(settings.address, settings.wire_version, socket_timeout_s=timeout_s)
    try:
        async with explaining(settings.address):
            await client.ping()
            try:
                info = await client.info("server")
            except ResponseError:
                return "version unknown (INFO denied)"
            return server_version(info)
    finally:
        await client.aclose()


def run_check(settings: WorkerSettings, app: App) -> int:
    click.echo(f"app: {len(app.tasks)} task(s), {len(app.raw)} raw handler(s)")
    for task in app.tasks.values():
        click.echo(describe_task(task, settings, "task"))
    for queue, task in app.raw.items():
        click.echo(describe_task(task, settings, f"raw handler for queue {queue!r}:"))
    click.echo(f"queues: {', '.join(settings.queues)}")
    try:
        version = anyio.run(_probe, settings)
    except (EmqError, RedisError, OSError) as exc:
        click.echo(f"Error: {failure_message(exc, settings.address)}", err=True)
        return 1
    click.echo(
        f"server: {settings.address.redacted} answers ({version}); "
        f"{{emq}}:version is {settings.wire_version!r}"
    )
    click.echo("check passed")
    return 0
