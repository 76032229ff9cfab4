"""The actions: POST only, each refused unless actions are on, the form carries our CSRF token
and the request comes from our own origin. Each reuses an admin verb and redirects back with a
one-line message (post/redirect/get, so a reload does not repeat it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from emq_worker.admin import dead_letter, verbs, worker_control
from emq_worker.dashboard.confirm import Ask, ask_first, confirmed
from emq_worker.dashboard.forms import guarded_form
from emq_worker.dashboard.params import job_param, open_queue
from emq_worker.dashboard.runtime import dashboard, flash
from emq_worker.errors import ConfigError
from emq_worker.protocol import control, ids
from emq_worker.protocol.names import JobId

Action = Callable[[Request, FormData], Awaitable[Response]]


def guarded(action: Action) -> Callable[[Request], Awaitable[Response]]:
    """Refuse unless actions are on and the form is ours; then run `action`."""

    async def endpoint(request: Request) -> Response:
        guard = dashboard(request).guard
        if not guard.allow_actions:
            return PlainTextResponse(
                "actions are off: start the dashboard with --allow-actions", status_code=403
            )
        form = await guarded_form(request, guard)
        if isinstance(form, Response):
            return form
        return await action(request, form)

    return endpoint


def back(to: str, message: str) -> Response:
    return flash(RedirectResponse(to, status_code=303), message)


def chosen_ids(form: FormData) -> list[JobId] | None:
    """The dead jobs a form names (job_id fields), or None when it says all=1."""
    named = [ids.job_id(str(value)) for value in form.getlist("job_id")]
    if form.get("all") == "1":
        if named:
            raise ConfigError("name dead jobs or ask for all of them, not both")
        return None
    if not named:
        raise ConfigError("no dead job named: pick one, or ask for all of them")
    return named


def summary(
    verb: str, queue: str, result: dead_letter.BulkResult, kind: str = "dead job(s)"
) -> str:
    skipped = "".join(f"; skipped {job_id}: {why}" for job_id, why in result.skipped[:5])
    return f"{verb} {result.done} {kind} in queue {queue!r}{skipped}"


async def _pause(request: Request, form: FormData) -> Response:
    queue = await open_queue(request)
    was = await verbs.set_paused(queue, True)
    done = "was already paused" if was else "paused: workers stop claiming at their next claim"
    return back(f"/queues/{queue.name}", f"queue {queue.name!r} {done}")


async def _resume(request: Request, form: FormData) -> Response:
    queue = await open_queue(request)
    was = await verbs.set_paused(queue, False)
    done = "resumed" if was else "was not paused"
    return back(f"/queues/{queue.name}", f"queue {queue.name!r} {done}")


async def _retry(request: Request, form: FormData) -> Response:
    queue = await open_queue(request)
    chosen = chosen_ids(form)
    result = await dead_letter.retry_dead(queue, chosen)
    to = f"/queues/{queue.name}/dead"
    if form.get("back") == "job" and chosen is not None and len(chosen) == 1:
        to = f"/queues/{queue.name}/jobs/{chosen[0]}"  # from the job's own page (never a URL)
    return back(to, summary("retried", queue.name, result))


async def _purge(request: Request, form: FormData) -> Response:
    queue = await open_queue(request)
    chosen = chosen_ids(form)
    if not confirmed(form):
        todo = (await queue.counts()).dead if chosen is None else len(chosen)
        named = [("all", "1")] if chosen is None else [("job_id", job_id) for job_id in chosen]
        ask = Ask(
            f"Purge {todo} dead job(s) from {queue.name} for good?",
            f"/queues/{queue.name}/dead/purge",
            "Yes, purge",
            "confirm-purge",
            f"/queues/{queue.name}/dead",
            items=chosen or (),
            fields=named,
        )
        return ask_first(request, ask)
    result = await dead_letter.purge_dead(queue, chosen)
    return back(f"/queues/{queue.name}/dead", summary("purged", queue.name, result))


async def _cancel(request: Request, form: FormData) -> Response:
    queue = await open_queue(request)
    job_id = job_param(request)
    await verbs.cancel_job(queue, job_id)
    message = f"cancel requested for {job_id}: its worker stops it within one renewal tick"
    return back(f"/queues/{queue.name}/jobs/{job_id}", message)


async def _promote(request: Request, form: FormData) -> Response:
    queue = await open_queue(request)
    job_id = job_param(request)
    here = f"/queues/{queue.name}/jobs/{job_id}"
    if not confirmed(form):
        ask = Ask(
            f"Promote {job_id} now?", f"{here}/promote", "Yes, run it now", "confirm-promote", here
        )
        return ask_first(request, ask)
    await verbs.promote_job(queue, job_id)
    return back(here, f"promoted {job_id}: it is pending now, ahead of its due time")


async def _delete(request: Request, form: FormData) -> Response:
    queue = await open_queue(request)
    job_id = job_param(request)
    here = f"/queues/{queue.name}/jobs/{job_id}"
    if not confirmed(form):
        where = await queue.state_of(job_id)
        ask = Ask(
            f"Delete {job_id} ({where}) for good?",
            f"{here}/delete",
            "Yes, delete",
            "confirm-delete",
            here,
        )
        return ask_first(request, ask)
    await verbs.remove_job(queue, job_id)  # refused while a worker holds it: cancel it first
    return back(f"/queues/{queue.name}", f"deleted {job_id} from queue {queue.name!r}")


def _ask_worker(asked: str) -> Action:
    """Quiet or stop the worker the form names (protocol/control.py); its beat reads it."""

    async def ask(request: Request, form: FormData) -> Response:
        worker_id = str(form.get("worker", ""))

        async def queues() -> Sequence[str]:
            return (await dashboard(request).queues.find()).queues

        await worker_control.ask_worker(dashboard(request).redis, worker_id, asked, queues)
        return back("/workers", f"asked worker {worker_id} to {asked}: {DONE[asked]}")

    return ask


DONE = {
    control.QUIET: "from its next beat it claims nothing new and finishes what it holds",
    control.STOP: "at its next beat it hands back what it holds and exits",
}


pause = guarded(_pause)
resume = guarded(_resume)
retry = guarded(_retry)
purge = guarded(_purge)
cancel = guarded(_cancel)
promote = guarded(_promote)
delete = guarded(_delete)
quiet_worker = guarded(_ask_worker(control.QUIET))
stop_worker = guarded(_ask_worker(control.STOP))
