"""Branded ids and snowflakes: EchoMQ's test vectors, byte order = mint order."""

from __future__ import annotations

import random

import pytest

from emq_worker.errors import ConfigError, JobIdError
from emq_worker.protocol import ids


def test_echomq_vectors() -> None:
    assert ids.encode("USR", 274557032793636864) == "USR0KHTOWnGLuC"
    assert ids.parse("USR0NgWEfAEJfs") == ("USR", 320636799581945856)
    assert ids.encode_base62(0) == "00000000000"
    assert not ids.is_valid("USRzzzzzzzzzzz")


@pytest.mark.parametrize(
    "bad", ["", "JOB", "job0000000000a", "JOB000000000!a", "JOB0000000000", "JOB000000000000"]
)
def test_malformed_ids_are_refused_by_name(bad: str) -> None:
    with pytest.raises(JobIdError, match=repr(bad).replace("\\", "\\\\")):
        ids.parse(bad)


def test_job_id_requires_the_job_namespace() -> None:
    with pytest.raises(JobIdError, match="JOB-namespaced"):
        ids.job_id("ORD0NgWEfAEJfs")
    assert ids.job_id("JOB0NgWEfAEJfs") == "JOB0NgWEfAEJfs"


def test_largest_snowflake_round_trips_and_one_more_is_refused() -> None:
    top = ids.encode("JOB", ids.MAX_SNOWFLAKE)
    assert ids.parse(top) == ("JOB", ids.MAX_SNOWFLAKE)
    with pytest.raises(JobIdError):
        ids.encode("JOB", ids.MAX_SNOWFLAKE + 1)


def test_minted_ids_sort_in_mint_order_even_when_the_clock_goes_back() -> None:
    readings = iter([1_800_000_000_000, 1_800_000_000_000, 1_799_999_999_000, 1_800_000_000_001])
    minter = ids.SnowflakeMinter(node_id=1000, now_ms=lambda: next(readings))
    minted = [minter.job_id() for _ in range(4)]
    assert minted == sorted(minted)
    assert len(set(minted)) == 4
    _, first = ids.parse(minted[0])
    assert ids.unix_ms(first) == 1_800_000_000_000
    assert (first >> 12) & 0x3FF == 1000


def test_a_burst_beyond_4096_per_ms_borrows_from_the_next_ms() -> None:
    minter = ids.SnowflakeMinter(node_id=1, now_ms=lambda: 1_800_000_000_000)
    minted = [minter.next() for _ in range(5000)]
    assert minted == sorted(set(minted))
    assert ids.unix_ms(minted[-1]) == 1_800_000_000_001


def test_a_bulk_mint_equals_one_by_one_minting_and_keeps_the_order() -> None:
    """job_ids(n) reserves n cells at once (a bulk enqueue); the ids are those one-by-one
    minting would give: in order, the node id in place, a 4096 burst spilling into the next ms."""
    clock = lambda: 1_800_000_000_000  # noqa: E731
    bulk, single = ids.SnowflakeMinter(7, clock), ids.SnowflakeMinter(7, clock)
    minted = bulk.job_ids(5000)
    assert minted == [single.job_id() for _ in range(5000)]
    assert minted == sorted(set(minted))
    assert bulk.job_id() > minted[-1]
    assert bulk.job_ids(0) == []
    _, last = ids.parse(minted[-1])
    assert ids.unix_ms(last) == 1_800_000_000_001
    assert (last >> 12) & 0x3FF == 7


def test_node_id_out_of_range_is_named() -> None:
    with pytest.raises(ConfigError, match="got 1024"):
        ids.SnowflakeMinter(node_id=1024)


def test_encoding_matches_plain_base62_across_the_range() -> None:
    def plain(value: int) -> str:
        digits = ""
        while value:
            value, digit = divmod(value, 62)
            digits = ids.ALPHABET[digit] + digits
        return digits.rjust(ids.WIDTH, "0")

    rng = random.Random(7)
    edges = [0, 1, 61, 62, 62**5 - 1, 62**5, 62**6 - 1, 62**6, ids.MAX_SNOWFLAKE]
    values = edges + [rng.randrange(ids.MAX_SNOWFLAKE + 1) for _ in range(20_000)]
    values += [values[-1] + i for i in range(1, 100)]  # runs that share their high digits
    assert [ids.encode_base62(v) for v in values] == [plain(v) for v in values]
