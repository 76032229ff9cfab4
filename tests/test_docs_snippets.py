"""Every Python snippet in README.md and docs/ runs, against a real server, or says why it cannot.

A page's snippets run in order in one namespace (a page reads like a script pasted block by
block), with `EMQ_REDIS_URL` set and the docs' `redis://localhost:6379/0` pointed at this
session's server (on a database of its own, emptied first). A snippet runs as a user pastes it:
as a script, so no top-level `await` or `async with`, and every name it uses is its own or an
earlier block's. An HTML comment on the line before a snippet steers it:

- `<!-- not runnable: REASON -->` skips it (the reason is required);
- `<!-- worker: QUEUE -->` runs it while a worker serves QUEUE with the namespace's `app`;
- `<!-- fragment: REASON -->` marks a piece of an async function (the reason is required, and the
  snippet's first line is a comment saying so to the reader): it may `await`, and runs with
  `producer` (a `Producer`) and `client` (a Redis client) defined. `worker:` snippets are
  fragments of this kind too when they `await`.

Shell blocks: every `emq-worker ...` command line in them parses as the CLI would take it (flags,
arguments and their checks; nothing runs), unless it is notation (`[--json]`, `(A | B)`, `...`)
or names a placeholder (`JOB_ID`).

A snippet that awaits runs on the event loop; one that does not runs in a thread, so a blocking
call (a sync producer waiting for a result) does not stall the worker.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import click
import pytest

from emq_worker import App, Producer
from emq_worker.cli.main import main
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.valkey.connection import connect
from tests.support.running import running_worker, worker_settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    r"(?:^<!-- (?P<directive>[^>]*?) -->\n)?^```python\n(?P<code>.*?)^```$", re.M | re.S
)
DOCS_URL = "redis://localhost:6379/0"
SNIPPET_DB = 9


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    code: str
    directive: str

    @property
    def skip_reason(self) -> str | None:
        name, _, reason = self.directive.partition(":")
        return reason.strip() if name.strip() == "not runnable" else None

    @property
    def worker_queue(self) -> str | None:
        name, _, queue = self.directive.partition(":")
        return queue.strip() if name.strip() == "worker" else None

    @property
    def fragment_reason(self) -> str | None:
        name, _, reason = self.directive.partition(":")
        return reason.strip() if name.strip() == "fragment" else None

    @property
    def fragment(self) -> bool:
        """Run inside the session, with `producer` and `client`: marked so, or a worker snippet
        that awaits (its worker, like the fragment's producer, is the page's context)."""
        return self.fragment_reason is not None or (
            self.worker_queue is not None and not is_script(self.code)
        )

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    text = page.read_text(encoding="utf-8")
    return [
        Snippet(page, text.count("\n", 0, m.start("code")) + 1, m["code"], m["directive"] or "")
        for m in BLOCK.finditer(text)
    ]


PAGES_WITH_SNIPPETS = [page for page in PAGES if snippets(page)]
INJECTED = {"producer", "client"}


def is_script(code: str) -> bool:
    """Whether `code` compiles as a module (no top-level `await` / `async with`)."""
    try:
        compile(code, "<snippet>", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    return True


def names(code: str) -> tuple[set[str], set[str]]:
    """(names the snippet binds at any level, names it reads)."""
    tree = compile(code, "<snippet>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


@pytest.mark.parametrize("page", PAGES_WITH_SNIPPETS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_snippet_not_marked_a_fragment_runs_as_a_pasted_script(page: Path) -> None:
    """A user pastes blocks in order into one file: each unmarked block is valid there and uses
    no name that only this test's session defines (`producer`, `client`)."""
    defined = set(dir(builtins))
    for snippet in snippets(page):
        if snippet.skip_reason:
            continue
        bound, read = names(snippet.code)
        if snippet.fragment:
            assert snippet.fragment_reason != "", f"{snippet.where}: 'fragment' needs a reason"
            assert snippet.code.startswith("#"), (
                f"{snippet.where}: a fragment's first line tells the reader it is one"
            )
            continue
        assert is_script(snippet.code), (
            f"{snippet.where}: a top-level await fails as a script: wrap it in a function and "
            "anyio.run it, or mark it <!-- fragment: REASON -->"
        )
        missing = (read & INJECTED) - defined - bound
        assert not missing, f"{snippet.where}: uses {sorted(missing)}, defined by no block before"
        defined |= bound


