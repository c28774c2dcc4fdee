"""Seed 004 (cooldown score, GCRA): ratekeeper reproduces the seed's console transcript for 3 requests / 60 s.

The seed prints ``ALLOW s`` / ``REJECT s`` where ``s`` is the key's score minus now, which is
``Decision.reset_after``: the seconds until the key is back to its full burst.
"""

from __future__ import annotations

import ratekeeper as rk

# (time in seconds, admitted, printed number), from /work/shared/seeds/004_*.txt.
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


def test_seed_004_transcript(clock: rk.ManualClock) -> None:
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
