"""Property tests of fixed_window, sliding_window, sliding_log and leaky_bucket on a ``ManualClock``.

Each algorithm's invariants follow its doc comment in ``src/algorithm/``. As in ``test_properties.py``,
times are whole microseconds (the clock's start and the gaps are drawn as integers and passed as
``us / 1e6``, which the clock rounds to exact nanoseconds) and the invariants are checked in integer
nanoseconds. The last properties (a refusal changes nothing, ``retry_after`` is exact, ``throttle`` and
``athrottle`` wake exactly when a check would pass) hold for every algorithm, gcra and token_bucket too.
Every test that decides runs on each store (``make_limiter``: memory, a shared region, Redis exact and sync).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import pytest
import ratekeeper as rk
from _support import ALGORITHMS, NS_PER_US, Admission, MakeLimiter, fresh_per_example, ns, run
from hypothesis import given
from hypothesis import strategies as st

NS_PER_MS = 1_000_000
GROUP = "g"
PEER = "peer"

WINDOWED = ["fixed_window", "sliding_window", "sliding_log", "leaky_bucket"]

# Where the clock starts, in microseconds: zero (ManualClock's default) or anywhere in the first hour.
starts = st.one_of(st.just(0), st.integers(1, 3_600_000_000))


@dataclass(frozen=True)
class Spec:
    """One limit: ``count`` per ``period_ms`` with ``burst`` (the window's limit, or the bucket's capacity)."""

    algorithm: str
    count: int
    period_ms: int
    burst: int

    @property
    def period_us(self) -> int:
        return self.period_ms * 1_000

    @property
    def period_ns(self) -> int:
        return self.period_ms * NS_PER_MS

    @property
    def interval_us(self) -> int:
        """The gap of a sender at the limit's rate, rounded up to a whole microsecond."""
        per = self.burst if self.algorithm in ("fixed_window", "sliding_window", "sliding_log") else self.count
        return -(-self.period_us // per)

    def limiter(self, make_limiter: MakeLimiter, start_us: int) -> tuple[rk.Limiter, rk.ManualClock]:
        clock = rk.ManualClock(start_us / 1e6)
        return self.limiter_on(make_limiter, clock), clock

    def limiter_on(self, make_limiter: MakeLimiter, clock: rk.ManualClock) -> rk.Limiter:
        rate = f"{self.count}/{self.period_ms}ms"
        return make_limiter(rules=[rk.Rule("", GROUP, rate, burst=self.burst, algorithm=self.algorithm)], clock=clock)


def specs(algorithm: str, burst: st.SearchStrategy[int] | None = None) -> st.SearchStrategy[Spec]:
    return st.builds(
        Spec,
        algorithm=st.just(algorithm),
        count=st.integers(1, 10),
        period_ms=st.integers(1, 5_000),
        burst=burst if burst is not None else st.integers(1, 8),
    )


Requests = list[tuple[int, int]]


@st.composite
def traffic(draw: st.DrawFn, algorithm: str) -> tuple[Spec, Requests]:
    """A limit and ``(gap_us, cost)`` requests with gaps around its interval, some costing more than the burst."""
    spec = draw(specs(algorithm))
    requests = st.tuples(st.integers(0, 2 * spec.interval_us), st.integers(1, spec.burst + 1))
    return spec, draw(st.lists(requests, min_size=1, max_size=60))


def admitted_within(admitted: list[Admission], low_ns: int, high_ns: int) -> int:
    """Total cost admitted at times in ``[low_ns, high_ns)``."""
    return sum(a.cost for a in admitted if low_ns <= a.at_ns < high_ns)


def sender_is_never_refused(
    make_limiter: MakeLimiter, spec: Spec, start_us: int, gap_us: int, extra_us: list[int]
) -> None:
    limiter, clock = spec.limiter(make_limiter, start_us)
    assert limiter.allow(PEER)
    for extra in extra_us:
        clock.advance((gap_us + extra) / 1e6)
        decision = limiter.check(PEER)
        assert decision.allowed, (clock.now(), decision.retry_after)


extras = st.lists(st.one_of(st.just(0), st.integers(0, 3_000_000)), min_size=1, max_size=60)


# --- fixed window ------------------------------------------------------------------------------------------------


@fresh_per_example
@given(traffic("fixed_window"), starts)
def test_fixed_window_admits_at_most_its_limit_per_window_started_by_an_admission(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    # A window starts at an admission and lasts one period; the first admission after it ended starts the
    # next (docs/errors.md, "Removed and changed": windows are no longer aligned to the key's first admission).
    spec, requests = traffic
    limiter, clock = spec.limiter(make_limiter, start_us)
    admitted = run(limiter, clock, requests)
    windows: list[int] = []
    start = None
    for a in admitted:
        if start is None or a.at_ns >= start + spec.period_ns:
            start = a.at_ns
            windows.append(0)
        windows[-1] += a.cost
    assert max(windows, default=0) <= spec.burst


@fresh_per_example
@given(traffic("fixed_window"), starts)
def test_fixed_window_admits_at_most_twice_its_limit_in_any_window(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    spec, requests = traffic
    limiter, clock = spec.limiter(make_limiter, start_us)
    admitted = run(limiter, clock, requests)
    for a in admitted:
        assert admitted_within(admitted, a.at_ns, a.at_ns + spec.period_ns) <= 2 * spec.burst


@fresh_per_example
@given(specs("fixed_window"), starts, extras)
def test_fixed_window_never_refuses_a_sender_within_its_limit(
    make_limiter: MakeLimiter, spec: Spec, start_us: int, extra_us: list[int]
) -> None:
    # At most `limit` requests spaced W / limit apart fit in any half-open window of length W.
    sender_is_never_refused(make_limiter, spec, start_us, spec.interval_us, extra_us)


# --- sliding window ----------------------------------------------------------------------------------------------


@fresh_per_example
@given(traffic("sliding_window"), starts)
def test_sliding_window_admits_at_most_its_limit_per_window_aligned_to_the_clock_zero(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    spec, requests = traffic
    limiter, clock = spec.limiter(make_limiter, start_us)
    per_window: dict[int, int] = {}
    for a in run(limiter, clock, requests):
        index = (start_us * NS_PER_US + a.at_ns) // spec.period_ns
        per_window[index] = per_window.get(index, 0) + a.cost
    assert all(total <= spec.burst for total in per_window.values())


@fresh_per_example
@given(traffic("sliding_window"), starts)
def test_sliding_window_admits_at_most_twice_its_limit_in_any_window(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    spec, requests = traffic
    limiter, clock = spec.limiter(make_limiter, start_us)
    admitted = run(limiter, clock, requests)
    for a in admitted:
        assert admitted_within(admitted, a.at_ns, a.at_ns + spec.period_ns) <= 2 * spec.burst


@fresh_per_example
@given(specs("sliding_window"), starts, extras)
def test_sliding_window_never_refuses_a_sender_spaced_by_w_over_limit_minus_one(
    make_limiter: MakeLimiter, spec: Spec, start_us: int, extra_us: list[int]
) -> None:
    # The weighted estimate counts up to one request too many, so a sender at exactly W / limit can be refused
    # (limit 2, W 10 s, requests at 0, 5, 10 s: at 10 s the estimate is 2 + 1). Spaced W / (limit - 1) apart
    # (2 W for a limit of 1), with c requests in the current window and p in the previous one at offset e:
    # (c + 1) W + p (W - e) <= (e (limit - 1) / W + 1) W + (limit - 1)(W - e) = limit W.
    gap_us = 2 * spec.period_us if spec.burst == 1 else -(-spec.period_us // (spec.burst - 1))
    sender_is_never_refused(make_limiter, spec, start_us, gap_us, extra_us)


def test_sliding_window_refuses_a_sender_at_exactly_w_over_limit_as_documented(
    make_limiter: MakeLimiter, clock: rk.ManualClock
) -> None:
    """The approximation the doc comment states: the weighted previous window can count one request too many."""
    limiter = make_limiter(rules=[rk.Rule("", GROUP, "2/10s", algorithm="sliding_window")], clock=clock)
    assert limiter.allow(PEER)
    clock.advance(5)
    assert limiter.allow(PEER)
    clock.advance(5)
    refused = limiter.check(PEER)
    assert not refused.allowed
    # The two of the previous window must weigh at most one: half of it must slide out, 5 s.
    assert refused.retry_after == 5.0


# --- sliding log -------------------------------------------------------------------------------------------------


@fresh_per_example
@given(traffic("sliding_log"), starts)
def test_sliding_log_admits_at_most_its_limit_in_any_half_open_window(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    spec, requests = traffic
    limiter, clock = spec.limiter(make_limiter, start_us)
    admitted = run(limiter, clock, requests)
    for a in admitted:
        # (t - W, t]
        assert admitted_within(admitted, a.at_ns - spec.period_ns + 1, a.at_ns + 1) <= spec.burst


@fresh_per_example
@given(specs("sliding_log"), starts, extras)
def test_sliding_log_never_refuses_a_sender_spaced_by_w_over_limit(
    make_limiter: MakeLimiter, spec: Spec, start_us: int, extra_us: list[int]
) -> None:
    sender_is_never_refused(make_limiter, spec, start_us, spec.interval_us, extra_us)


# --- leaky bucket ------------------------------------------------------------------------------------------------


@fresh_per_example
@given(traffic("leaky_bucket"), starts)
def test_leaky_bucket_admits_at_most_capacity_plus_the_leaks_in_any_window(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    spec, requests = traffic
    limiter, clock = spec.limiter(make_limiter, start_us)
    admitted = run(limiter, clock, requests)
    for i, first in enumerate(admitted):
        window = 0
        for last in admitted[i:]:
            window += last.cost
            length = last.at_ns - first.at_ns
            # Leaks are at least T apart (ticks from the moment the bucket last started filling), so a closed
            # window of length L sees at most ceil(L / T) <= floor(L / T) + 1 of them, each of R tokens.
            assert window <= spec.burst + spec.count * -(-length // spec.period_ns)
            assert window <= spec.burst + spec.count * (length // spec.period_ns + 1)


@fresh_per_example
@given(
    specs("leaky_bucket").flatmap(
        lambda s: st.builds(
            Spec, st.just(s.algorithm), st.just(s.count), st.just(s.period_ms), st.integers(s.count, 12)
        )
    ),
    starts,
    extras,
)
def test_leaky_bucket_never_refuses_a_sender_of_r_per_t_spaced_t_over_r(
    make_limiter: MakeLimiter, spec: Spec, start_us: int, extra_us: list[int]
) -> None:
    assert spec.burst >= spec.count
    sender_is_never_refused(make_limiter, spec, start_us, spec.interval_us, extra_us)


# --- every algorithm ---------------------------------------------------------------------------------------------


@st.composite
def any_traffic(draw: st.DrawFn) -> tuple[Spec, Requests]:
    return draw(traffic(draw(st.sampled_from(ALGORITHMS))))


def fields(decision: rk.Decision) -> tuple[bool, int | None, float, float]:
    return decision.allowed, decision.remaining, decision.retry_after, decision.reset_after


@fresh_per_example
@given(any_traffic(), starts)
def test_a_refusal_changes_no_state(make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int) -> None:
    spec, requests = traffic
    quiet, clock = spec.limiter(make_limiter, start_us)
    hammered = spec.limiter_on(make_limiter, clock)
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        expected = quiet.check(PEER, cost=cost)
        got = hammered.check(PEER, cost=cost)
        assert fields(got) == fields(expected)
        if not got.allowed:
            # Retrying at once, any number of times, gives the same answer and spends nothing.
            for _ in range(3):
                assert fields(hammered.check(PEER, cost=cost)) == fields(got)
                assert not hammered.allow(PEER, cost=cost)


@st.composite
def probed_traffic(draw: st.DrawFn) -> tuple[Spec, list[tuple[int, int, bool]]]:
    """As ``any_traffic``, each request with a flag: if refused, wait out its ``retry_after`` and retry."""
    spec = draw(specs(draw(st.sampled_from(ALGORITHMS))))
    request = st.tuples(st.integers(0, 2 * spec.interval_us), st.integers(1, spec.burst + 1), st.booleans())
    return spec, draw(st.lists(request, min_size=1, max_size=40))


@fresh_per_example
@given(probed_traffic(), starts)
def test_retry_after_is_exact(
    make_limiter: MakeLimiter, traffic: tuple[Spec, list[tuple[int, int, bool]]], start_us: int
) -> None:
    spec, requests = traffic
    limiter, clock = spec.limiter(make_limiter, start_us)
    for gap_us, cost, probe in requests:
        clock.advance(gap_us / 1e6)
        decision = limiter.check(PEER, cost=cost)
        if decision.allowed:
            assert decision.retry_after == 0.0
            continue
        if cost > spec.burst:
            assert math.isinf(decision.retry_after)
            continue
        retry_ns = ns(decision.retry_after)
        assert retry_ns > 0
        if not probe:
            continue
        waited = 0
        # 1 µs before, then 1 ns before: still refused, and the wait left is exactly what remains.
        for early in (retry_ns - NS_PER_US, retry_ns - 1):
            if early > waited:
                clock.advance((early - waited) / 1e9)
                waited = early
                again = limiter.check(PEER, cost=cost)
                assert not again.allowed, (retry_ns, early)
                assert ns(again.retry_after) == retry_ns - early
        clock.advance((retry_ns - waited) / 1e9)
        assert limiter.check(PEER, cost=cost).allowed


@st.composite
def waiting_traffic(draw: st.DrawFn) -> tuple[Spec, Requests]:
    """A limit and ``(gap_us, cost)`` requests of at most the burst, which a waiter can always get through."""
    spec = draw(specs(draw(st.sampled_from(ALGORITHMS))))
    request = st.tuples(st.one_of(st.just(0), st.integers(0, 2 * spec.interval_us)), st.integers(1, spec.burst))
    return spec, draw(st.lists(request, min_size=1, max_size=30))


def earliest_admissions(make_limiter: MakeLimiter, spec: Spec, start_us: int, requests: Requests) -> list[int]:
    """When each request would first pass ``check``, sent once the previous one passed: ns on the clock."""
    limiter, clock = spec.limiter(make_limiter, start_us)
    times = []
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        decision = limiter.check(PEER, cost=cost)
        if not decision.allowed:
            clock.advance(decision.retry_after)
            assert limiter.check(PEER, cost=cost).allowed
        times.append(ns(clock.now()))
    return times


@fresh_per_example
@given(waiting_traffic(), starts)
def test_throttle_returns_exactly_when_a_check_would_pass_with_one_core_call_each(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    spec, requests = traffic
    expected = earliest_admissions(make_limiter, spec, start_us, requests)
    limiter, clock = spec.limiter(make_limiter, start_us)
    returned = []
    waits = 0
    for calls, (gap_us, cost) in enumerate(requests, start=1):
        clock.advance(gap_us / 1e6)
        called_at = ns(clock.now())
        decision = limiter.throttle(PEER, cost=cost)
        assert decision.allowed
        returned.append(ns(clock.now()))
        waits += returned[-1] > called_at
        assert limiter.stats()["groups"][GROUP]["requests"] == calls  # one core call each: no busy retry
    assert returned == expected
    group = limiter.stats()["groups"][GROUP]
    assert (group["allowed"], group["refused"], group["delayed"]) == (len(requests), 0, waits)


@fresh_per_example
@given(waiting_traffic(), starts)
def test_athrottle_tasks_started_together_finish_in_order_when_checks_would_pass(
    make_limiter: MakeLimiter, traffic: tuple[Spec, Requests], start_us: int
) -> None:
    """Waiters that all reserve at one instant get the slots that one-after-the-other checks would get."""
    spec, requests = traffic
    costs = [cost for _, cost in requests]
    expected = earliest_admissions(make_limiter, spec, start_us, [(0, cost) for cost in costs])
    limiter, clock = spec.limiter(make_limiter, start_us)
    finished: list[tuple[int, int]] = []

    async def request(i: int, cost: int) -> None:
        await limiter.athrottle(PEER, cost=cost)
        finished.append((i, ns(clock.now())))

    async def main() -> None:
        await asyncio.gather(*(request(i, cost) for i, cost in enumerate(costs)))

    asyncio.run(main())
    assert sorted(finished) == list(enumerate(expected))
    assert [at for _, at in finished] == sorted(expected)
    assert limiter.stats()["groups"][GROUP]["requests"] == len(costs)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_cost_above_the_limit_can_never_pass(
    make_limiter: MakeLimiter, algorithm: str, clock: rk.ManualClock
) -> None:
    limiter = Spec(algorithm, 3, 1_000, 3).limiter_on(make_limiter, clock)
    decision = limiter.check(PEER, cost=4)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    with pytest.raises(rk.RateLimited):
        limiter.throttle(PEER, cost=4)
    assert limiter.check(PEER, cost=3).allowed


def test_a_sliding_log_holds_a_huge_cost_as_one_run() -> None:
    # One stamp per unit of cost took 32 GiB here and aborted the process. Memory only: it reads memory_bytes,
    # and exact-mode Redis refuses a sliding log of more than 100,000 at construction (one member per unit).
    limiter = rk.Limiter(rules=[rk.Rule("", "g", "4294967295/s", algorithm="sliding_log")])
    assert limiter.check("alice", cost=2**32 - 1).allowed
    assert not limiter.allow("alice")
    assert limiter.stats()["memory_bytes"] < 10_000_000


def test_reducing_a_sliding_log_by_any_amount_returns_at_once(make_limiter: MakeLimiter, clock: rk.ManualClock) -> None:
    # A loop per unit under the shard's lock never returned for 2**63 - 1.
    limiter = make_limiter(rules=[rk.Rule("", "g", "5/min", algorithm="sliding_log")], clock=clock)
    assert sum(limiter.allow("alice") for _ in range(5)) == 5
    assert limiter.reduce("alice", n=2**63 - 1)
    assert limiter.check("alice").remaining == 4
