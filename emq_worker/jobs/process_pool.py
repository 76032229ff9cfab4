"""The process pool behind `@app.task(executor="process")`: CPU-bound handlers run in spawned
processes, off the worker's event loop and outside its GIL, while the worker keeps the lease
(renews it, settles the job, fenced as ever).

At most `size` processes, started on first use and kept for the next job. A job waits for a free
process outside its timeout (queueing is not running); once it runs, its timeout kills the
process (a thread could not be stopped; a process can), and so does a lost lease, a cancel or a
forced stop. A process that dies mid-job (`os._exit`, a signal, a segfault) fails that job alone,
retried by its policy; the next job gets a new process. Each process talks to the worker over its
own pipe, in JSON (process_entry.py): nothing is pickled but the spawn itself.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

import anyio

from emq_worker.jobs.context import JobContext
from emq_worker.jobs.process_entry import serve
from emq_worker.jobs.process_tasks import Handler

START_TIMEOUT_S = 60.0
"""How long a new process may take to start (an interpreter, then the handler's module)."""
JOIN_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class PoolReply:
    """How one job went in its process: `error` set when it failed (the job's `last_error`)."""

    error: str | None = None
    trace: str = ""
    result: bytes | None = None
    """The stored form of the return value (when a result was asked for)."""
    result_error: str | None = None
    """Why the return value could not be stored (not JSON-serialisable)."""


class PoolProcess:
    """One spawned process and the worker's end of its pipe. Its methods block: call them in a
    thread."""

    def __init__(self, context: SpawnContext) -> None:
        self.conn, child_end = context.Pipe()
        self.process: SpawnProcess = context.Process(
            target=serve, args=(child_end,), name="emq-worker-pool", daemon=True
        )
        self._child_end: Connection | None = child_end
        self.pid: int | None = None
        self.exitcode: int | None = None

    def start(self) -> None:
        """Spawn the process and wait until it is up; raises OSError when it does not come up."""
        self.process.start()
        self.pid = self.process.pid
        if self._child_end is not None:
            self._child_end.close()  # its end lives in the process now: EOF when it dies
            self._child_end = None
        if not self.conn.poll(START_TIMEOUT_S):
            raise OSError(f"no word from the new process within {START_TIMEOUT_S:g} s")
        self.conn.recv_bytes()  # {"ready": pid}; EOFError when it died instead

    def call(self, request: bytes) -> bytes | None:
        """The process's reply to `request`, or None when it died before replying."""
        try:
            self.conn.send_bytes(request)
            return self.conn.recv_bytes()
        except (EOFError, OSError):
            return None

    def kill(self) -> None:
        """End the process at once (SIGKILL also ends a stopped or hung one) and reap it. The
        pipe is left to be closed with this object: a call abandoned on a timeout may still be
        reading it, and sees the end of file."""
        if self.pid is not None and self.exitcode is None:
            self.process.kill()
            self._reap()

    def stop(self) -> None:
        """Close the pipe (an idle process exits on its own), then reap it, or kill it."""
        self.conn.close()
        if self.pid is not None and self.exitcode is None:
            self._reap()
            if self.exitcode is None:
                self.kill()

    def _reap(self) -> None:
        self.process.join(JOIN_TIMEOUT_S)
        self.exitcode = self.process.exitcode
        if self.exitcode is not None:
            self.process.close()  # its sentinel fd, now rather than at garbage collection

    def exit_text(self) -> str:
        code = self.exitcode
        if code is None:
            return "is gone"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"


class ProcessPool:
    """Runs one job per process, up to `size` at once."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"process pool size must be >= 1; got {size}")
        self.size = size
        self._context = multiprocessing.get_context("spawn")
        self._seats = anyio.CapacityLimiter(size)
        self._threads = anyio.CapacityLimiter(2 * size)
        """One blocking call per seat, plus a call abandoned on a timeout while its process
        is being killed."""
        self._idle: list[PoolProcess] = []

    async def run(
        self,
        fn: Handler,
        ctx: JobContext,
        kwargs: dict[str, Any],
        timeout_ms: int,
        want_result: bool,
    ) -> PoolReply:
        request = encode_request(fn, ctx, kwargs, want_result)
        async with self._seats:
            process = await self._take()
            if process is None:
                return PoolReply(error="the process pool could not start a process")
            reply: bytes | None = None
            try:
                with anyio.move_on_after(timeout_ms / 1000) as timer:
                    reply = await anyio.to_thread.run_sync(
                        process.call, request, abandon_on_cancel=True, limiter=self._threads
                    )
            finally:
                if reply is None:  # timed out, died, or the job was cancelled: never reused
                    await self._discard(process)
            if reply is None:
                if timer.cancelled_caught:
                    return PoolReply(error=f"timed out after {timeout_ms} ms")
                return PoolReply(
                    error=f"the pool process (pid {process.pid}) {process.exit_text()} "
                    f"before {ctx.task!r} returned"
                )
            self._idle.append(process)
            return decode_reply(reply)

    async def _take(self) -> PoolProcess | None:
        if self._idle:
            return self._idle.pop()
        process = PoolProcess(self._context)
        try:
            await anyio.to_thread.run_sync(process.start, limiter=self._threads)
        except (OSError, EOFError):
            await self._discard(process)
            return None
        return process

    async def _discard(self, process: PoolProcess) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(process.kill, limiter=self._threads)

    async def close(self) -> None:
        """Stop every idle process (a busy one was killed with its job)."""
        idle, self._idle = self._idle, []
        with anyio.CancelScope(shield=True):
            for process in idle:
                await anyio.to_thread.run_sync(process.stop, limiter=self._threads)


def encode_request(
    fn: Handler, ctx: JobContext, kwargs: dict[str, Any], want_result: bool
) -> bytes:
    request = {
        "module": fn.__module__,
        "qualname": fn.__qualname__,
        "queue": ctx.queue,
        "job_id": ctx.job_id,
        "token": int(ctx.token),
        "task": ctx.task,
        "nonce": ctx.nonce,
        "payload": ctx.payload.decode("utf-8", "surrogateescape"),
        "kwargs": kwargs,
        "want_result": want_result,
    }
    return json.dumps(request).encode()


def decode_reply(data: bytes) -> PoolReply:
    reply = json.loads(data)
    result = reply.get("result")
    return PoolReply(
        error=reply.get("error"),
        trace=reply.get("trace", ""),
        result=result.encode() if isinstance(result, str) else None,
        result_error=reply.get("result_error"),
    )
