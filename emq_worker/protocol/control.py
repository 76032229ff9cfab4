"""What an operator may ask of one live worker through the keyspace (`worker_control_key`):
written by `emq-worker quiet|stop` and the dashboard, read by the worker's beat (one GET).

- `quiet`: claim nothing new (withdraw any hand-off offer, stop popping wake tokens) and finish
  what it holds; the worker stays alive and keeps renewing, settling and announcing itself;
- `stop`: quiet, then hand every held job back to pending at once (fenced, with wakes) and exit 0.
"""

from __future__ import annotations

QUIET = "quiet"
STOP = "stop"
ASKS = (QUIET, STOP)
KEEP_MS = 3_600_000
"""How long a request waits for its worker (the key's PX): a worker gone meanwhile never reads
it, and the next one has another id."""
