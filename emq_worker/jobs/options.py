"""The options of one enqueue, declared once.

`Producer.enqueue`, `SyncProducer.enqueue`, a task handle's `with_options` and `JobSpec` all take
these keywords as `**options: Unpack[EnqueueOptions]` (a raw payload: `Unpack[Placement]`), so
mypy checks a misspelt option everywhere, and at run time an unknown one raises TypeError before
anything is written. `Placement` says where, when and under which identity the job waits; the
rest (`POLICY_NAMES`) overrides the task's policy for this job and travels in the JSON envelope.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, TypedDict, cast

from emq_worker.errors import ConfigError
from emq_worker.jobs.policy import WIRE_NAMES as POLICY_NAMES
from emq_worker.jobs.policy import JobPolicy, PolicyOptions


class Placement(TypedDict, total=False):
    """Where, when and as what a job waits (every option a raw payload may carry)."""

    delay_ms: int | None
    """Run after this many ms on the server clock (0 or None: now)."""
    run_at: dt.datetime | None
    """Run at this timezone-aware time (not with delay_ms)."""
    job_id: str | None
    """A caller-chosen JOB id: enqueueing it again is a duplicate (idempotent)."""
    dedup_id: str | None
    """Enqueue only if no job is parked under this key; `[A-Za-z0-9._-]{1,255}`."""
    dedup_ttl_ms: int | None
    """Release the dedup key after this long even if the job still lives (None: when the
    completion window after the job completed ends, or at removal)."""
    group: str | None
    """The fair lane to wait in (e.g. a tenant); `[A-Za-z0-9._-]{1,128}`; None: no lane."""
    priority: int
    """Lower is claimed first (within its lane, or among ungrouped jobs); 0 by default."""
    key: str | None
    """On a partitioned queue, the jobs of one key go to one partition (crc32(key) mod N), so
    they keep their order among themselves; ignored on a plain queue."""


class EnqueueOptions(Placement, PolicyOptions, total=False):
    """`Placement` plus this job's overrides of its task's policy (`PolicyOptions`)."""


PLACEMENT_NAMES = Placement.__optional_keys__
ENQUEUE_NAMES = EnqueueOptions.__optional_keys__


def check_names(options: Mapping[str, object], allowed: frozenset[str], where: str) -> None:
    """TypeError, as Python's own for a keyword the signature lacks, naming the first unknown."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")


def split_options(options: Mapping[str, Any]) -> tuple[Placement, JobPolicy | None]:
    """The placement, and the policy overrides given (None when no override is)."""
    given = {name: options[name] for name in POLICY_NAMES if options.get(name) is not None}
    placement = {name: value for name, value in options.items() if name not in POLICY_NAMES}
    return cast(Placement, placement), JobPolicy(**given) if given else None


def given_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with a value: None leaves an option to the layer below."""
    return {name: value for name, value in options.items() if value is not None}


def one_policy(options: JobPolicy | None, overrides: JobPolicy | None) -> JobPolicy | None:
    if options is not None and overrides is not None:
        raise ConfigError(
            "give the job's policy as options=JobPolicy(...) or as keywords "
            "(max_attempts, backoff, timeout_ms, result_ttl_ms), not both"
        )
    return options if options is not None else overrides
