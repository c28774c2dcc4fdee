"""Property tests of the admission invariants, for both algorithms, on a ``ManualClock``, on every store.

Times are whole microseconds (the clock's start and the gaps between requests are drawn as integers and
passed as ``us / 1e6``) so the clock's nanoseconds are exact; the invariants are checked in integer
nanoseconds, relative to the clock's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ratekeeper as rk
from _support import Admission, MakeLimiter, fresh_per_example, run
from hypothesis import given
from hypothesis import strategies as st

NS_PER_US = 1_000
NS_PER_MS = 1_000_000

# Where the clock starts, in microseconds: zero (ManualClock's default) or anywhere in the first hour.
starts = st.one_of(st.just(0), st.integers(1, 3_600_000_000))


def per_instant(admitted: list[Admission]) -> list[tuple[int, int]]:
    """``(time_ns, total cost admitted at that time)``, in time order."""
    totals: dict[int, int] = {}
    for a in admitted:
        totals[a.at_ns] = totals.get(a.at_ns, 0) + a.cost
    return sorted(totals.items())


# --- GCRA --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gcra:
    count: int
    period_ms: int
    burst: int

    @property
    def interval_us(self) -> int:
        """``period / count`` rounded up to a whole microsecond."""
        return -(-self.period_ms * 1_000 // self.count)

    def limiter(self, make_limiter: MakeLimiter, start_us: int) -> tuple[rk.Limiter, rk.ManualClock]:
        clock = rk.ManualClock(start_us / 1e6)
        return make_limiter(f"{self.count}/{self.period_ms}ms", burst=self.burst, clock=clock), clock


gcras = st.builds(Gcra, count=st.integers(1, 10), period_ms=st.integers(1, 5_000), burst=st.integers(1, 8))


@st.composite
def gcra_traffic(draw: st.DrawFn) -> tuple[Gcra, list[tuple[int, int]]]:
    """A GCRA limit and ``(gap_us, cost)`` requests with gaps around its interval, some costing more than the burst."""
    gcra = draw(gcras)
    requests = st.tuples(st.integers(0, 2 * gcra.interval_us), st.integers(1, gcra.burst + 1))
    return gcra, draw(st.lists(requests, min_size=1, max_size=60))


@fresh_per_example
@given(gcra_traffic(), starts)
def test_gcra_admits_at_most_burst_plus_rate_in_any_closed_window(
    make_limiter: MakeLimiter, traffic: tuple[Gcra, list[tuple[int, int]]], start_us: int
) -> None:
    gcra, requests = traffic
    limiter, clock = gcra.limiter(make_limiter, start_us)
    instants = per_instant(run(limiter, clock, requests))
    period_ns = gcra.period_ms * NS_PER_MS
    for i, (first, _) in enumerate(instants):
        window = 0
        for last, cost in instants[i:]:
            window += cost
            assert window <= gcra.burst + (last - first) * gcra.count // period_ns


@fresh_per_example
@given(gcra_traffic(), starts)
def test_gcra_never_admits_a_cost_above_the_burst(
    make_limiter: MakeLimiter, traffic: tuple[Gcra, list[tuple[int, int]]], start_us: int
) -> None:
    gcra, requests = traffic
    limiter, clock = gcra.limiter(make_limiter, start_us)
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        decision = limiter.check("peer", cost=cost)
        if cost > gcra.burst:
            assert not decision.allowed
            assert math.isinf(decision.retry_after)


@fresh_per_example
@given(gcras, starts, st.lists(st.integers(0, 3), min_size=1, max_size=60))
def test_gcra_never_refuses_a_sender_spaced_by_the_interval(
    make_limiter: MakeLimiter, gcra: Gcra, start_us: int, extra: list[int]
) -> None:
    limiter, clock = gcra.limiter(make_limiter, start_us)
    assert limiter.allow("peer")
    for e in extra:
        clock.advance(gcra.interval_us * (1 + e) / 1e6)
        assert limiter.allow("peer")


# --- token bucket ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenBucket:
    """``count`` per ``count * interval_ms`` ms, so the window ``burst * period / count`` is whole milliseconds."""

    count: int
    interval_ms: int
    burst: int

    @property
    def window_ns(self) -> int:
        return self.burst * self.interval_ms * NS_PER_MS

    def limiter(self, make_limiter: MakeLimiter, start_us: int) -> tuple[rk.Limiter, rk.ManualClock]:
        clock = rk.ManualClock(start_us / 1e6)
        rate = f"{self.count}/{self.count * self.interval_ms}ms"
        return make_limiter(rate, burst=self.burst, algorithm="token_bucket", clock=clock), clock


buckets = st.builds(TokenBucket, count=st.integers(1, 10), interval_ms=st.integers(1, 500), burst=st.integers(1, 8))


@st.composite
def bucket_traffic(draw: st.DrawFn) -> tuple[TokenBucket, list[tuple[int, int]]]:
    """A token bucket and ``(gap_us, cost)`` requests, several per window, each within the burst."""
    bucket = draw(buckets)
    gap_limit = bucket.window_ns // NS_PER_US // 2
    requests = st.tuples(st.integers(0, gap_limit), st.integers(1, bucket.burst))
    return bucket, draw(st.lists(requests, min_size=1, max_size=60))


@fresh_per_example
@given(bucket_traffic(), starts)
def test_token_bucket_admits_at_most_burst_per_window_started_by_an_admission(
    make_limiter: MakeLimiter, traffic: tuple[TokenBucket, list[tuple[int, int]]], start_us: int
) -> None:
    # A burst window starts at an admission; the first admission after it ended starts the next (a change:
    # windows are no longer aligned to the key's first request; docs/errors.md, "Removed and changed").
    bucket, requests = traffic
    limiter, clock = bucket.limiter(make_limiter, start_us)
    instants = per_instant(run(limiter, clock, requests))
    windows: list[int] = []
    start = None
    for at, cost in instants:
        if start is None or at >= start + bucket.window_ns:
            start = at
            windows.append(0)
        windows[-1] += cost
    assert max(windows, default=0) <= bucket.burst


@fresh_per_example
@given(bucket_traffic(), starts)
def test_token_bucket_admits_at_most_twice_the_burst_in_any_window(
    make_limiter: MakeLimiter, traffic: tuple[TokenBucket, list[tuple[int, int]]], start_us: int
) -> None:
    bucket, requests = traffic
    limiter, clock = bucket.limiter(make_limiter, start_us)
    instants = per_instant(run(limiter, clock, requests))
    for start, _ in instants:
        window = sum(cost for at, cost in instants if start <= at < start + bucket.window_ns)
        assert window <= 2 * bucket.burst


@fresh_per_example
@given(buckets, starts, st.lists(st.integers(0, 2_000_000), min_size=1, max_size=60))
def test_token_bucket_never_refuses_a_sender_spaced_by_the_interval(
    make_limiter: MakeLimiter, bucket: TokenBucket, start_us: int, extra_us: list[int]
) -> None:
    limiter, clock = bucket.limiter(make_limiter, start_us)
    assert limiter.allow("peer")
    for extra in extra_us:
        clock.advance((bucket.interval_ms * 1_000 + extra) / 1e6)
        assert limiter.allow("peer")


# --- both ----------------------------------------------------------------------------------------------------------


@fresh_per_example
@given(
    st.sampled_from(["gcra", "token_bucket"]),
    starts,
    st.lists(st.tuples(st.integers(0, 3_000_000), st.integers(1, 4)), min_size=1, max_size=40),
)
def test_refused_requests_change_no_state(
    make_limiter: MakeLimiter, algorithm: str, start_us: int, requests: list[tuple[int, int]]
) -> None:
    clock = rk.ManualClock(start_us / 1e6)
    quiet = make_limiter("3/2s", algorithm=algorithm, clock=clock)
    hammered = make_limiter("3/2s", algorithm=algorithm, clock=clock)
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        expected = quiet.check("peer", cost=cost)
        got = hammered.check("peer", cost=cost)
        assert (got.allowed, got.remaining, got.retry_after, got.reset_after) == (
            expected.allowed,
            expected.remaining,
            expected.retry_after,
            expected.reset_after,
        )
        if not got.allowed:
            assert not any(hammered.allow("peer", cost=cost) for _ in range(3))
