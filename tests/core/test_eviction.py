"""The key store stays within ``max_keys``, and a flood of one-shot keys does not evict a busy one.

The clock is frozen, so every tracked key still constrains its peer: room is made by eviction only.
"""

from __future__ import annotations

import pytest
import ratekeeper as rk
from _support import MakeLimiter


def test_distinct_peers_beyond_max_keys_are_admitted_and_evicted(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", max_keys=1000, clock=clock)
    assert all(limiter.allow(f"peer-{i}") for i in range(50_000))
    assert len(limiter) <= 1000
    stats = limiter.stats()
    assert stats["keys"] == len(limiter)
    assert stats["evictions"] > 0
    assert stats["max_keys"] == 1000


def test_busy_refused_key_survives_a_flood_of_one_shot_keys(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", max_keys=1000, clock=clock)
    assert limiter.allow("busy")
    busy_admitted = 0
    for i in range(100_000):
        limiter.allow(f"one-shot-{i}")
        if i % 20 == 0:
            busy_admitted += limiter.allow("busy")
    assert busy_admitted == 0
    assert limiter.check("busy").retry_after == 60.0
    assert len(limiter) <= 1000
    assert limiter.stats()["evictions"] > 0


@pytest.mark.parametrize(
    "limits",
    [
        ["5/hour", "50/day"],
        ["5/hour", rk.Limit(concurrency=4)],
        [rk.Limit("5/hour", algorithm="sliding_log")],
    ],
    ids=["two_rate_limits", "rate_and_permits", "sliding_log"],
)
def test_a_busy_key_of_several_limits_survives_while_only_refused(
    make_limiter: MakeLimiter, clock: rk.ManualClock, limits: list[str | rk.Limit]
) -> None:
    # A refusal writes no state, but it is a use: a key refused at every other request is the busiest key
    # there is and must never be evicted as least used (it would get its whole burst back).
    limiter = make_limiter(rules=[rk.Rule("", "api", limits=limits)], max_keys=2_000, clock=clock)
    assert [limiter.allow("busy") for _ in range(6)] == [True] * 5 + [False]
    readmitted = 0
    for i in range(20_000):
        limiter.allow(f"once-{i}")
        readmitted += limiter.allow("busy")
    assert readmitted == 0
