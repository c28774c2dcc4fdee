"""An API-key limiter's ``track(key)`` on the weighted sliding window counter (``algorithm="sliding_window"``).

It allows 10 requests per 60 s window per API key. A request counts its current window's usage
(itself included) plus the previous window's usage weighted by the share of that window still inside
the last 60 s, and is refused when the sum exceeds 10; a refused request is taken back. Windows older
than the previous one no longer matter and are cleaned up.
"""

from __future__ import annotations

import pytest
import ratekeeper as rk

LIMIT = 10


@pytest.fixture
def lim(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter(f"{LIMIT}/min", algorithm="sliding_window", clock=clock)


def track(lim: rk.Limiter, key: str) -> str:
    """The API-key limiter's answer: ``"ok"`` or ``"limit_reached"``."""
    return "ok" if lim.allow(key) else "limit_reached"


def test_limit_reached_after_ten(lim: rk.Limiter) -> None:
    assert [track(lim, "test_api_key") for _ in range(LIMIT)] == ["ok"] * LIMIT
    assert track(lim, "test_api_key") == "limit_reached"


def test_other_keys_are_unaffected(lim: rk.Limiter) -> None:
    for _ in range(LIMIT):
        track(lim, "test_api_key")
    assert track(lim, "test_api_key") == "limit_reached"
    assert track(lim, "test_api_key_2") == "ok"
    assert [track(lim, "test_api_key_2") for _ in range(LIMIT - 1)] == ["ok"] * (LIMIT - 1)
    assert track(lim, "test_api_key_2") == "limit_reached"


def test_the_window_spreads_over_its_minute(lim: rk.Limiter, clock: rk.ManualClock) -> None:
    # Requests spread inside one window all count: 5 at t=0 and 5 at t=50 s fill it.
    assert [track(lim, "k") for _ in range(5)] == ["ok"] * 5
    clock.advance(50)
    assert [track(lim, "k") for _ in range(5)] == ["ok"] * 5
    assert track(lim, "k") == "limit_reached"


def test_previous_window_is_weighted_by_its_overlap(lim: rk.Limiter, clock: rk.ManualClock) -> None:
    assert [track(lim, "k") for _ in range(LIMIT)] == ["ok"] * LIMIT
    # 25 % into the next window, 75 % of the previous 10 still count: 7.5. 1 + 7.5 and 2 + 7.5 are
    # within 10; 3 + 7.5 is not.
    clock.advance(75)
    assert [track(lim, "k") for _ in range(3)] == ["ok", "ok", "limit_reached"]


def test_usage_equal_to_the_limit_is_allowed(lim: rk.Limiter, clock: rk.ManualClock) -> None:
    for _ in range(LIMIT):
        track(lim, "k")
    # Halfway into the next window the previous 10 weigh 5: five more reach exactly 10 (allowed: only
    # usage above the limit is refused); the sixth is over.
    clock.advance(90)
    assert [track(lim, "k") for _ in range(6)] == ["ok"] * 5 + ["limit_reached"]


def test_a_refused_request_is_taken_back(lim: rk.Limiter, clock: rk.ManualClock) -> None:
    for _ in range(LIMIT):
        track(lim, "k")
    clock.advance(75)
    assert [track(lim, "k") for _ in range(5)] == ["ok", "ok"] + ["limit_reached"] * 3
    # At 35 % the previous window weighs 6.5: with the 2 admitted, one more fits (2 + 1 + 6.5 = 9.5).
    # Had the refusals counted, it would not.
    clock.advance(6)
    assert [track(lim, "k") for _ in range(2)] == ["ok", "limit_reached"]


def test_the_weight_falls_as_the_window_slides(lim: rk.Limiter, clock: rk.ManualClock) -> None:
    for _ in range(LIMIT):
        track(lim, "k")
    # Every 6 s (10 % of the window) the previous 10 weigh one less, so one more request fits.
    admitted = []
    for at in range(60, 120, 6):
        clock.advance(at - clock.now())
        n = 0
        while track(lim, "k") == "ok":
            n += 1
        admitted.append(n)
    assert admitted == [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]


def test_old_windows_are_forgotten(lim: rk.Limiter, clock: rk.ManualClock) -> None:
    for _ in range(LIMIT):
        track(lim, "k")
    assert track(lim, "k") == "limit_reached"
    # Two windows later, neither the current nor the previous window holds anything: a full 10 again.
    clock.advance(120)
    assert [track(lim, "k") for _ in range(LIMIT)] == ["ok"] * LIMIT
    assert track(lim, "k") == "limit_reached"


@pytest.mark.parametrize(("later", "forgotten"), [(120, True), (119, False), (60, False)])
def test_cleanup_forgets_windows_older_than_the_previous_one(
    clock: rk.ManualClock, later: int, forgotten: bool
) -> None:
    # Usage older than the previous window no longer matters. The core drops such idle states when it needs
    # room: with room for 100 keys, 100 keys whose windows are both over give way to 100 new keys without
    # an eviction; while their previous window still weighs on the next decision, they must be evicted.
    lim = rk.Limiter(f"{LIMIT}/min", algorithm="sliding_window", max_keys=100, clock=clock)
    for i in range(100):
        assert track(lim, f"old-{i}") == "ok"
    clock.advance(later)
    for i in range(100):
        assert track(lim, f"new-{i}") == "ok"
    assert len(lim) <= 100
    assert (lim.stats()["evictions"] == 0) is forgotten