def test_every_snippet_runs_or_says_why_not() -> None:
    found = [s for page in PAGES for s in snippets(page)]
    assert len(found) >= 10, f"only {len(found)} Python snippets found: is the pattern stale?"
    for snippet in found:
        where = f"{snippet.page.relative_to(ROOT)}:{snippet.line}"
        assert snippet.skip_reason != "", f"{where}: 'not runnable' needs a reason"
        known = snippet.skip_reason or snippet.worker_queue or snippet.fragment_reason
        assert snippet.directive == "" or known, f"{where}: unknown directive {snippet.directive!r}"


async def _execute(code: str, namespace: dict[str, Any]) -> None:
    compiled = compile(code, "<snippet>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        await eval(compiled, namespace)
    else:
        await anyio.to_thread.run_sync(exec, compiled, namespace)


@pytest.mark.parametrize("page", PAGES_WITH_SNIPPETS, ids=lambda p: str(p.relative_to(ROOT)))
async def test_the_snippets_of_a_page_run_in_order(
    page: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = redis_url.rsplit("/", 1)[0] + f"/{SNIPPET_DB}"
    monkeypatch.setenv("EMQ_REDIS_URL", url)
    client = connect(url, DEFAULT_WIRE_VERSION)
    await client.flushdb()
    namespace: dict[str, Any] = {"__name__": f"snippets_{page.stem}"}
    try:
        async with Producer.from_url(url) as producer:
            for snippet in snippets(page):
                if snippet.skip_reason:
                    continue
                for name in INJECTED:  # a script's own `producer` stays its own
                    namespace.pop(name, None)
                if snippet.fragment:
                    namespace.update(producer=producer, client=client)
                code = snippet.code.replace(DOCS_URL, url)
                queue = snippet.worker_queue
                with anyio.fail_after(30):
                    if queue is None:
                        await _execute(code, namespace)
                        continue
                    app = namespace.get("app")
                    assert isinstance(app, App), f"{page.name}:{snippet.line}: no `app` before it"
                    async with running_worker(worker_settings(queue, url), app):
                        await _execute(code, namespace)
    finally:
        await client.aclose()


SHELL_BLOCK = re.compile(r"^```(?:sh|bash|shell)\n(?P<code>.*?)^```$", re.M | re.S)
NOTATION = re.compile(r"[\[\]()<>]|\.\.\.|\b[A-Z][A-Z_]{2,}\b")
"""Synopsis notation, or a placeholder the reader replaces (JOB_ID, QUEUE)."""


def command_lines(page: Path) -> list[str]:
    """The `emq-worker ...` commands of a page's shell blocks (continuations joined, comments,
    a trailing `&` and the commands chained with && or ; or shown side by side with / set
    apart)."""
    found = []
    for block in SHELL_BLOCK.finditer(page.read_text(encoding="utf-8")):
        for line in block["code"].replace("\\\n", " ").splitlines():
            for part in re.split(r"\s(?:&&|;|\||/)\s", line.split(" #")[0]):
                command = part.strip().removesuffix("&").strip()
                if command.startswith("emq-worker ") and not NOTATION.search(command):
                    found.append(command)
    return found


def parse_command_line(line: str) -> None:
    """Parse (never run) `emq-worker ARGS` down to its command: a usage error raises."""
    args = shlex.split(line)[1:]
    command: click.Command = main
    while isinstance(command, click.Group):
        name, args = args[0], args[1:]
        sub = command.get_command(click.Context(command), name)
        assert sub is not None, f"no command {name!r}"
        command = sub
    with command.make_context(command.name, args):
        pass


@pytest.mark.parametrize(
    "page",
    [page for page in PAGES if command_lines(page)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_command_lines_of_a_page_parse(page: Path) -> None:
    for line in command_lines(page):
        try:
            parse_command_line(line)
        except click.ClickException as exc:
            where = f"{page.relative_to(ROOT)}: {line!r}"
            raise AssertionError(f"{where}: {exc.format_message()}") from exc
