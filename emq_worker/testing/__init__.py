"""Testing kit for emq-worker apps: a pytest plugin and helpers.

Enable it with `pytest -p emq_worker.testing`, or `pytest_plugins = ["emq_worker.testing"]` in
your top conftest.py. Fixtures: `emq_url` (a server for the session: the embedded Valkey, or
`EMQ_TESTING_URL`), `queue` (a fresh queue name per test) and `emq` (the helpers below, bound to
that server). See the how-to "Test your tasks with the testing kit".

The helpers are plain functions and import without pytest; the fixtures are here only when pytest
is installed. Nothing in emq_worker imports this package (an import-linter contract).
"""

from emq_worker.testing.bound import Emq
from emq_worker.testing.clock import fast_forward, fire_repeats
from emq_worker.testing.idle import NotIdleError, run_until_idle
from emq_worker.testing.outcomes import JobOutcome, expect_completed, expect_dead, outcome

__all__ = [
    "Emq",
    "JobOutcome",
    "NotIdleError",
    "expect_completed",
    "expect_dead",
    "fast_forward",
    "fire_repeats",
    "outcome",
    "run_until_idle",
]

try:
    from emq_worker.testing.plugin import emq, emq_url, queue
except ModuleNotFoundError as exc:  # no pytest: the helpers above still serve a script
    if exc.name != "pytest":
        raise
else:
    __all__ += ["emq", "emq_url", "queue"]
