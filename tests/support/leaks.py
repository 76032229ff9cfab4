"""A resource a test leaves unclosed fails that test, not a later one (a pytest plugin).

An unclosed connection warns (`ResourceWarning`, an error here) when the collector frees it: the
collector runs when allocations say so, often during a later test, which then fails for the leak
of another. Collecting each test's garbage at its own teardown puts the warning on the test that
made it; freezing what collection made keeps each of those collections short (it reads only what
the tests made since).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def collected_garbage() -> Iterator[None]:
    """Set up before the test's other fixtures, so torn down after them (their finalizers close
    what they opened first); pytest then reports what the collection raised, as this test's."""
    yield
    gc.collect()
