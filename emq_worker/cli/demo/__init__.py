"""The lease story, replayed with real jobs on a throwaway redis-server.

It starts `valkey-server` or `redis-server` from PATH on a free port in a temporary directory
(persistence off), runs real workers (in-process, and `emq-worker run` subprocesses it kills and
freezes), and prints what happened to one job per story, as measured: the workers' log events
(captured in-process; JSON lines from subprocesses) and the job's lease deadline polled from
`active` on the server. Everything it started is stopped and removed on exit, Ctrl-C included.

`demo_app` is the handlers' App: `emq-worker run --app emq_worker.cli.demo.app:demo_app`.
"""

from emq_worker.cli.demo.app import demo_app

__all__ = ["demo_app"]
