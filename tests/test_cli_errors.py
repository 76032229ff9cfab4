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
    ],
    ids=["queue-with-space", "queue", "url-scheme", "app-module", "app-attribute", "lease"],
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
