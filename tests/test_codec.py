"""The JSON envelope: what decodes, and what a poisoned payload is told."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from emq_worker.errors import PayloadError
from emq_worker.jobs import codec


@pytest.fixture(params=["orjson", "stdlib"])
def encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each encoding test runs with orjson (the `fast` extra, which the test extra installs)
    and with the standard library alone."""
    if request.param == "stdlib":
        monkeypatch.setattr(codec, "_dumps", None)
    else:
        assert codec._dumps is not None, "orjson is missing: install emq-worker[test]"
    return str(request.param)


def test_round_trip() -> None:
    payload = codec.encode("charge", {"order_id": "Ä1", "amount": 1200})
    assert payload == '{"task":"charge","kwargs":{"order_id":"Ä1","amount":1200}}'.encode()
    assert codec.decode(payload) == ("charge", {"order_id": "Ä1", "amount": 1200})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"cargo", "not JSON"),
        (b"[1, 2]", "must be a JSON object; got list"),
        (b'{"kwargs": {}}', "no task name"),
        (b'{"task": "x", "kwargs": [1]}', "kwargs must be a JSON object; got list"),
    ],
)
def test_poisoned_payloads_say_what_is_wrong(payload: bytes, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        codec.decode(payload)


def test_unserialisable_kwargs_are_refused_at_enqueue() -> None:
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        codec.encode("charge", {"when": object()})
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        codec.encode("charge", {"amount": float("nan")})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"order_id": "Ä1", "amount": 1200, "ratio": 0.1, "ok": True, "tags": ["a", "b"]},
        {"nested": {"deep": [1, {"x": None}]}, "emoji": "\u2603\U0001f600", "quote": '"\\'},
        {1: "an int key", 2.5: "a float key"},
        {"huge": 2**70, "small": -(2**63)},
    ],
)
def test_the_fast_encoder_writes_what_the_standard_library_writes(
    kwargs: dict[Any, Any], encoder: str
) -> None:
    """Whichever encoder runs (orjson where installed), the bytes a consumer reads are the
    standard library's compact JSON: int keys become strings, big ints stay exact."""
    expected = json.dumps(
        {"task": "t", "kwargs": kwargs}, separators=(",", ":"), ensure_ascii=False
    ).encode()
    assert codec.encode("t", kwargs) == expected


@pytest.mark.parametrize(
    "value",
    [float("inf"), float("-inf"), dt.datetime(2026, 1, 1), Decimal("1.5"), {"s": {1, 2}}],
)
def test_what_json_cannot_hold_is_refused_by_every_encoder(value: object, encoder: str) -> None:
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        codec.encode("charge", {"value": value})
