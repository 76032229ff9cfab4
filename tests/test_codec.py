"""The JSON envelope: what decodes, and what a poisoned payload is told."""

from __future__ import annotations

import pytest

from emq_worker import codec
from emq_worker.errors import PayloadError


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
