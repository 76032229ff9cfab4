"""The benchmark's peer set: arq, SAQ, taskiq, streaq, BullMQ's Python port and BullMQ on Node.js,
each with a runner that runs the same tasks and imports only its own library and the standard
library. Static checks (fast, no server, no peer installed), and both BullMQ runners run against
a real server."""

from __future__ import annotations

import ast
import re
import shutil
import sys
from pathlib import Path

import pytest
import redis

from bench.peers import SYSTEMS, System, ensure_venv
from bench.procs import Proc
from bench.runners.common import BODY_KEY

RUNNERS = Path(__file__).resolve().parent.parent / "bench" / "runners"
TASKS = ("noop", "sleep1ms", "incr", "incr_handler", "incr_cpu1ms", "hold", "probe")
OWN_LIBRARIES = {
    "arq": {"arq"},
    "saq": {"saq"},
    "taskiq": {"taskiq", "taskiq_redis"},
    "streaq": {"streaq", "coredis"},
    "bullmq_py": {"bullmq"},
}
"""What each Python peer's runner may import besides the standard library and the shared
`bench.runners.common` (which the realistic body's redis-py is imported by)."""
NODE_REQUIRE = re.compile(r"""(?:require|load)\(\s*["']([^"']+)["']""")


def python_peers() -> list[System]:
    return [
        s for s in SYSTEMS.values() if s.is_peer and getattr(s, "runtime", "python") == "python"
    ]


def test_taskiq_streaq_and_both_bullmqs_are_peers() -> None:
    assert {"emq", "arq", "saq", "taskiq", "streaq", "bullmq_py", "bullmq_node"} <= set(SYSTEMS)
    assert SYSTEMS["bullmq_py"].requirements[0] == "bullmq"  # PyPI's, BullMQ's own port
    node = SYSTEMS["bullmq_node"]
    assert node.runtime == "node"
    assert set(node.requirements) == {"bullmq", "ioredis"}
    assert (RUNNERS.parent.parent / node.module).is_file()


@pytest.mark.parametrize("system", python_peers(), ids=lambda s: s.name)
def test_a_python_peer_imports_only_its_library_and_the_standard_library(system: System) -> None:
    path = RUNNERS.parent.parent / (system.module.replace(".", "/") + ".py")
    allowed = OWN_LIBRARIES[system.name] | set(sys.stdlib_module_names) | {"__future__"}
    for node in ast.walk(ast.parse(path.read_text())):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in modules:
            top = module.split(".")[0]
            assert top in allowed or module == "bench.runners.common", f"{path.name}: {module}"


@pytest.mark.parametrize("system", python_peers(), ids=lambda s: s.name)
def test_a_python_peer_runs_every_task(system: System) -> None:
    source = (RUNNERS.parent.parent / (system.module.replace(".", "/") + ".py")).read_text()
    for task in TASKS:
        assert re.search(rf"\b{task}\b", source), f"{system.name} has no {task}"


def test_the_node_runner_uses_only_bullmq_ioredis_and_node() -> None:
    source = (RUNNERS / "bullmq_runner.cjs").read_text()
    required = set(NODE_REQUIRE.findall(source))
    assert {"bullmq", "ioredis"} <= required
    assert all(name in {"bullmq", "ioredis"} or name.startswith("node:") for name in required)
    for task in TASKS:
        assert re.search(rf"^  {task}: async", source, re.MULTILINE), f"no {task}"
    # the guide's retention, and the same measures as the Python runners report
    assert "removeOnComplete: { count: 1000 }" in source
    assert "removeOnFail: { count: 5000 }" in source
    for field in ("cpu_s", "sends", "body_sends", "on_cpu_s", "first_start", "last_finish"):
        assert f"{field}:" in source or f" {field}," in source, field


@pytest.mark.soak
@pytest.mark.parametrize("name", ["bullmq_node", "bullmq_py"])
def test_a_bullmq_runner_drains_through_the_same_protocol(
    name: str, redis_url: str, tmp_path: Path
) -> None:
    """BullMQ's runners (on Node.js, and its Python port) fill and drain real jobs on a real
    server and report what a drain reports (installing bullmq on first use, as the bench does:
    with npm, or with pip into the port's own venv)."""
    system = SYSTEMS[name]
    if system.runtime == "node" and (shutil.which("node") is None or shutil.which("npm") is None):
        pytest.skip("node and npm are not on PATH")
    ensure_venv(system, uvloop=False, refresh=False)
    n, queue = 200, f"bench-{name}-runner"
    client = redis.Redis.from_url(redis_url)
    client.delete(BODY_KEY)
    base = {"url": redis_url, "queue": queue}
    fill = {**base, "mode": "fill", "n": n, "task": "incr", "kwargs": {}}
    with Proc(system.command(), fill, None, tmp_path / "fill.log") as proc:
        proc.wait("done", 60)
        proc.finish()
    drain = {**base, "mode": "drain", "n": n, "concurrency": 20}
    with Proc(system.command(), drain, None, tmp_path / "drain.log") as proc:
        assert proc.wait("ready", 60)["VmRSS"] > 0
        done = proc.wait("done", 60)
        proc.finish()
    assert done["completed"] == n
    assert done["body_sends"] == n
    assert done["sends"] >= n
    assert done["cpu_s"] > 0
    assert done["first_start"] <= done["last_finish"]
    assert int(client.get(BODY_KEY) or 0) == n
    assert client.zcard(f"bull:{queue}:completed") == n  # under removeOnComplete's 1 000
    client.close()
