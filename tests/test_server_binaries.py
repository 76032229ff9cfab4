"""The test session's server: chosen by EMQ_TEST_SERVER, and a TLS probe that reads a build's own
refusal instead of waiting for a TLS port that never opens."""

from __future__ import annotations

import shutil

import pytest

from emq_worker.valkey.binary import embedded_binary
from tests.support import server
from tests.support.server import chosen_binary, tls_refusal

REDIS = shutil.which("redis-server")


def test_the_embedded_valkey_says_it_has_no_tls() -> None:
    embedded = embedded_binary()
    assert embedded is not None, "the test extra installs the embedded Valkey"
    reason = tls_refusal(embedded)
    assert reason is not None
    assert "built without TLS: 'Failed finding TLS support.'" in reason


@pytest.mark.skipif(REDIS is None, reason="no redis-server on PATH")
def test_debians_redis_has_tls() -> None:
    assert REDIS is not None
    assert tls_refusal(REDIS) is None


def test_emq_test_server_picks_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(server.SERVER_VARIABLE, "valkey")
    assert chosen_binary() == (shutil.which("valkey-server") or embedded_binary())
    monkeypatch.setenv(server.SERVER_VARIABLE, "/bin/true")
    assert chosen_binary() == "/bin/true"
    monkeypatch.delenv(server.SERVER_VARIABLE)
    assert chosen_binary() == (REDIS or embedded_binary())
