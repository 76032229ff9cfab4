"""How a worker is observed.

Structured logs, the worker's own clock, counters, loop lag, the beat's status line, sd_notify,
and the Prometheus exposition and HTTP endpoint that read them.
"""
