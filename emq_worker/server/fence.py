"""The version fence's key: every connection checks it before any caller command."""

from __future__ import annotations

from typing import Final

VERSION_KEY: Final = "{emq}:version"
"""Holds the wire version (default `echomq:3.0.0`); never overwritten once present."""
