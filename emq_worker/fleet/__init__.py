"""`emq-worker run --processes N`: one parent process keeps N worker processes running.

Each child is a whole worker (`emq-worker run` with the same command line, one process): its own
connection, beat, leases and renewal; the children share nothing but the server. The parent
restarts a child that exits (backoff), kills one whose beat stops (the watchdog), forwards
SIGTERM for a graceful stop, speaks sd_notify for the whole fleet and, with `--http`, serves
/metrics (its children's, merged), /healthz and /readyz. Children tell the parent how they are
through the same notify protocol they would speak to systemd, on a socket of the parent's.
"""
