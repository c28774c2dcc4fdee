"""Groups of several limits: the ``all`` and ``fallback`` policies, and manual reduction (``Limiter.reduce``).

The hypothesis properties compare a group with a model made of one single-limit limiter per limit, each on
its own ``ManualClock`` moved in step with the group's. Under ``all``, a model limit sees exactly the requests
the group admitted: a model limit that admitted a request the group refused is rebuilt from that history, so
any state a refusal left behind in the group would show up as a later difference. Under ``fallback``, a model
limit sees exactly the requests charged to it: the first one that admits.

The limiter under test runs on each store (``make_limiter``: memory, a shared region, Redis exact and
sync); the models stay in memory, the reference of what one limit alone decides.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
import ratekeeper as rk
from _support import ALGORITHMS, MakeLimiter, fresh_per_example, ns, run_threads
from hypothesis import given
from hypothesis import strategies as st

NS_PER_US = 1_000
GROUP = "g"
PEER = "peer"

starts = st.one_of(st.just(0), st.integers(1, 3_600_000_000))


@dataclass(frozen=True)
class Spec:
    algorithm: str
    count: int
    period_ms: int
    burst: int

    @property
    def limit(self) -> rk.Limit:
        return rk.Limit(f"{self.count}/{self.period_ms}ms", burst=self.burst, algorithm=self.algorithm)

    @property
    def interval_us(self) -> int:
        return -(-self.period_ms * 1_000 // self.count)


specs = st.builds(
    Spec,
    algorithm=st.sampled_from(ALGORITHMS),
    count=st.integers(1, 6),
    period_ms=st.integers(1, 3_000),
    burst=st.integers(1, 6),
)


@st.composite
def group_traffic(draw: st.DrawFn) -> tuple[list[Spec], list[tuple[int, int]]]:
    """2 or 3 limits and ``(gap_us, cost)`` requests with gaps around the fastest limit's interval."""
    limits = draw(st.lists(specs, min_size=2, max_size=3))
    gap = min(s.interval_us for s in limits)
    cost = st.integers(1, max(s.burst for s in limits) + 1)
    return limits, draw(st.lists(st.tuples(st.integers(0, 2 * gap), cost), min_size=1, max_size=40))


def group_limiter(make_limiter: MakeLimiter, limits: list[Spec], policy: str, clock: rk.ManualClock) -> rk.Limiter:
    return make_limiter(rules=[rk.Rule("", GROUP, limits=[s.limit for s in limits], policy=policy)], clock=clock)


@dataclass
class Model:
    """One limit alone, fed only the requests the group charged to it (``history``: ns after start, cost).

    Always in memory, whatever the store under test: it is the reference (and replaying its history at every
    rebuild would cost a round trip per request in Redis)."""

    spec: Spec
    start_us: int
    now_ns: int = 0
    history: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rebuild()

    def rebuild(self) -> None:
        self.clock = rk.ManualClock(self.start_us / 1e6)
        self.limiter = rk.Limiter(rules=[rk.Rule("", GROUP, limits=[self.spec.limit])], clock=self.clock)
        at = 0
        for at_ns, cost in self.history:
            self.clock.advance((at_ns - at) / 1e9)
            at = at_ns
            assert self.limiter.allow(PEER, cost=cost)
        self.clock.advance((self.now_ns - at) / 1e9)

    def advance(self, gap_us: int) -> None:
        self.clock.advance(gap_us / 1e6)
        self.now_ns += gap_us * NS_PER_US

    def check(self, cost: int) -> rk.Decision:
        return self.limiter.check(PEER, cost=cost)

    def charge(self, cost: int) -> None:
        self.history.append((self.now_ns, cost))


@fresh_per_example
@given(group_traffic(), starts)
def test_all_admits_iff_every_limit_does_and_a_refusal_consumes_nothing(
    make_limiter: MakeLimiter, traffic: tuple[list[Spec], list[tuple[int, int]]], start_us: int
) -> None:
    limits, requests = traffic
    clock = rk.ManualClock(start_us / 1e6)
    limiter = group_limiter(make_limiter, limits, "all", clock)
    models = [Model(s, start_us) for s in limits]
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        for m in models:
            m.advance(gap_us)
        got = limiter.check(PEER, cost=cost)
        decisions = [m.check(cost) for m in models]
        assert got.allowed == all(d.allowed for d in decisions)
        if got.allowed:
            for m in models:
                m.charge(cost)
            assert got.remaining == min(d.remaining for d in decisions)
            continue
        # The wait is the longest of the refusing limits' waits; the others keep what they had.
        assert ns(got.retry_after) == max(ns(d.retry_after) for d in decisions if not d.allowed)
        for m, d in zip(models, decisions, strict=True):
            if d.allowed:
                m.rebuild()
        assert limiter.check(PEER, cost=cost).retry_after == got.retry_after


