"""`emq-worker run` refuses bad input with a usage error (exit 2) that names the bad value, and
finds an app module in the directory it is started from, as the README's quick start expects."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from emq_worker.cli.main import main
from tests.support.processes import EMQ_WORKER

APP = "tests.apps.ledger:app"
URL = "redis://127.0.0.1:6379/0"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        # On the command line a space does not split queues: 'bad name!' is one, bad, name.
        (["--queue", "bad name!", "--app", APP, "--redis-url", URL], "got 'bad name!'"),
        (["--queue", "bad/name", "--app", APP, "--redis-url", URL], "got 'bad/name'"),
        (["--queue", "orders", "--app", APP, "--redis-url", "http://x"], "'http'"),
        (["--queue", "orders", "--app", "nosuch:app", "--redis-url", URL], "'nosuch'"),
        (["--queue", "orders", "--app", "tests.apps.ledger:nope", "--redis-url", URL], "'tests"),
        (["--queue", "orders", "--app", APP, "--lease-ms", "5"], "'--lease-ms'"),
        (
            ["--queue", "orders", "--app", APP, "--lease-ms", "1500", "--stop-margin-ms", "600"],
            "got stop_margin_ms=600",
        ),
    ],
    ids=[
        "queue-with-space",
        "queue",
        "url-scheme",
        "app-module",
        "app-attribute",
        "lease",
        "stop-margin",
    ],
)
def test_run_rejects_bad_input_naming_it(args: list[str], named: str) -> None:
    code, output = run(*args)
    assert code == 2, output
    assert "Error:" in output
    assert named in output


def test_run_names_the_url_scheme_it_accepts() -> None:
    code, output = run("--queue", "orders", "--app", APP, "--redis-url", "http://x")
    assert code == 2
    for scheme in ("redis", "rediss", "unix"):
        assert scheme in output


@pytest.mark.fault
def test_run_imports_an_app_module_from_its_working_directory(
    tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    # README: write myapp/jobs.py, then `emq-worker run --app myapp.jobs:app` from that directory.
    (tmp_path / "cwd_jobs.py").write_text("from emq_worker import App\n\napp = App()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_") and k != "PYTHONPATH"}
    args = [str(EMQ_WORKER), "run", "--queue", queue_name, "--app", "cwd_jobs:app"]
    args += ["--redis-url", redis_url, "--burst", "--log-format", "json"]
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    assert b"burst_done" in done.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--backoff", "exponential:5000:1000"], "base_ms=5000, cap_ms=1000"),
        (["--renew-every-ms", "60000"], "'--renew-every-ms'"),
    ],
    ids=["backoff-base-above-cap", "renew-above-a-third-of-the-lease"],
)
def test_run_refuses_settings_that_contradict_each_other_naming_the_flag_given(
    args: list[str], named: str
) -> None:
    # A port nothing listens on: a run that wrongly starts fails at once, touching no server.
    unreachable = "redis://127.0.0.1:1/0"
    code, output = run("--queue", "orders", "--app", APP, "--redis-url", unreachable, *args)
    assert code == 2, output
    assert "Usage: " in output
    assert named in output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--job-id", "myjob", "charge"], "'--job-id'"),
        (["--dedup-id", "has space", "charge"], "'--dedup-id'"),
        ([""], "'TASK'"),
    ],
    ids=["job-id", "dedup-id", "empty-task"],
)
def test_enqueue_refuses_a_bad_id_or_task_as_a_usage_error_before_connecting(
    args: list[str], named: str
) -> None:
    result = CliRunner().invoke(
        main, ["enqueue", "-q", "orders", *args], env={"EMQ_REDIS_URL": "redis://127.0.0.1:1/0"}
    )
    assert result.exit_code == 2, result.output
    assert "Usage: " in result.output
    assert named in result.output
