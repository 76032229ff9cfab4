"""What an operator may ask of one live worker through the keyspace: written by `emq-worker
quiet|stop` and the dashboard as an `asked` field in the worker's own presence entry
(`{emq}:worker:<id>`, or its per-queue entry), heard at the worker's next presence refresh, which
writes its entry with SET ... GET and so reads the request back at no cost of its own.

- `quiet`: claim nothing new (withdraw any hand-off offer, stop popping wake tokens) and finish
  what it holds; the worker stays alive and keeps renewing, settling and announcing itself;
- `stop`: quiet, then hand every held job back to pending at once (fenced, with wakes) and exit 0.
"""

from __future__ import annotations

QUIET = "quiet"
STOP = "stop"
ASKS = (QUIET, STOP)
ASKS_BY_WEIGHT = ("", QUIET, STOP)
"""Nothing, quiet, stop: a worker asked two things through two entries honours the weightier."""
ASKED = "asked"
"""The entry field an operator's request is written in; the worker's next refresh replaces the
entry (its own `control` field then says what it honours)."""
