"""A handler's traceback as a failed job's row keeps it: formatted with its causes, cut to its end
(where the error is), so one bad job cannot bloat its row."""

from __future__ import annotations

import traceback

TRACE_BYTES = 8 * 1024
"""The most of a handler's traceback a failed job's row keeps: its end, where the error is."""


def bounded_trace(exc: BaseException) -> str:
    """The formatted traceback (with its causes), cut to its last TRACE_BYTES bytes."""
    trace = "".join(traceback.format_exception(exc)).encode("utf-8", "replace")
    if len(trace) <= TRACE_BYTES:
        return trace.decode()
    cut = b"... (traceback cut to its last 8 KB)\n"
    return (cut + trace[len(cut) - TRACE_BYTES :]).decode("utf-8", "ignore")
