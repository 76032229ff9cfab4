"""The deployment files agree with the worker they deploy.

`.ci/check-deploy` runs each ecosystem's own linter (hadolint, systemd-analyze, the compose-spec
schema); these tests check what no linter knows: that the stop timeouts outlast the worker's
longest graceful stop, that every EMQ_* variable and flag they use is one `emq-worker` reads,
that the image's command parses, and that what the Dockerfile copies is in the build context.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from emq_worker.cli import main
from emq_worker.jobs.tasks import load_app
from emq_worker.runtime.config import WorkerSettings
from emq_worker.runtime.worker import RELEASE_TIMEOUT_S

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
UNIT = ROOT / "deploy" / "systemd" / "emq-worker.service"
ENV_EXAMPLE = ROOT / "deploy" / "systemd" / "emq-worker.env.example"
COMPOSE = ROOT / "deploy" / "compose" / "docker-compose.yml"
DEFAULTS = WorkerSettings(queues=("default",))


def longest_graceful_stop_s(grace_ms: int) -> float:
    """SIGTERM to exit at worst: the grace for running jobs, then writing the outcomes of those
    that finished, then handing back what is still held (worker.py `_serve`)."""
    return (grace_ms + DEFAULTS.settle_timeout_ms) / 1000 + RELEASE_TIMEOUT_S


def seconds(value: str) -> float:
    """A systemd or compose duration: `40s`, `1m30s`, `500ms`, or bare seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|min|s|m|h)?", value.strip())
    assert parts, f"not a duration: {value!r}"
    return sum(float(number) * units[unit or "s"] for number, unit in parts)


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, arguments) per build stage; continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    stages: list[list[tuple[str, str]]] = [[]]
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), arguments.strip()))
    return stages[1:]


def instructions(stage: list[tuple[str, str]], name: str) -> list[str]:
    return [arguments for instruction, arguments in stage if instruction == name]


def docker_env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for arguments in instructions(stage, "ENV"):
        for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', arguments):
            env[key] = value.strip('"')
    return env


def unit_settings() -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings[key] = value
    return settings


def env_example() -> tuple[dict[str, str], set[str]]:
    """The variables the example sets, and every EMQ_* name it mentions (commented out too)."""
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    assigned = dict(re.findall(r"^(EMQ_\w+)=(.*)$", text, re.MULTILINE))
    mentioned = set(re.findall(r"^#?\s*(EMQ_\w+)=", text, re.MULTILINE))
    return assigned, mentioned


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = YAML(typ="safe").load(COMPOSE)
    return loaded


def emq_variables() -> set[str]:
    """Every EMQ_* variable some `emq-worker` command reads."""
    names: set[str] = set()
    for command in main.main.commands.values():
        for param in command.params:
            if isinstance(param.envvar, str):
                names.add(param.envvar)
            elif param.envvar:
                names.update(param.envvar)
    return {name for name in names if name.startswith("EMQ_")}


