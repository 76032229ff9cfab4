"""What runs inside a process of the pool behind `@app.task(executor="process")`.

A pool process is spawned (a fresh interpreter, nothing inherited but `sys.path`), so it finds the
handler as any importer would: by its module and qualified name (process_tasks.py). Requests and
replies cross the pipe as JSON (the job's kwargs are the payload's own JSON): nothing is unpickled
on either side. A process runs one job at a time and lives on for the next; the worker kills it on
a timeout or a lost lease and starts another.
"""

from __future__ import annotations

import json
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from emq_worker.jobs.context import JobContext
from emq_worker.jobs.process_tasks import handler_at
from emq_worker.jobs.results import encode_result
from emq_worker.jobs.tracebacks import bounded_trace
from emq_worker.protocol.names import JobId, Token
from emq_worker.protocol.replies import ClaimedJob


def serve(conn: Connection) -> None:
    """The pool process's main loop: say it is up, then run one request at a time until the
    worker closes the pipe. Ctrl-C reaches the whole process group: the worker decides."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send_bytes(_encode({"ready": os.getpid()}))
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except EOFError:
            return
        conn.send_bytes(_encode(run_request(request)))


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """Call the handler a request names; the reply says how it went (JSON-safe)."""
    try:
        fn = handler_at(request["module"], request["qualname"])
        claimed = ClaimedJob(
            request["queue"],
            JobId(request["job_id"]),
            request["payload"].encode("utf-8", "surrogateescape"),
            Token(request["token"]),
            request["nonce"],
        )
        # No Redis here: progress, job logs and ctx.redis are not available in a pool process.
        ctx = JobContext(claimed, request["task"])
        value = fn(ctx, **request["kwargs"])
    except Exception as exc:  # the handler's failure becomes the job's: reported, not raised
        return {"error": f"{type(exc).__name__}: {exc}", "trace": bounded_trace(exc)}
    if not request["want_result"]:
        return {}
    data, error = encode_result(value)
    return {"result": data.decode(), "result_error": error}


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()