@fresh_per_example
@given(group_traffic(), starts)
def test_all_never_admits_more_than_its_tightest_limit_allows(
    make_limiter: MakeLimiter, traffic: tuple[list[Spec], list[tuple[int, int]]], start_us: int
) -> None:
    """Every limit alone admits the whole of what the group admitted, at the same times."""
    limits, requests = traffic
    clock = rk.ManualClock(start_us / 1e6)
    limiter = group_limiter(make_limiter, limits, "all", clock)
    admitted = []
    at_ns = 0
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        at_ns += gap_us * NS_PER_US
        if limiter.allow(PEER, cost=cost):
            admitted.append((at_ns, cost))
    for spec in limits:
        Model(spec, start_us, now_ns=at_ns, history=admitted)  # rebuilding asserts each replayed admission


@fresh_per_example
@given(group_traffic(), starts)
def test_fallback_admits_iff_some_limit_does_and_charges_only_the_first_that_does(
    make_limiter: MakeLimiter, traffic: tuple[list[Spec], list[tuple[int, int]]], start_us: int
) -> None:
    limits, requests = traffic
    clock = rk.ManualClock(start_us / 1e6)
    limiter = group_limiter(make_limiter, limits, "fallback", clock)
    models = [Model(s, start_us) for s in limits]
    for gap_us, cost in requests:
        clock.advance(gap_us / 1e6)
        for m in models:
            m.advance(gap_us)
        got = limiter.check(PEER, cost=cost)
        refusals = []
        for m in models:
            decision = m.check(cost)
            if decision.allowed:
                m.charge(cost)
                break
            refusals.append(decision)
        assert got.allowed == (len(refusals) < len(models))
        if not got.allowed:
            # The wait is the shortest: the first limit to admit again takes it.
            assert ns(got.retry_after) == min(ns(d.retry_after) for d in refusals)
            assert got.remaining == sum(d.remaining or 0 for d in refusals)


def test_all_refused_by_one_limit_leaves_the_other_untouched(make_limiter: MakeLimiter, clock: rk.ManualClock) -> None:
    """A request the tight limit refuses spends nothing of the loose one: compare with the loose limit alone."""
    tight = rk.Limit("1/s", algorithm="fixed_window")
    loose = rk.Limit("5/min", algorithm="sliding_log")
    both = make_limiter(rules=[rk.Rule("", GROUP, limits=[tight, loose])], clock=clock)
    alone = make_limiter(rules=[rk.Rule("", GROUP, limits=[loose])], clock=clock)
    for second in range(5):
        assert both.allow(PEER)
        assert alone.allow(PEER)
        for _ in range(10):
            refused = both.check(PEER)
            assert not refused.allowed
            # The fixed window's next second; after the fifth admission, the log's first stamp leaving at 60 s.
            assert refused.retry_after == (1.0 if second < 4 else 56.0)
        clock.advance(1)
    # Five admitted, fifty refused: the loose limit is spent by the five alone, as in the limiter holding it alone.
    assert not alone.check(PEER).allowed
    assert both.check(PEER).retry_after == alone.check(PEER).retry_after == 55.0


def test_threads_on_one_key_under_all_get_exactly_the_tightest_limit(
    make_limiter: MakeLimiter, clock: rk.ManualClock
) -> None:
    limits = [rk.Limit("100/min", algorithm="sliding_window"), rk.Limit("50/min", algorithm="sliding_window")]
    limiter = make_limiter(rules=[rk.Rule("", GROUP, limits=limits, policy="all")], clock=clock)
    threads, calls = 8, 300
    admitted = [0] * threads

    def work(i: int) -> None:
        admitted[i] = sum(limiter.allow(PEER) for _ in range(calls))

    run_threads(threads, work)
    assert sum(admitted) == 50
    group = limiter.stats()["groups"][GROUP]
    assert (group["requests"], group["allowed"], group["refused"]) == (threads * calls, 50, threads * calls - 50)
    decision = limiter.check(PEER)
    assert (decision.allowed, decision.remaining, decision.limit) == (False, 0, 50)


