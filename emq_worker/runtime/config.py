"""Worker settings: one frozen value, validated on construction, messages naming the value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emq_worker.errors import ConfigError
from emq_worker.jobs.policy import Policy
from emq_worker.observe.http import parse_host_port
from emq_worker.protocol.ids import DEFAULT_NODE_ID, MAX_NODE_ID
from emq_worker.protocol.keys import validate_queue_name
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.protocol.values import DEFAULT_COMPLETED_TTL_MS
from emq_worker.retry import DEFAULT_BACKOFF, Backoff
from emq_worker.valkey.address import RedisAddress
from emq_worker.valkey.connection import DEFAULT_TIMEOUT_S, DEFAULT_URL

RECEIPT_MARGIN_MS = 5_000
"""How much longer than the longest retry a settle receipt (or a claim memo) answers a re-send."""
SOCKET_TIMEOUT_MARGIN_MS = 10_000
STOP_MARGIN_FLOOR_MS = 100
"""The derived stop margin's floor: an event loop blocked for up to about this long (a handler
doing 30 ms of CPU work between awaits) still stops a cut-off handler before the server's
deadline."""
STOP_MARGIN_SHARE = 20
"""The derived stop margin is at least lease_ms / STOP_MARGIN_SHARE (5 %): far above any clock-rate
drift between two machines (a few hundred ppm at worst), and room for a longer loop stall."""


def _flag(
    default: Any,
    help: str,
    *,
    short: str | None = None,
    shown: str | None = None,
    kind: str = "value",
    metavar: str | None = None,
) -> Any:
    """A setting that `emq-worker run` takes as a flag: the flag is `--` and the field's name
    with dashes, its variable EMQ_ and the name in capitals; the CLI derives the click option
    from this declaration (cli/settings_options.py). `kind`: "value", "flag" (on/off),
    "switch" (--x/--no-x), "backoff" (parsed by retry.parse_backoff), "at_least_0"."""
    cli = {"help": help, "short": short, "shown": shown, "kind": kind, "metavar": metavar}
    return field(default=default, metadata={"cli": cli})


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    queues: tuple[str, ...]
    redis_url: str = DEFAULT_URL
    concurrency: int = _flag(10, "Jobs run at once.", short="-c")
    lease_ms: int = _flag(30_000, "How long a claim holds a job without a renewal.")
    beat_ms: int = _flag(1_000, "The longest park while the worker holds jobs.")
    check_window_ms: int = _flag(
        0,
        "How long a queue nothing wakes goes unchecked: the longest wait for a job that "
        "EchoMQ's own producers enqueue (no wake token). 0: the default.",
        shown="10 beats, more past 100 queues; at most a third of --lease-ms",
    )
    """How long an upkeep check vouches for a quiet queue (runtime/agenda.py); 0 means derived
    (`check_window_s`). Shorter costs about four commands per queue per window."""
    renew_every_ms: int = _flag(
        0, "Renewal sweep cadence (0: the default).", shown="a third of --lease-ms"
    )
    """0 means a third of lease_ms."""
    stop_margin_ms: int = _flag(
        0,
        "How long before the server may reap an unconfirmed lease its handler is cancelled "
        "(0: the default).",
        shown="max(100, 5% of --lease-ms), at most half the renewal cadence",
    )
    """How long before the server may reap an unconfirmed lease its handler is cancelled; 0
    means derived (`derived_stop_margin`)."""
    grace_ms: int = _flag(20_000, "On SIGTERM, how long running jobs may finish.")
    max_attempts: int = _flag(3, "Default attempts before a job goes to dead (tasks may override).")
    backoff: Backoff = _flag(
        DEFAULT_BACKOFF,
        "Default retry delay: fixed:MS, exponential:BASE_MS:CAP_MS, jitter:...",
        kind="backoff",
    )
    job_timeout_ms: int = _flag(300_000, "Default handler timeout (tasks may override).")
    wire_version: str = DEFAULT_WIRE_VERSION
    reap_batch: int = 100
    promote_batch: int = 100
    settle_timeout_ms: int = 10_000
    completed_ttl_ms: int = _flag(
        DEFAULT_COMPLETED_TTL_MS,
        "How long a completed job enqueued with --job-id or a dedup id stays a duplicate "
        "(its tombstone key; 0: only while the job lives).",
        kind="at_least_0",
    )
    """The completion window: a job enqueued with a caller-chosen id or a dedup id stays a
    duplicate this long after it completed (0: only while it lives)."""
    burst: bool = _flag(False, "Exit once nothing is held, pending or scheduled.", kind="flag")
    """Exit once nothing is held, pending or scheduled (for scripts and demos)."""
    renew: bool = True
    """Library-only switch to demonstrate a lapsing lease; never off in production."""
    handoff: bool = _flag(
        True,
        "While parked with a free slot, take the next job enqueued straight from the enqueue "
        "script, without a claim round trip.",
        kind="switch",
    )
    """While parked with a free slot, offer to take the next job enqueued straight from the
    enqueue script (no claim round trip); off, every job goes through pending and a claim."""
    node_id: int = DEFAULT_NODE_ID
    http: str | None = _flag(
        None,
        "Serve /metrics, /healthz and /readyz here, e.g. 127.0.0.1:9464 (default: off).",
        metavar="HOST:PORT",
    )
    """HOST:PORT for /metrics, /healthz and /readyz; None serves nothing."""
    history_every_ms: int = 10_000
    """How often the beat adds this worker's counts to the queues' history on the server
    (observe/history_format.py; 0: never). Library-only: the dashboard reads it."""
    connect_wait_ms: int = _flag(
        30_000,
        "At start, retry a dropped, refused or timed-out connection this long before exiting 1.",
    )
    """At start, how long a dropped, refused or timed-out first connection is retried (with
    capped, jittered backoff) before the worker exits 1 (0: one attempt)."""
    process_pool: int | None = None
    """Processes at most for `executor="process"` tasks; None: one per core."""
    check_timeout_ms: int = int(DEFAULT_TIMEOUT_S * 1000)
    """The socket timeout of the start-up checks (the version fence, the eviction-policy check,
    `run --check`): each attempt ends within it. Once serving, the worker's own connection
    waits longer than its park (`socket_timeout_ms`)."""

    parsed_url: RedisAddress | None = field(default=None, repr=False, compare=False)
    """`redis_url` parsed, set on construction (None: parse it); a copy made with
    `dataclasses.replace` (other queues, say) carries it along instead of parsing again."""

    @property
    def address(self) -> RedisAddress:
        """`redis_url` parsed once: what the worker connects and names the server with."""
        assert self.parsed_url is not None  # set by __post_init__
        return self.parsed_url

    @property
    def policy(self) -> Policy:
        """The worker's default job policy, under each task's and each job's (keeps no result)."""
        return Policy(self.max_attempts, self.backoff, self.job_timeout_ms, 0)

    def __post_init__(self) -> None:
        if not self.queues:
            raise ConfigError("at least one --queue is required")
        for queue in self.queues:
            validate_queue_name(queue)
        if len(set(self.queues)) != len(self.queues):
            raise ConfigError(f"queues must be distinct; got {list(self.queues)}", setting="queues")
        if self.parsed_url is None or self.parsed_url.url != self.redis_url:
            object.__setattr__(self, "parsed_url", RedisAddress.parse(self.redis_url))
        _at_least("concurrency", self.concurrency, 1)
        _at_least("lease_ms", self.lease_ms, 30)
        _at_least("beat_ms", self.beat_ms, 10)
        _zero_or_at_least("check_window_ms", self.check_window_ms, self.beat_ms)
        _at_least("renew_every_ms", self.renew_every_ms, 0)
        _at_least("grace_ms", self.grace_ms, 0)
        _at_least("connect_wait_ms", self.connect_wait_ms, 0)
        _at_least("check_timeout_ms", self.check_timeout_ms, 1)
        _at_least("max_attempts", self.max_attempts, 1)
        _at_least("job_timeout_ms", self.job_timeout_ms, 1)
        _at_least("reap_batch", self.reap_batch, 1)
        _at_least("promote_batch", self.promote_batch, 1)
        _at_least("settle_timeout_ms", self.settle_timeout_ms, 100)
        _at_least("completed_ttl_ms", self.completed_ttl_ms, 0)
        _at_least("history_every_ms", self.history_every_ms, 0)
        if self.process_pool is not None:
            _at_least("process_pool", self.process_pool, 1)
        if not 0 <= self.node_id <= MAX_NODE_ID:
            raise ConfigError(f"node_id must be in [0, {MAX_NODE_ID}]; got {self.node_id}")
        self._check_renewal()
        if not self.wire_version:
            raise ConfigError("wire_version must not be empty", setting="wire_version")
        if self.http is not None:
            try:
                parse_host_port(self.http)
            except ConfigError as exc:
                raise ConfigError(str(exc), setting="http") from exc

    def _check_renewal(self) -> None:
        if self.renew_every_ms and self.lease_ms < 3 * self.renew_every_ms:
            # Named after renew_every_ms: it is the one set (0 is its default), so the CLI's
            # error names the flag the user gave, --renew-every-ms.
            raise ConfigError(
                f"renew_every_ms must be at most a third of lease_ms so a missed tick is "
                f"survived; got renew_every_ms={self.renew_every_ms}, lease_ms={self.lease_ms}",
                setting="renew_every_ms",
            )
        _at_least("stop_margin_ms", self.stop_margin_ms, 0)
        if self.stop_margin_ms > self.lease_ms - 2 * self.renew_interval_ms:
            raise ConfigError(
                f"stop_margin_ms must be at most lease_ms - 2 x the renewal interval "
                f"({self.lease_ms - 2 * self.renew_interval_ms} ms), so that a lease renewed "
                f"one tick late is still kept; got stop_margin_ms={self.stop_margin_ms}",
                setting="stop_margin_ms",
            )

    @property
    def renew_interval_ms(self) -> int:
        return self.renew_every_ms or self.lease_ms // 3

    @property
    def stop_margin(self) -> int:
        """The stop margin in force: the setting, or when 0 `derived_stop_margin`."""
        return self.stop_margin_ms or derived_stop_margin(self.lease_ms, self.renew_interval_ms)

    @property
    def socket_timeout_ms(self) -> int:
        """The worker's socket timeout: longer than its longest park (`idle_park_ms`)."""
        return self.beat_ms + SOCKET_TIMEOUT_MARGIN_MS

    @property
    def idle_park_ms(self) -> int:
        """The longest park of a worker that holds nothing (a busy one parks a beat at most):
        three quarters of the socket timeout's margin past a beat, so the BLPOP's own timeout
        still leaves a quarter (2.5 s) for its reply, which the server sends when the BLPOP's
        timeout ends (an idle worker runs no handler that could hold its loop). It was half:
        each idle worker's parks were a third of an idle fleet's commands."""
        return self.beat_ms + SOCKET_TIMEOUT_MARGIN_MS * 3 // 4

    @property
    def claim_memo_ms(self) -> int:
        """How long a claim's memo answers a re-sent claim: the drain claims once more with the
        same nonce after a connection error or a timeout (the socket timeout), and a margin; at
        most the lease."""
        return min(self.lease_ms, self.socket_timeout_ms + RECEIPT_MARGIN_MS)

    @property
    def receipt_ms(self) -> int:
        """How long a settle receipt answers a re-sent complete/fail: the longest a re-send can
        come after the first sending (the settle batcher retries for settle_timeout_ms), and a
        margin for a command that waited in a stalled server's queue."""
        return self.settle_timeout_ms + RECEIPT_MARGIN_MS


def derived_stop_margin(lease_ms: int, renew_interval_ms: int) -> int:
    """max(STOP_MARGIN_FLOOR_MS, 5 % of the lease), at most half a renewal interval: the margin is
    taken from the time a silent cut may last (see docs/explanation/leases.md), so it stays well
    under the interval the renewal re-sends on."""
    return min(max(STOP_MARGIN_FLOOR_MS, lease_ms // STOP_MARGIN_SHARE), renew_interval_ms // 2)


def _zero_or_at_least(name: str, value: int, low: int) -> None:
    """0 chooses the default; anything else must be at least `low`."""
    if value != 0:
        _at_least(name, value, low)


def _at_least(name: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}; got {value!r}", setting=name)
