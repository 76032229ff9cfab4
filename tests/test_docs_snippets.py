"""Every Python snippet in README.md and docs/ runs, against a real server, or says why it cannot.

A page's snippets run in order in one namespace (a page reads like a session), with `producer` (a
`Producer`) and `client` (a Redis client) defined, `EMQ_REDIS_URL` set, and the README's
`redis://localhost:6379/0` pointed at this session's server (on a database of its own, emptied
first). An HTML comment on the line before a snippet steers it:

- `<!-- not runnable: REASON -->` skips it (the reason is required);
- `<!-- worker: QUEUE -->` runs it while a worker serves QUEUE with the namespace's `app`.

A snippet that awaits runs on the event loop; one that does not runs in a thread, so a blocking
call (a sync producer waiting for a result) does not stall the worker.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from emq_worker import App, Producer
from emq_worker.protocol.names import DEFAULT_WIRE_VERSION
from emq_worker.server.connection import connect
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


def snippets(page: Path) -> list[Snippet]:
    text = page.read_text(encoding="utf-8")
    return [
        Snippet(page, text.count("\n", 0, m.start("code")) + 1, m["code"], m["directive"] or "")
        for m in BLOCK.finditer(text)
    ]


PAGES_WITH_SNIPPETS = [page for page in PAGES if snippets(page)]


def test_every_snippet_runs_or_says_why_not() -> None:
    found = [s for page in PAGES for s in snippets(page)]
    assert len(found) >= 10, f"only {len(found)} Python snippets found: is the pattern stale?"
    for snippet in found:
        where = f"{snippet.page.relative_to(ROOT)}:{snippet.line}"
        assert snippet.skip_reason != "", f"{where}: 'not runnable' needs a reason"
        assert snippet.directive == "" or (snippet.skip_reason or snippet.worker_queue), (
            f"{where}: unknown directive {snippet.directive!r}"
        )


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
