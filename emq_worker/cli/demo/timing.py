"""The demo's cadence: a lease short enough to watch lapse, jobs longer than it, fast beats."""

LEASE_MS = 600
LONG_JOB_MS = 1500
SHORT_JOB_MS = 1000
WATCHER_BEAT_MS = 50
HOLDER_BEAT_MS = 100
POLL_S = 0.01
STORY_TIMEOUT_S = 8.0
START_TIMEOUT_S = 15.0
"""How long a server or a subprocess worker may take to start."""
