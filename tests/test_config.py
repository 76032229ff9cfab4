"""Settings validation: each message names the offending value."""

from __future__ import annotations

from typing import Any

import pytest

from emq_worker.errors import ConfigError
from emq_worker.runtime.config import WorkerSettings


def test_defaults_follow_the_seed() -> None:
    settings = WorkerSettings(queues=("orders",))
    assert settings.lease_ms == 30_000
    assert settings.renew_interval_ms == 10_000
    assert settings.redis_url == "redis://localhost:6379/0"
    assert settings.receipt_ms == 15_000  # the settle timeout (10 s) and a 5 s margin


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"queues": ()}, "at least one --queue"),
        ({"queues": ("a", "a")}, "distinct"),
        ({"queues": ("no spaces",)}, "'no spaces'"),
        ({"concurrency": 0}, "concurrency must be an integer >= 1; got 0"),
        (
            {"lease_ms": 500, "renew_every_ms": 200},
            "renew_every_ms must be at most a third of lease_ms .*renew_every_ms=200, lease_ms=500",
        ),
        ({"redis_url": "http://localhost"}, "scheme .* got 'http'"),
        ({"beat_ms": 0}, "beat_ms .* got 0"),
        ({"node_id": 2000}, "got 2000"),
        ({"max_attempts": 0}, "max_attempts .* got 0"),
    ],
)
def test_bad_settings_are_refused_by_name(overrides: dict[str, Any], message: str) -> None:
    options: dict[str, Any] = {"queues": ("orders",)}
    options.update(overrides)
    with pytest.raises(ConfigError, match=message):
        WorkerSettings(**options)
