"""The child's side of the fleet: it logs which process it is, and it stops when its parent dies.

The parent starts each child in a session of its own, so that a Ctrl-C on a terminal reaches the
parent alone (which stops the children once, gracefully). The price: a parent killed outright
(SIGKILL, the OOM killer) would leave its children serving on. So a child asks Linux for a signal
when its parent dies (PR_SET_PDEATHSIG): SIGHUP, which a fleet child takes as a graceful stop
however often it comes (Linux sends it again as the child is handed from one of the dead parent's
threads to the next, then to init; a second SIGTERM would force the stop). It finishes or hands
back its held jobs and exits. Elsewhere there is no such request, and nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import structlog

PR_SET_PDEATHSIG = 1
PARENT_GONE = signal.SIGHUP
"""The signal a fleet child gets when its parent dies; the daemon stops gracefully on it."""


def join_fleet(index: int, parent_pid: int) -> bool:
    """Bind `process=index` to every log line and stop with the parent; False when the parent
    is already gone (the child should not start serving)."""
    structlog.contextvars.bind_contextvars(process=index)
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(PARENT_GONE), 0, 0, 0)  # a refusal leaves it unset
    return os.getppid() == parent_pid