def parse_run(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """`emq-worker run ARGS` parsed under `env` exactly as the CLI would, without running."""
    for name in emq_variables():
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    command = main.main.commands["run"]
    with command.make_context("run", list(args)) as ctx:
        return ctx.params


def test_the_image_runs_as_a_non_root_user_it_creates() -> None:
    final = dockerfile_stages()[-1]
    users = instructions(final, "USER")
    assert users, "the final stage sets no USER: the worker would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), f"USER {users[-1]}: a numeric uid lets runtimes check it is not root"
    assert int(uid) != 0, users[-1]
    assert gid == "" or int(gid) != 0, users[-1]
    created = " ".join(instructions(final, "RUN"))
    assert f"--uid {uid}" in created, "USER names a uid that no useradd in the image creates"


def test_the_final_stage_takes_only_the_virtualenv_from_the_builder() -> None:
    builder, final = dockerfile_stages()[0], dockerfile_stages()[-1]
    assert len(dockerfile_stages()) == 2
    assert instructions(builder, "FROM")[0].endswith(" AS builder")
    assert instructions(final, "COPY") == ["--from=builder /opt/emq-worker /opt/emq-worker"]
    for command in instructions(final, "RUN"):
        assert not re.search(r"\b(pip|apt-get|apt|gcc|make)\b", command), command


def test_the_image_command_is_one_the_cli_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    final = dockerfile_stages()[-1]
    assert json.loads(instructions(final, "ENTRYPOINT")[-1]) == ["emq-worker"]
    assert instructions(final, "STOPSIGNAL") == ["SIGTERM"]
    command = json.loads(instructions(final, "CMD")[-1])
    assert command == ["run"]
    params = parse_run(command[1:], docker_env(final), monkeypatch)
    assert params["queues"] == ("orders",)
    assert params["grace_ms"] == int(docker_env(final)["EMQ_GRACE_MS"])
    load_app(params["app_path"], ".")


def test_a_user_app_in_the_environment_wins_over_the_images_example(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`docker run -e EMQ_APP=... -e EMQ_QUEUES=...` (or ENV in an image built FROM this one)
    replaces the image's variables; the image's CMD then runs the user's app, not the example."""
    final = dockerfile_stages()[-1]
    command = json.loads(instructions(final, "CMD")[-1])
    user = {"EMQ_APP": "tests.apps.ledger:app", "EMQ_QUEUES": "ledger,audit"}
    params = parse_run(command[1:], {**docker_env(final), **user}, monkeypatch)
    assert params["app_path"] == "tests.apps.ledger:app"
    assert params["queues"] == ("ledger", "audit")


def test_the_build_context_keeps_what_the_dockerfile_copies() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        verdict = False  # the last pattern that matches decides, as Docker does
        for pattern in patterns:
            negated = pattern.startswith("!")
            bare = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, bare):
                verdict = not negated
        return verdict

    builder = dockerfile_stages()[0]
    sources = [
        source
        for arguments in instructions(builder, "COPY")
        if not arguments.startswith("--from")
        for source in arguments.split()[:-1]
    ]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not ignored(source), f".dockerignore leaves {source} out of the build context"
    for heavy in [".git", ".venv", "bench", "build", "tests"]:
        assert ignored(heavy), f".dockerignore sends {heavy} to the build context"


def test_the_unit_waits_for_the_longest_graceful_stop_before_sigkill() -> None:
    unit = unit_settings()
    assigned, _ = env_example()
    assert (unit["Type"], unit["NotifyAccess"], unit["KillSignal"]) == ("notify", "main", "SIGTERM")
    timeout = seconds(unit["TimeoutStopSec"])
    assert timeout > longest_graceful_stop_s(DEFAULTS.grace_ms)
    assert timeout > longest_graceful_stop_s(int(assigned["EMQ_GRACE_MS"]))


def test_the_unit_watchdog_outlasts_a_beat_and_its_longest_redis_call() -> None:
    # A beat pass can wait on one Redis call up to the client's socket timeout (beat + 10 s,
    # worker.py) and then back off up to 5 s: the watchdog must not fire on a slow Redis.
    unit = unit_settings()
    longest_pass_s = 2 * DEFAULTS.beat_ms / 1000 + 10 + 5
    assert seconds(unit["WatchdogSec"]) > longest_pass_s


def test_the_env_example_names_only_variables_emq_worker_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assigned, mentioned = env_example()
    assert mentioned <= emq_variables(), mentioned - emq_variables()
    assert "EnvironmentFile" in unit_settings()
    params = parse_run([], assigned, monkeypatch)
    assert params["queues"] == ("orders",)
    assert params["redis_url"].url == assigned["EMQ_REDIS_URL"]


def test_compose_services_parse_and_stop_after_the_longest_graceful_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = compose()["services"]
    worker = services["worker"]
    env = {key: str(value) for key, value in worker["environment"].items()}
    assert set(env) <= emq_variables(), set(env) - emq_variables()
    assert worker["command"][0] == "run"
    params = parse_run(worker["command"][1:], env, monkeypatch)
    assert params["redis_url"].url == "redis://valkey:6379/0"
    load_app(params["app_path"], ".")
    assert seconds(worker["stop_grace_period"]) > longest_graceful_stop_s(params["grace_ms"])

    producer = services["producer"]
    assert set(producer["environment"]) <= emq_variables()
    enqueue = main.main.commands["enqueue"]
    with enqueue.make_context("enqueue", list(producer["command"][1:])) as ctx:
        assert ctx.params["queue"] == "orders"
        assert isinstance(ctx.params["kwargs"], dict)  # parsed and checked as a JSON object


def test_compose_references_resolve() -> None:
    spec = compose()
    services, volumes = spec["services"], spec.get("volumes") or {}
    for name, service in services.items():
        for target, condition in (service.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on undefined service {target}"
            if condition.get("condition") == "service_healthy":
                assert "healthcheck" in services[target], f"{target} has no healthcheck"
        for mount in service.get("volumes") or []:
            source = mount.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in volumes, f"{name} mounts undeclared volume {source}"
        if "build" in service:
            context = (COMPOSE.parent / service["build"]["context"]).resolve()
            assert (context / service["build"].get("dockerfile", "Dockerfile")).is_file()
    assert services["valkey"]["image"].startswith("valkey/valkey:")
    assert "--appendonly" in services["valkey"]["command"]


DEPLOY_DOC = ROOT / "docs" / "how-to" / "deploy.md"


def doc_blocks(language: str) -> list[str]:
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def test_the_deploy_docs_derived_image_can_import_its_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """`COPY dir/ dest/` copies dir's contents: the package must land in a folder of its own name
    under the working directory (--app-dir), and EMQ_APP must name that package."""
    [block] = doc_blocks("dockerfile")
    lines = re.sub(r"\\\n\s*", " ", block).splitlines()
    assert lines[0] == "FROM emq-worker"
    workdir = instructions(dockerfile_stages()[-1], "WORKDIR")[-1].rstrip("/")
    [copy] = [line.split()[1:] for line in lines if line.startswith("COPY ")]
    source, destination = copy[0].rstrip("/"), copy[1].rstrip("/")
    assert destination == f"{workdir}/{source}", (source, destination)
    env = docker_env(
        [("ENV", line.removeprefix("ENV ")) for line in lines if line.startswith("ENV")]
    )
    params = parse_run([], {**docker_env(dockerfile_stages()[-1]), **env}, monkeypatch)
    assert params["app_path"].split(".")[0] == source
    assert params["queues"] == (env["EMQ_QUEUES"],)


def test_the_deploy_docs_create_the_network_their_worker_joins() -> None:
    shell = "\n".join(doc_blocks("sh"))
    joined = re.findall(r"docker run .*--network (\S+)", shell)
    assert joined, "the worker reaches valkey by name: it needs a shared network"
    for network in joined:
        assert f"docker network create {network}" in shell
