"""Key names, the queue-name grammar and the cluster slot."""

from __future__ import annotations

import pytest

from emq_worker.errors import QueueNameError
from emq_worker.protocol.keys import VERSION_KEY, QueueKeys, hash_slot, validate_queue_name


def test_every_key_of_a_queue_shares_its_hash_tag_and_slot() -> None:
    keys = QueueKeys.of("orders")
    assert keys.pending == "emq:{orders}:pending"
    assert keys.job("JOB0NgWEfAEJfs") == "emq:{orders}:job:JOB0NgWEfAEJfs"
    assert keys.lock("JOB0NgWEfAEJfs") == "emq:{orders}:job:JOB0NgWEfAEJfs:lock"
    every = [
        keys.pending,
        keys.active,
        keys.schedule,
        keys.dead,
        keys.meta,
        keys.wake,
        keys.completed,
        keys.failed,
        keys.job("X"),
        keys.receipt("X")[0],
        keys.upkeep,
        keys.claim_memo("n"),
    ]
    assert {hash_slot(key) for key in every} == {hash_slot("orders")}


def test_crc16_vector_and_the_reserve_slot() -> None:
    assert hash_slot("123456789") == 12739
    assert hash_slot(VERSION_KEY) == hash_slot("emq")


@pytest.mark.parametrize("name", ["orders", "a", "A.b-c_9", "x" * 128])
def test_legal_queue_names(name: str) -> None:
    assert validate_queue_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 129, "bad name", "a{b}", "ünï", "a:b", "emq"])
def test_illegal_queue_names_are_refused_before_any_key_is_built(name: str) -> None:
    with pytest.raises(
        QueueNameError, match=repr(name)[:20].replace("{", r"\{") if name != "emq" else "reserved"
    ):
        QueueKeys.of(name)
