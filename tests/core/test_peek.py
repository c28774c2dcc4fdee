"""``Limiter.peek``: what ``check`` would decide now, counting nothing, in every store.

A migrating user reads a key's usage without spending it (django-ratelimit's ``increment=False``, a
dashboard, a view that decides itself): a look must never change what later requests are told.
"""

from __future__ import annotations

import pytest
import ratekeeper as rk
from _redis import RedisServer
from _support import MakeLimiter, fresh_per_example
from hypothesis import given
from hypothesis import strategies as st

ALGORITHMS = ["gcra", "token_bucket", "sliding_window", "sliding_log", "fixed_window", "leaky_bucket"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_peek_tells_what_a_check_would_and_spends_nothing(make_limiter: MakeLimiter, algorithm: str) -> None:
    clock = rk.ManualClock()
    limiter = make_limiter("3/min", algorithm=algorithm, clock=clock)
    fresh = limiter.peek("k")
    assert (fresh.allowed, fresh.remaining, fresh.limit) == (True, 3, 3)
    for _ in range(10):
        assert limiter.peek("k").allowed
    assert [limiter.allow("k") for _ in range(3)] == [True, True, True]
    seen = limiter.peek("k")
    assert (seen.allowed, seen.remaining) == (False, 0)
    assert seen.retry_after > 0
    assert seen.retry_after == pytest.approx(limiter.check("k").retry_after)
    stats = limiter.stats()["groups"]["default"]
    assert (stats["allowed"], stats["refused"]) == (3, 1)  # the peeks counted nothing


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_peek_reads_what_is_left_before_the_request(make_limiter: MakeLimiter, algorithm: str) -> None:
    clock = rk.ManualClock()
    limiter = make_limiter("5/min", algorithm=algorithm, clock=clock)
    limiter.check("k", cost=2)
    assert limiter.peek("k").remaining == 3
    assert limiter.peek("k", cost=3).allowed
    assert not limiter.peek("k", cost=4).allowed
    assert limiter.check("k", cost=3).allowed


def test_a_peek_of_a_group_by_name_and_of_a_routed_path(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    rules = [rk.Rule(r"^/api/", "api", "2/min"), rk.Rule(r"^/login$", "login", "1/min")]
    limiter = make_limiter(rules=rules, clock=clock)
    limiter.check("k", "/login")
    assert not limiter.peek("k", group="login").allowed
    assert limiter.peek("k", "/api/x").remaining == 2
    assert limiter.peek("k", "/elsewhere").group is None  # routed nowhere: free, as check says
    with pytest.raises(rk.InvalidValue, match="group"):
        limiter.peek("k", group="nope")
    with pytest.raises(rk.InvalidValue, match="cost"):
        limiter.peek("k", cost=0)


def test_a_peek_takes_no_concurrency_permit(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(rules=[rk.Rule("", "jobs", limits=[rk.Limit(concurrency=1)])])
    for _ in range(3):
        assert limiter.peek("k").allowed
    held = limiter.check("k")  # as check, a peek decides the rate limits: a gate alone admits
    assert held.allowed
    with limiter.concurrent("k"), pytest.raises(rk.RateLimited), limiter.concurrent("k"):
        pass


def test_a_peek_in_sync_mode_reads_the_local_states(redis_server: RedisServer, redis_prefix: str) -> None:
    url = redis_server.url
    clock = rk.ManualClock()
    backend = rk.Redis(url, mode="sync", prefix=redis_prefix, on_error="raise", sync_interval=3600)
    limiter = rk.Limiter("2/min", clock=clock, backend=backend)
    limiter.check("k")
    assert limiter.peek("k").remaining == 1
    assert limiter.sync_now()[0] == 1  # one key's usage to push: the peek added none


Step = tuple[str, float, int]  # ("check" | "peek", seconds to advance first, cost)


@fresh_per_example
@given(
    algorithm=st.sampled_from(ALGORITHMS),
    steps=st.lists(
        st.tuples(st.sampled_from(["check", "peek"]), st.sampled_from([0.0, 0.5, 3.0, 20.0]), st.integers(1, 3)),
        max_size=40,
    ),
)
def test_peeks_never_change_a_decision(make_limiter: MakeLimiter, algorithm: str, steps: list[Step]) -> None:
    """The same checks with and without peeks between them are told the same; a peek says what a check of
    its cost at its instant is told."""
    looked, plain = rk.ManualClock(), rk.ManualClock()
    with_peeks = make_limiter("4/10s", algorithm=algorithm, clock=looked)
    without = make_limiter("4/10s", algorithm=algorithm, clock=plain)
    for action, advance, cost in steps:
        looked.advance(advance)
        plain.advance(advance)
        if action == "peek":
            assert with_peeks.peek("k", cost=cost).allowed == with_peeks.peek("k", cost=cost).allowed
            continue
        told = with_peeks.peek("k", cost=cost).allowed
        decision = with_peeks.check("k", cost=cost)
        assert decision.allowed == told
        assert decision.allowed == without.check("k", cost=cost).allowed
