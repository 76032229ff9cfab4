"""The benchmark compares like with like: every system's runner applies the same runtime tuning,
emq-worker's runner uses only the public API (what a user can write), and bench/README names
only what exists. Static checks: fast, no server."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import emq_worker
from bench.runners import common
from emq_worker.runtime import daemon

BENCH = Path(__file__).resolve().parent.parent / "bench"
EMQ_SIDE = [BENCH / "runners" / "emq_runner.py", BENCH / "apps_emq.py"]
PEER_RUNNERS = sorted((BENCH / "runners").glob("*_runner.py"))
DOTTED = re.compile(r"\bemq_worker(?:\.[A-Za-z_]\w*)+")


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text())
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def calls_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }


def test_emq_workers_runner_uses_only_the_public_api() -> None:
    for path in EMQ_SIDE:
        for module, names in imports_of(path):
            if module.startswith("emq_worker"):
                assert module == "emq_worker", f"{path.name} imports {module}: not public"
                assert set(names) <= set(emq_worker.__all__), f"{path.name}: {names}"


def test_every_runner_tunes_the_runtime_as_emq_worker_run_does() -> None:
    assert common.GC_YOUNG_THRESHOLD == daemon.GC_YOUNG_THRESHOLD
    workers = [path for path in PEER_RUNNERS if path.name != "floor_runner.py"]
    assert len(workers) >= 3, workers  # emq-worker, arq, SAQ at least
    for path in workers:
        assert calls_of(path) & {"tune_runtime", "run_peer"}, f"{path.name} runs untuned"
    assert "tune_runtime" in calls_of(BENCH / "runners" / "common.py")  # run_peer's


def test_the_bench_readme_names_only_what_exists() -> None:
    for dotted in set(DOTTED.findall((BENCH / "README.md").read_text())):
        parts = dotted.split(".")
        target: object = None
        for cut in range(len(parts), 0, -1):
            try:
                target = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[cut:]:
                assert hasattr(target, attribute), f"bench/README.md names {dotted}"
                target = getattr(target, attribute)
            break
        assert target is not None, f"bench/README.md names {dotted}"
