"""The parts of `run --processes` that need no process: the children's command lines and
environment, a slot's states and restart backoff, and the merged /metrics."""

from __future__ import annotations

import re
import sys

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from emq_worker.cli.main import main
from emq_worker.errors import ConfigError
from emq_worker.fleet.child import RESTART_CAP_S, STABLE_S, Child, ChildState, exit_text
from emq_worker.fleet.http import Families, merge
from emq_worker.fleet.plan import FleetPlan, child_environ
from emq_worker.observe.exposition import BeatNotifier, WorkerCollector
from emq_worker.observe.metrics import Counters
from emq_worker.observe.sdnotify import Notifier
from tests.test_sdnotify import StepClock

ARGS = ("run", "-q", "orders", "--app", "shop.jobs", "--processes", "4")


def test_a_child_runs_the_parent_s_command_line_with_one_process_and_its_own_port() -> None:
    plan = FleetPlan(4, ARGS, http="0.0.0.0:9464", process_pool=2)
    assert plan.command(2) == [
        sys.executable,
        "-m",
        "emq_worker.cli",
        *ARGS,
        "--processes",
        "1",
        "--http",
        "0.0.0.0:9467",
        "--process-pool",
        "2",
    ]
    assert FleetPlan(2, ARGS).command(0)[-2:] == ["--processes", "1"]
    assert FleetPlan(2, ARGS, http="[::1]:9000").child_http(1) == "[::1]:9002"


@pytest.mark.parametrize(
    ("http", "args", "message"),
    [
        ("127.0.0.1:0", ARGS, "http needs a fixed port with 3 processes"),
        ("127.0.0.1:65534", ARGS, "http port 65534 + 3 processes passes 65535"),
        (None, ("dashboard",), "processes needs the parent's own `run` command line"),
    ],
)
def test_a_plan_that_cannot_work_is_refused_naming_the_value(
    http: str | None, args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        FleetPlan(3, args, http=http)


def test_a_child_s_service_manager_is_its_parent() -> None:
    systemd = {"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_PID": "1", "PATH": "/bin"}
    env = child_environ({**systemd, "WATCHDOG_USEC": "30000000"}, "/tmp/x/0.sock", 1.5, 42, 0)
    assert env == {
        "PATH": "/bin",
        "NOTIFY_SOCKET": "/tmp/x/0.sock",
        "WATCHDOG_USEC": "1500000",
        "EMQ_PARENT_PID": "42",
        "EMQ_PROCESS_INDEX": "0",
    }


def test_a_child_is_ready_on_ready_and_wedged_once_silent_past_the_watchdog() -> None:
    child = Child(0, state=ChildState.STARTING)
    assert child.hear(["STATUS=connecting"], 1.0) is False
    assert child.silent_for(100.0, 5.0) is None  # not ready yet: not watched
    assert child.hear(["READY=1", "STATUS=serving orders"], 2.0) is True
    assert (child.state, child.status) == (ChildState.READY, "serving orders")
    assert child.hear(["WATCHDOG=1"], 4.0) is False
    assert child.silent_for(9.0, 5.0) is None
    assert child.silent_for(9.5, 5.0) == 5.5
    child.hear(["STOPPING=1"], 10.0)
    assert child.state is ChildState.STOPPING
    assert child.silent_for(100.0, 5.0) is None  # draining: not watched


def test_restarts_back_off_doubling_up_to_a_cap_and_start_over_after_a_stable_run() -> None:
    child = Child(0)
    delays = []
    now = 0.0
    for _ in range(7):
        child.spawned_at = now
        now += 1.0
        delays.append(child.exited(now))
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, RESTART_CAP_S, RESTART_CAP_S]
    child.spawned_at = now
    assert child.exited(now + STABLE_S) == 0.5


def test_exit_text_names_the_signal_or_the_code() -> None:
    assert exit_text(-9) == "killed by SIGKILL"
    assert exit_text(1) == "exit code 1"
    assert exit_text(3) == "exit code 3 (credentials refused)"


def worker_metrics(claimed: int) -> str:
    counters = Counters()
    counters.claimed = claimed
    counters.settled("orders", "charge", "completed", 0.2)
    clock = StepClock()
    registry = CollectorRegistry()
    registry.register(WorkerCollector(counters, [], BeatNotifier(Notifier(), clock, 1.0, 5.0)))
    return generate_latest(registry).decode()


def test_children_s_metrics_merge_into_one_exposition_labelled_by_process() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families(merge([(0, worker_metrics(3)), (1, worker_metrics(5))])))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    claimed = {s.labels["process"]: s.value for s in families["emq_jobs_claimed"].samples}
    assert claimed == {"0": 3.0, "1": 5.0}
    assert text.count("# TYPE emq_job_duration_seconds histogram") == 1
    buckets = [s for s in families["emq_job_duration_seconds"].samples if s.name.endswith("_count")]
    assert sorted(s.labels["process"] for s in buckets) == ["0", "1"]


# --- the flag --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_bad_processes_value_is_a_usage_error_naming_it(value: str) -> None:
    args = ["run", "-q", "q", "--app", "tests.apps.ledger", "--processes", value]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "Invalid value for '--processes' (env var: 'EMQ_PROCESSES')" in result.output
    assert f"got {value!r}" in result.output


def test_http_port_zero_cannot_be_shared_among_processes() -> None:
    args = ["run", "-q", "q", "--app", "tests.apps.ledger", "--processes", "2"]
    result = CliRunner().invoke(main, [*args, "--http", "127.0.0.1:0"])
    assert result.exit_code == 2
    assert "needs a fixed port with 2 processes" in result.output
    assert "got '127.0.0.1:0'" in result.output
