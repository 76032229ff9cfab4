"""Backoff policies: EchoMQ's vectors, jitter bounds with a seeded Random, spec parsing."""

from __future__ import annotations

import random

import pytest

from emq_worker.errors import ConfigError
from emq_worker.retry import Exponential, Fixed, Jitter, delay_ms, format_backoff, parse_backoff


def test_exponential_vectors() -> None:
    policy = Exponential(base_ms=100, cap_ms=10_000)
    rng = random.Random(0)
    assert [delay_ms(policy, n, rng) for n in (1, 2, 3, 20, 500)] == [100, 200, 400, 10_000, 10_000]


def test_fixed_is_fixed() -> None:
    assert {delay_ms(Fixed(250), n, random.Random(1)) for n in range(1, 10)} == {250}


def test_jitter_stays_within_zero_and_the_inner_delay() -> None:
    rng = random.Random(42)
    policy = Jitter(Exponential(100, 10_000))
    samples = [delay_ms(policy, 3, rng) for _ in range(2000)]
    assert min(samples) >= 0
    assert max(samples) <= 400
    assert len(set(samples)) > 100
    assert delay_ms(Jitter(Fixed(0)), 1, rng) == 0


@pytest.mark.parametrize(
    "spec", ["fixed:1000", "exponential:1000:300000", "jitter:fixed:5", "jitter:exponential:1:10"]
)
def test_specs_round_trip(spec: str) -> None:
    assert format_backoff(parse_backoff(spec)) == spec


@pytest.mark.parametrize("spec", ["", "fixed", "fixed:x", "exponential:10", "linear:5", "fixed:-1"])
def test_bad_specs_are_named(spec: str) -> None:
    with pytest.raises(ConfigError, match="got"):
        parse_backoff(spec)


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="got 0"):
        delay_ms(Fixed(1), 0, random.Random())
