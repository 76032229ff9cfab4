"""The worker runtime: everything a running worker does, in one process.

The path a job takes, in call order:

1. `daemon.serve` runs a `worker.Worker`; `assembly.assemble` builds every part once, and the
   worker starts the supervisor, the renewal sweep and the settle batcher in one task group.
2. `supervisor.Supervisor` beats per queue as `agenda.Agenda` schedules it: `queue_upkeep` reaps
   expired leases first (the server clock decides), then promotes due jobs; then `drain.Drainer`.
3. `drain.Drainer` claims as many ready jobs as there are free slots (`claim.lua`: attempts + 1 is
   the fencing token) and records each lease in the `lease.LeaseBook`.
4. `runner.JobRunner` runs each job as its own task in the `jobgroup`, checked by `prestart`
   first, stopped by `timeouts` or by a lost lease.
5. `renewal.RenewalSweep` renews every held lease in one script call per queue per tick, and
   stops a handler itself before the server could give its lease away.
6. `settle.SettleBatcher` writes finished jobs' outcomes, fenced by their tokens, in one call.
7. With nothing to do, the supervisor parks on the queues' wake keys (`wakes`) or stands ready
   for a hand-off (`offers`) until a wake or the next beat.
"""
