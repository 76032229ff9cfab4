"""Actions on the jobs ticked on a tab (checkboxes): promote scheduled ones now, delete pending or
scheduled ones. Each asks first, listing the jobs, then runs the job's script for each and says
which it left alone (a job held by a worker, gone, or no longer scheduled)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from emq_worker.admin import job_bulk
from emq_worker.admin.dead_letter import BulkResult
from emq_worker.dashboard.actions import back, guarded, summary
from emq_worker.dashboard.confirm import Ask, ask_first, confirmed
from emq_worker.dashboard.params import open_queue
from emq_worker.errors import ConfigError
from emq_worker.protocol import ids
from emq_worker.protocol.names import JobId
from emq_worker.protocol.queue import Queue

BULK_MAX = 1_000
"""The most jobs one form may name (a tab's page shows far fewer)."""
DELETABLE_TABS = ("pending", "scheduled")


def ticked(form: FormData) -> list[JobId]:
    named = [ids.job_id(str(value)) for value in form.getlist("job_id")]
    if not named:
        raise ConfigError("no job ticked: tick the jobs first")
    if len(named) > BULK_MAX:
        raise ConfigError(f"{len(named)} jobs ticked: at most {BULK_MAX} at once")
    return named


Run = Callable[[Queue, Sequence[JobId]], Awaitable[BulkResult]]


async def _on_ticked(
    request: Request, form: FormData, verb: str, run: Run, tab: str, yes: str
) -> Response:
    """Ask first (naming the ticked jobs), then `run` them and go back to `tab` saying so."""
    queue = await open_queue(request)
    chosen = ticked(form)
    to = f"/queues/{queue.name}/{tab}"
    if not confirmed(form):
        ask = Ask(
            f"{verb.capitalize()} {len(chosen)} job(s) of {queue.name}?",
            f"/queues/{queue.name}/{verb}",
            yes,
            f"confirm-{verb}",
            to,
            items=chosen,
            fields=[("tab", tab), *(("job_id", job_id) for job_id in chosen)],
        )
        return ask_first(request, ask)
    result = await run(queue, chosen)
    return back(to, summary(f"{verb}d", queue.name, result, "job(s)"))


async def _promote(request: Request, form: FormData) -> Response:
    return await _on_ticked(
        request, form, "promote", job_bulk.promote_jobs, "scheduled", "Yes, run them now"
    )


async def _delete(request: Request, form: FormData) -> Response:
    tab = str(form.get("tab", "pending"))
    if tab not in DELETABLE_TABS:
        raise ConfigError(f"delete from {' or '.join(DELETABLE_TABS)}, not {tab[:40]!r}")
    return await _on_ticked(request, form, "delete", job_bulk.delete_jobs, tab, "Yes, delete")


promote_ticked = guarded(_promote)
delete_ticked = guarded(_delete)
