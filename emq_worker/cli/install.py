"""The pip line that adds an extra to *this* installation. emq-worker is installed from a
checkout (it is on no package index), so `pip install 'emq-worker[dashboard]'` would fail: the
hint names the checkout pip installed from when pip recorded one (PEP 610 direct_url.json)."""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from urllib.parse import unquote, urlparse

DISTRIBUTION = "emq-worker"


def installed_from() -> str | None:
    """The local directory this package was installed from, if pip recorded one. A checkout's
    own `emq_worker.egg-info` (which an editable build leaves beside the package, and which
    records nothing) is passed over for the installed distribution that has the record."""
    for distribution in metadata.distributions(name=DISTRIBUTION):
        text = distribution.read_text("direct_url.json")
        if text:
            return _local_directory(text)
    return None


def _local_directory(text: str) -> str | None:
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    url = urlparse(str(record.get("url", "")))
    if url.scheme != "file" or "dir_info" not in record:
        return None
    return unquote(url.path)


def pip_line(extra: str, source: str | None = None) -> str:
    """`python -m pip install -e '/path/to/checkout[extra]'` for a checkout install; else the
    line to run from a checkout (`source` defaults to where this installation came from)."""
    directory = source if source is not None else installed_from()
    if directory is None:
        return f"python -m pip install '.[{extra}]' (in an emq-worker checkout)"
    return f"python -m pip install -e {shlex.quote(f'{directory}[{extra}]')}"
