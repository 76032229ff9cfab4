"""What an operator meets on the command line, as a table: an input, the exit code, and the
first line of the message. Usage errors exit 2, runtime errors 1; no input here may end in a
Python traceback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from emq_worker.cli.main import main

APP = "tests.apps.ledger:app"
URL = "{url}"  # replaced by the session server's URL
TMP = "{tmp}"  # replaced by a directory holding emq_broken_app.py, which does not parse


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    code: int
    first_line: str
    """A substring of the first line of the output."""
    env: tuple[tuple[str, str], ...] = ()


def _bad_url(url: str) -> tuple[str, ...]:
    return ("--redis-url", url)


CASES = [
    # -- URLs: a usage error naming the bad part, from every command -----------------------
    Case(
        "url-port-not-a-number-run",
        ("run", "-q", "orders", "--app", APP, *_bad_url("redis://127.0.0.1:notaport/0")),
        2,
        "(env var: 'EMQ_REDIS_URL'): port must be an integer in 1-65535; got 'notaport'",
    ),
    Case(
        "url-port-not-a-number-stats",
        ("stats", *_bad_url("redis://127.0.0.1:notaport/0")),
        2,
        "(env var: 'EMQ_REDIS_URL'): port must be an integer in 1-65535; got 'notaport'",
    ),
    Case(
        "url-port-out-of-range",
        ("stats", *_bad_url("redis://127.0.0.1:99999/0")),
        2,
        "port must be an integer in 1-65535; got '99999'",
    ),
    Case(
        "url-db-not-a-number",
        ("run", "-q", "orders", "--app", APP, *_bad_url("redis://127.0.0.1:1/abc")),
        2,
        "database must be an integer >= 0; got 'abc'",
    ),
    Case(
        "url-db-not-a-number-enqueue",
        ("enqueue", "-q", "orders", "noop", *_bad_url("redis://127.0.0.1:1/abc")),
        2,
        "database must be an integer >= 0; got 'abc'",
    ),
    Case(
        "url-scheme-stats",
        ("stats", *_bad_url("http://x")),
        2,
        "'--redis-url' (env var: 'EMQ_REDIS_URL'): redis URL scheme must be one of",
    ),
    # -- --app ---------------------------------------------------------------------------
    Case(
        "app-syntax-error",
        (
            "run",
            "-q",
            "orders",
            "--app",
            "emq_broken_app:app",
            "--app-dir",
            TMP,
            "--redis-url",
            URL,
        ),
        2,
        "cannot import module 'emq_broken_app' for --app 'emq_broken_app:app': SyntaxError",
    ),
    Case(
        "app-missing-attribute",
        ("run", "-q", "orders", "--app", "tests.apps.ledger:nosuchattr", "--redis-url", URL),
        2,
        "module 'tests.apps.ledger' has no attribute 'nosuchattr'",
    ),
    Case(
        "app-not-an-app",
        ("run", "-q", "orders", "--app", "tests.apps.ledger:LEDGER_ENV", "--redis-url", URL),
        2,
        "must name an emq_worker.App; got str",
    ),
    Case(
        "app-module-alone-means-colon-app",
        ("enqueue", "-q", "orders", "--app", "tests.apps.ledger", "sleep", "--redis-url", URL),
        2,
        "task 'sleep' needs",
    ),
    # -- queue names ---------------------------------------------------------------------
    Case(
        "run-queue-with-a-space",
        ("run", "-q", "my queue", "--app", APP, "--redis-url", URL),
        2,
        "(env var: 'EMQ_QUEUES'): queue name must match [A-Za-z0-9._-]{1,128}; got 'my queue'",
    ),
    Case(
        "enqueue-queue-with-a-space",
        ("enqueue", "-q", "my queue", "noop", "--redis-url", URL),
        2,
        "Invalid value for '--queue' / '-q' (env var: 'EMQ_QUEUE'): queue name must match",
    ),
    # -- settings name their flag and variable -------------------------------------------
    Case(
        "concurrency-zero",
        ("run", "-q", "orders", "--app", APP, "-c", "0", "--redis-url", URL),
        2,
        "'--concurrency' / '-c' (env var: 'EMQ_CONCURRENCY'): must be an integer >= 1; got 0",
    ),
    Case(
        "lease-too-short-from-the-environment",
        ("run", "-q", "orders", "--app", APP, "--redis-url", URL),
        2,
        "Invalid value for '--lease-ms' (env var: 'EMQ_LEASE_MS'): must be an integer >= 30; got 5",
        env=(("EMQ_LEASE_MS", "5"),),
    ),
    Case(
        "backoff-names-its-flag",
        ("run", "-q", "orders", "--app", APP, "--backoff", "nonsense", "--redis-url", URL),
        2,
        "Invalid value for '--backoff' (env var: 'EMQ_BACKOFF'): must be fixed:MS",
    ),
    Case(
        "http-names-its-flag",
        ("run", "-q", "orders", "--app", APP, "--http", "nonsense", "--redis-url", URL),
        2,
        "Invalid value for '--http' (env var: 'EMQ_HTTP'): must be HOST:PORT",
    ),
    Case(
        "queues-distinct-names-the-flag",
        ("run", "-q", "a", "-q", "a", "--app", APP, "--redis-url", URL),
        2,
        "Invalid value for '--queue' / '-q' (env var: 'EMQ_QUEUES'): must be distinct",
    ),
    Case(
        "enqueue-bad-job-id",
        ("enqueue", "-q", "orders", "noop", "--job-id", "bad", "--redis-url", URL),
        2,
        "Invalid value for '--job-id': not a branded id",
    ),
    Case(
        "enqueue-negative-delay",
        ("enqueue", "-q", "orders", "noop", "--delay-ms", "-5", "--redis-url", URL),
        2,
        "Invalid value for '--delay-ms': -5 is not in the range x>=0.",
    ),
    Case(
        "repeat-every-zero",
        ("repeat", "add", "r", "noop", "-q", "orders", "--every-ms", "0", "--redis-url", URL),
        2,
        "Invalid value for '--every-ms': 0 is not in the range x>=1.",
    ),
    # -- enqueue checks the arguments when it can see the task ---------------------------
    Case(
        "enqueue-missing-kwargs-with-app",
        ("enqueue", "-q", "orders", "--app", APP, "sleep", "--redis-url", URL),
        2,
        "Invalid value for 'KWARGS': task 'sleep' needs",
    ),
    Case(
        "enqueue-unknown-task-with-app",
        ("enqueue", "-q", "orders", "--app", APP, "nosuch", "--redis-url", URL),
        2,
        "Invalid value for 'TASK': unknown task 'nosuch'",
    ),
    # -- pause/resume take QUEUE or -q; a queue with no keys yet can be paused -------------
    Case(
        "pause-positional-new-queue",
        ("pause", "t.table.p1", "--redis-url", URL),
        0,
        "paused queue 't.table.p1'",
    ),
    Case(
        "pause-flag",
        ("pause", "-q", "t.table.p2", "--redis-url", URL),
        0,
        "paused queue 't.table.p2'",
    ),
    Case(
        "resume-flag",
        ("resume", "--queue", "t.table.p3", "--redis-url", URL),
        0,
        "queue 't.table.p3' was already running",
    ),
    Case("pause-no-queue", ("pause", "--redis-url", URL), 2, "Error: name the queue: -q QUEUE"),
    Case(
        "pause-two-queues",
        ("pause", "a", "-q", "b", "--redis-url", URL),
        2,
        "Error: two queues named: 'a' and --queue 'b'",
    ),
    Case(
        "pause-bad-name",
        ("pause", "-q", "my queue", "--redis-url", URL),
        2,
        "queue name must match",
    ),
    # -- --check ---------------------------------------------------------------------------
    Case(
        "check-passes",
        ("run", "--check", "-q", "orders", "--app", "tests.apps.ledger", "--redis-url", URL),
        0,
        "app: 3 task(s), 0 raw handler(s)",
    ),
    Case(
        "check-unreachable",
        ("run", "--check", "-q", "orders", "--app", APP, "--redis-url", "redis://127.0.0.1:1/0"),
        1,
        "Error: Redis at redis://127.0.0.1:1/0",
    ),
    # -- a job id without --queue: found when one queue holds it ---------------------------
    Case(
        "inspect-unknown-job-anywhere",
        ("inspect", "JOB00000000001", "--redis-url", URL),
        1,
        "Error: no job JOB00000000001 in any of",
    ),
    Case(
        "result-unknown-job-anywhere",
        ("result", "JOB00000000001", "--redis-url", URL),
        1,
        "Error: no job JOB00000000001 in any of",
    ),
    Case(
        "result-negative-wait",
        ("result", "JOB00000000001", "--wait", "-1", "--redis-url", URL),
        2,
        "Invalid value for '--wait'",
    ),
]


def first_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Error:"):
            return line
    return lines[0] if lines else ""


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_operator_table(case: Case, redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "emq_broken_app.py").write_text("app = (\n", encoding="utf-8")
    args = [arg.replace(URL, redis_url).replace(TMP, str(tmp_path)) for arg in case.args]
    env = {"EMQ_QUEUES": "", **dict(case.env)}
    result = CliRunner().invoke(main, args, env=env)
    output = result.output
    assert "Traceback" not in output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), repr(result.exception)
    assert result.exit_code == case.code, output
    assert case.first_line in first_line(output), output


def test_emq_queues_still_splits_on_commas_and_spaces() -> None:
    from emq_worker.cli.options import split_queues

    assert split_queues(("a,b c",)) == ("a", "b", "c")


def test_emq_queues_splits_on_spaces_and_commas_where_the_flag_does_not(redis_url: str) -> None:
    args = ["run", "--check", "--app", APP, "--redis-url", redis_url]
    from_env = CliRunner().invoke(main, args, env={"EMQ_QUEUES": "t.e1 t.e2,t.e3"})
    assert from_env.exit_code == 0, from_env.output
    assert "queues: t.e1, t.e2, t.e3" in from_env.output
    from_flag = CliRunner().invoke(main, [*args, "-q", "t.f1,t.f2"], env={"EMQ_QUEUES": ""})
    assert "queues: t.f1, t.f2" in from_flag.output
