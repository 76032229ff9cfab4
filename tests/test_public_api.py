"""The public API is `emq_worker` itself: every name a user writes, enqueues, runs or catches is
importable from it, and the README's Python snippets import only from public modules."""

from __future__ import annotations

import re
from pathlib import Path

import emq_worker
from emq_worker import errors, retry

README = Path(__file__).resolve().parent.parent / "README.md"
PUBLIC_MODULES = {"emq_worker", "emq_worker.errors", "emq_worker.retry"}


def test_every_name_in_all_is_importable_and_all_is_sorted() -> None:
    assert emq_worker.__all__ == sorted(emq_worker.__all__)
    for name in emq_worker.__all__:
        assert getattr(emq_worker, name) is not None, name


def test_every_exception_a_user_catches_and_every_retry_policy_is_public() -> None:
    exceptions = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    }
    policies = {"Fixed", "Exponential", "Jitter", "Backoff"}
    assert exceptions <= set(emq_worker.__all__), exceptions - set(emq_worker.__all__)
    assert policies <= set(emq_worker.__all__)
    assert all(getattr(emq_worker, name) is getattr(retry, name) for name in policies)


def test_the_readme_imports_only_from_public_modules() -> None:
    imported = set(re.findall(r"^\s*from (emq_worker[\w.]*) import", README.read_text(), re.M))
    assert imported, "the README shows no import"
    assert imported <= PUBLIC_MODULES, imported - PUBLIC_MODULES
