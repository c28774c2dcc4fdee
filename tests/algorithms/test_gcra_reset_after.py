"""GCRA as a cooldown score, 3 requests / 60 s: each decision's ``reset_after`` and ``retry_after``.

A cooldown limiter keeps one score per key (the moment the key is back to its full burst) and
answers ``ALLOW s`` / ``REJECT s`` where ``s`` is that score minus now: ``Decision.reset_after``.
"""

from __future__ import annotations

import ratekeeper as rk

# (time in seconds, admitted, score minus now): a cooldown limiter's transcript of one key.
TRANSCRIPT = [
    (0, True, 20),
    (0, True, 40),
    (0, True, 60),
    (1, False, 59),
    (5, False, 55),
    (10, False, 50),
    (15, False, 45),
    (21, True, 59),
    (22, False, 58),
]


def test_reset_after_is_the_cooldown_score_minus_now(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    seen = []
    for at, _, _ in TRANSCRIPT:
        clock.advance(at - clock.now())
        decision = limiter.check("hit")
        seen.append((at, decision.allowed, decision.reset_after))
    assert seen == TRANSCRIPT


def test_burst_then_refusal_at_time_zero(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    admitted = [limiter.check("hit") for _ in range(3)]
    assert [(d.allowed, d.remaining, d.reset_after) for d in admitted] == [
        (True, 2, 20.0),
        (True, 1, 40.0),
        (True, 0, 60.0),
    ]
    refused = limiter.check("hit")
    assert (refused.allowed, refused.retry_after, refused.remaining, refused.reset_after) == (False, 20.0, 0, 60.0)


def test_refusals_tell_how_long_to_wait(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    for _ in range(3):
        limiter.check("hit")
    waits = {}
    for at in (1, 5, 10, 15):
        clock.advance(at - clock.now())
        waits[at] = limiter.check("hit").retry_after
    assert waits == {1: 19.0, 5: 15.0, 10: 10.0, 15: 5.0}


def test_one_admitted_after_the_cooldown_then_refused_again(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    for _ in range(3):
        limiter.check("hit")
    clock.advance(21)
    admitted = limiter.check("hit")
    assert (admitted.allowed, admitted.reset_after) == (True, 59.0)
    clock.advance(1)
    refused = limiter.check("hit")
    assert (refused.allowed, refused.retry_after) == (False, 18.0)