@pytest.mark.asyncio
async def test_athrottle_on_an_all_group_serves_tasks_in_order_at_the_common_instants(
    make_limiter: MakeLimiter, clock: rk.ManualClock
) -> None:
    # 1/s (gcra) and 2 per 10 s (fixed window): 0 and 1 s, then the window at 10 s: 10 and 11 s, then 20 s.
    limits = [rk.Limit("1/s"), rk.Limit("2/10s", algorithm="fixed_window")]
    limiter = make_limiter(rules=[rk.Rule("", GROUP, limits=limits)], clock=clock)
    finished: list[tuple[int, float]] = []

    async def request(i: int) -> None:
        await limiter.athrottle(PEER)
        finished.append((i, clock.now()))

    await asyncio.gather(*(request(i) for i in range(5)))
    assert finished == [(0, 0.0), (1, 1.0), (2, 10.0), (3, 11.0), (4, 20.0)]
    group = limiter.stats()["groups"][GROUP]
    assert (group["requests"], group["allowed"], group["delayed"], group["refused"]) == (5, 5, 4, 0)


# --- reduce ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_gives_tokens_back(make_limiter: MakeLimiter, algorithm: str, clock: rk.ManualClock) -> None:
    limiter = make_limiter(rules=[rk.Rule("^/api/", GROUP, "4/min", algorithm=algorithm)], clock=clock)
    assert limiter.allow(PEER, "/api/x", cost=4)
    assert not limiter.allow(PEER, "/api/x")
    assert limiter.reduce(PEER, "/api/y", 3) is True  # any path of the group
    assert limiter.check(PEER, "/api/x").remaining == 2  # 3 given back, 1 taken by this check
    assert limiter.allow(PEER, "/api/x", cost=2)
    assert not limiter.allow(PEER, "/api/x")
    assert limiter.reduce(PEER, "/api/x") is True
    assert limiter.stats()["groups"][GROUP]["reductions"] == 2


@pytest.mark.parametrize("policy", ["all", "fallback"])
def test_reduce_gives_back_what_the_policy_took(make_limiter: MakeLimiter, policy: str, clock: rk.ManualClock) -> None:
    limits = [rk.Limit("2/min", algorithm="fixed_window"), rk.Limit("2/min", algorithm="leaky_bucket")]
    limiter = make_limiter(rules=[rk.Rule("", GROUP, limits=limits, policy=policy)], clock=clock)
    admitted = sum(limiter.allow(PEER) for _ in range(10))
    assert admitted == (2 if policy == "all" else 4)
    assert limiter.reduce(PEER, None, 2)
    # Under `all` every limit counted each request: each gets 2 back, and together they admit 2 more.
    # Under `fallback` the tokens go back to the last limit (the node limiter's leaky tokens) only: 2 more, not 4.
    assert sum(limiter.allow(PEER) for _ in range(10)) == 2


def test_reduce_is_refused_without_reduction_or_without_a_group(
    make_limiter: MakeLimiter, clock: rk.ManualClock
) -> None:
    limiter = make_limiter(
        rules=[
            rk.Rule("^/fixed$", "fixed", "1/min", reduction=False),
            rk.Rule("^/api/", "api", "1/min"),
        ],
        clock=clock,
    )
    assert limiter.allow(PEER, "/fixed")
    assert limiter.reduce(PEER, "/fixed") is False
    assert limiter.reduce(PEER, "/fixed", 5) is False
    assert not limiter.allow(PEER, "/fixed")  # nothing was given back
    assert limiter.reduce(PEER, "/elsewhere") is False  # no rule, no catch-all
    assert limiter.reduce(PEER) is False
    assert limiter.reduce(PEER, "/api/x") is True  # a key with no state yet: nothing to give back, still counted
    assert limiter.allow(PEER, "/api/x")
    assert not limiter.allow(PEER, "/api/x")
    stats = limiter.stats()["groups"]
    assert (stats["fixed"]["reductions"], stats["api"]["reductions"]) == (0, 1)
