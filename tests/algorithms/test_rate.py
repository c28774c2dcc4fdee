"""``Rate``: parsing rate strings, the ``(count, per=)`` form, formatting and value semantics."""

from __future__ import annotations

import pytest
import ratekeeper as rk


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("10/min", 10, 60.0),
        ("3/60s", 3, 60.0),
        ("5/second", 5, 1.0),
        ("100/hour", 100, 3600.0),
        ("1000/day", 1000, 86400.0),
        ("2/500ms", 2, 0.5),
    ],
)
def test_rate_string_gives_count_and_period_in_seconds(text: str, count: int, period: float) -> None:
    rate = rk.Rate(text)
    assert (rate.count, rate.period) == (count, period)


def test_count_with_per_seconds_equals_the_string_form() -> None:
    assert rk.Rate(10, per=60.0) == rk.Rate("10/min")


def test_str_is_the_canonical_rate_string() -> None:
    assert str(rk.Rate("10/min")) == "10/min"
    assert str(rk.Rate(10, per=60.0)) == "10/min"


@pytest.mark.parametrize("text", ["10/min", "3/60s", "5/second", "100/hour", "1000/day", "2/500ms", "7/90s"])
def test_str_parses_back_to_an_equal_rate(text: str) -> None:
    rate = rk.Rate(text)
    assert rk.Rate(str(rate)) == rate


def test_equal_rates_hash_alike_and_deduplicate_in_a_set() -> None:
    assert hash(rk.Rate("3/60s")) == hash(rk.Rate("3/min"))
    assert {rk.Rate("10/min"), rk.Rate("10/60s"), rk.Rate(10, per=60.0)} == {rk.Rate("10/min")}


@pytest.mark.parametrize(("a", "b"), [("10/min", "10/s"), ("10/min", "11/min"), ("1/s", "1000/1000s")])
def test_different_rates_are_unequal(a: str, b: str) -> None:
    assert rk.Rate(a) != rk.Rate(b)


def test_a_rate_object_configures_a_limiter_like_its_string() -> None:
    limiter = rk.Limiter(rk.Rate("3/60s"))
    group = limiter.stats()["groups"]["default"]
    assert group["limits"] == [{"rate": "3/min", "burst": 3, "algorithm": "gcra"}]
