"""The Redis URL is parsed once where it enters and passed down as one value; a bad part's error
names the URL it came from (password redacted)."""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult

import pytest

from emq_worker import App, JobContext, Producer, WorkerSettings
from emq_worker.errors import ConfigError
from emq_worker.runtime.daemon import serve
from emq_worker.valkey import urls


class _Splits:
    """Counts the URL splits: every parse of a Redis URL in the package goes through
    urls.split_url, which builds one SplitResult each time."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def splits(monkeypatch: pytest.MonkeyPatch) -> _Splits:
    seen = _Splits()
    real = SplitResult

    def counted(*parts: Any) -> Any:
        seen.count += 1
        return real(*parts)

    monkeypatch.setattr(urls, "SplitResult", counted)
    return seen


async def test_a_producer_splits_its_url_once_from_from_url_to_an_enqueue(
    redis_url: str, queue_name: str, splits: _Splits
) -> None:
    async with Producer.from_url(redis_url) as producer:
        await producer.enqueue(queue_name, "noop", {})
        await producer.enqueue(queue_name, "noop", {})
    assert splits.count == 1


app = App()


@app.task
async def noop(ctx: JobContext) -> None:
    """Does nothing: the test counts how often the worker split its URL."""


async def test_a_worker_splits_its_url_once_from_its_settings_to_its_last_job(
    redis_url: str, queue_name: str, splits: _Splits
) -> None:
    producer = Producer.from_url(redis_url)
    await producer.enqueue(queue_name, "noop", {})
    splits.count = 0
    settings = WorkerSettings(queues=(queue_name,), redis_url=redis_url, beat_ms=50, burst=True)
    assert await serve(settings, app) == 0
    assert splits.count == 1
    try:
        assert (await producer.queue(queue_name).counts()).completed == 1
    finally:
        await producer.aclose()


@pytest.mark.parametrize(
    ("url", "part", "named"),
    [
        ("redis://127.0.0.1:99999/0", "got '99999'", "redis://127.0.0.1:99999/0"),
        (
            "redis://app:s3cret@127.0.0.1:6379/abc",
            "got 'abc'",
            "redis://app:***@127.0.0.1:6379/abc",
        ),
        ("redis+cluster://app:s3cret@a:7000,b", "got 'b'", "redis+cluster://app:***@a:7000,b"),
    ],
)
def test_a_bad_part_is_refused_naming_the_url_without_its_password(
    url: str, part: str, named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Producer.from_url(url)
    message = str(refused.value)
    assert part in message
    assert f"in {named!r}" in message
    assert "s3cret" not in message
