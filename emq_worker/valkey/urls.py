"""Splitting a Redis URL without urllib's bracketed-netloc check.

`urlsplit` refuses a cluster seed list with an IPv6 seed after another (`a:7000,[::1]:7001`:
"Invalid IPv6 URL") on the Pythons that carry that check (Debian's 3.11.2, CPython 3.11.4+), so
every URL that may be a cluster URL is split here: a SplitResult built by hand keeps `username`,
`password`, `_replace` and `geturl`, none of which validate.
"""

from __future__ import annotations

from urllib.parse import SplitResult


def split_url(url: str) -> SplitResult:
    """scheme://netloc/path?query#fragment; no `://`: everything is the path, as urlsplit has it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return SplitResult("", "", url, "", "")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    return SplitResult(scheme.lower(), netloc, slash + path, query, fragment)
