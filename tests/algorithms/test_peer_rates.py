"""The peers' rate spellings: what a team moving from django-ratelimit, Flask-Limiter or slowapi writes."""

from __future__ import annotations

import pytest
import ratekeeper as rk
from ratekeeper._peer_rates import expand_limits


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("100/10", 100, 10.0),  # django-ratelimit: a bare number of seconds
        ("10 per minute", 10, 60.0),  # limits: Flask-Limiter, slowapi
        ("10 per 2 minutes", 10, 120.0),
        ("5/2 hours", 5, 7200.0),
        ("1/second", 1, 1.0),
        ("3 PER HOUR", 3, 3600.0),
        ("1 per month", 1, 30 * 86400.0),  # as limits counts a month and a year
        ("1/year", 1, 360 * 86400.0),
    ],
)
def test_a_peer_spelling_reads_as_the_peer_means_it(text: str, count: int, period: float) -> None:
    rate = rk.Rate(text)
    assert (rate.count, rate.period) == (count, period)
    assert rk.Limiter(text, clock=rk.ManualClock()).check("k").limit == count


def test_several_limits_in_one_string_are_each_a_limit() -> None:
    assert expand_limits(["10/second; 100 per minute", rk.Rate("5/s")], "limits") == [
        "10/second",
        "100 per minute",
        rk.Rate("5/s"),
    ]
    assert expand_limits(["1/s,2/min|3/h"], "limits") == ["1/s", "2/min", "3/h"]


def test_none_means_not_limited() -> None:
    assert expand_limits([None], "limits") is None
    assert expand_limits([None, "5/min"], "limits") == ["5/min"]


@pytest.mark.parametrize("text", ["0/m", "0 per minute", "00/10"])
def test_a_count_of_zero_is_refused_with_what_to_do_instead(text: str) -> None:
    with pytest.raises(rk.InvalidValue, match=r"admits nothing.*return 403 or 429") as caught:
        expand_limits(["5/min", text], "limits")
    assert caught.value.loc == ("limits[1]",)


def test_a_typo_names_the_limit_and_the_separator() -> None:
    with pytest.raises(rk.InvalidValue, match=r'"10/minnute".*separated by') as caught:
        expand_limits(["10/s; 10/minnute"], "limits")
    assert caught.value.loc == ("limits[0]",)
    with pytest.raises(rk.InvalidValue, match="names no limit"):
        expand_limits([" ; "], "limits")
    with pytest.raises(rk.InvalidType, match="got int"):
        expand_limits([10], "limits")
