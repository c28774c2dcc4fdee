"""Groups by name: ``group=``, ``group_policy``, ``Decision.window`` / ``refused_by``, ``resolve`` and ``add_group``.

``group="login"`` decides for a group by name, without regex routing, on the same state as the requests
whose path routes there. ``group_policy`` is what a ``RateLimit-Policy`` header needs (quota and window in
seconds); a Decision carries the window of the limit that decided and says whether a rate or the
concurrency permits refused it. ``resolve`` routes without deciding. ``add_group`` makes a group that only
``group=`` reaches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import ratekeeper as rk
from _support import admitted

NEVER = "^/this-path-is-never-requested$"


def routed(clock: rk.ManualClock, **options: Any) -> rk.Limiter:
    """``api`` (10/min) on ``^/api``, ``login`` (2/min) on a pattern no path matches; no catch-all."""
    return rk.Limiter(
        rules=[rk.Rule("^/api", "api", "10/min"), rk.Rule(NEVER, "login", "2/min")], clock=clock, **options
    )


# --- group= --------------------------------------------------------------------------------------------------


def test_group_decides_for_the_named_group_without_routing(clock: rk.ManualClock) -> None:
    limiter = routed(clock)
    decisions = [limiter.check("alice", group="login") for _ in range(3)]
    assert [(d.allowed, d.group, d.limit) for d in decisions] == [(True, "login", 2)] * 2 + [(False, "login", 2)]
    assert decisions[-1].retry_after == 30.0
    assert limiter.allow("bob", group="login")  # per peer, as with paths
    assert limiter.check("alice", "/api/x").remaining == 9  # the other group was not charged


def test_group_shares_the_state_of_requests_routed_to_it(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/login", "login", "3/min")], clock=clock)
    assert admitted(limiter, "alice", 2, "/login") == 2
    assert limiter.check("alice", group="login").remaining == 0
    assert not limiter.allow("alice", "/login/form")
    assert not limiter.allow("alice", group="login")


def test_group_of_an_exempt_peer_is_still_exempt(clock: rk.ManualClock) -> None:
    limiter = routed(clock, exempt_peers=["admin"])
    decisions = [limiter.check("admin", group="login") for _ in range(10)]
    assert all(d.allowed for d in decisions)
    assert {(d.group, d.limit, d.remaining) for d in decisions} == {(None, None, None)}
    assert len(limiter) == 0


def test_throttle_waits_for_the_named_group(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("100/s", rules=[rk.Rule(NEVER, "slow", "1/s")], clock=clock)
    for _ in range(3):
        assert limiter.throttle("alice", group="slow").group == "slow"
    assert clock.now() == 2.0


@pytest.mark.asyncio
async def test_athrottle_waits_for_the_named_group(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("100/s", rules=[rk.Rule(NEVER, "slow", "1/s")], clock=clock)
    decisions = await asyncio.gather(*(limiter.athrottle("alice", group="slow") for _ in range(3)))
    assert [d.group for d in decisions] == ["slow"] * 3
    assert clock.now() == 2.0


def test_concurrent_and_reduce_take_a_group(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule(NEVER, "up", limits=["2/min", rk.Limit(concurrency=1)])], clock=clock)
    with limiter.concurrent("alice", group="up") as decision:
        assert decision.group == "up"
        with pytest.raises(rk.RateLimited), limiter.concurrent("alice", group="up"):
            pytest.fail("a second request entered")
    assert limiter.allow("alice", group="up")  # 1 by the permit + 1 here: the rate is used up
    assert not limiter.allow("alice", group="up")
    assert limiter.reduce("alice", n=1, group="up")
    assert limiter.allow("alice", group="up")


CALLS: dict[str, Callable[..., Any]] = {
    "check": lambda lim, **kw: lim.check("alice", **kw),
    "allow": lambda lim, **kw: lim.allow("alice", **kw),
    "throttle": lambda lim, **kw: lim.throttle("alice", **kw),
    "athrottle": lambda lim, **kw: asyncio.run(lim.athrottle("alice", **kw)),
    "concurrent": lambda lim, **kw: lim.concurrent("alice", **kw).__enter__(),
    "reduce": lambda lim, **kw: lim.reduce("alice", **kw),
}


@pytest.mark.parametrize("method", list(CALLS))
def test_an_unknown_group_is_an_invalid_value_naming_the_groups(clock: rk.ManualClock, method: str) -> None:
    limiter = routed(clock)
    with pytest.raises(rk.InvalidValue) as info:
        CALLS[method](limiter, group="nope")
    assert isinstance(info.value, ValueError)
    assert info.value.loc == ("group",)
    assert "nope" in str(info.value)
    assert "api" in info.value.msg
    assert "login" in info.value.msg
    assert len(limiter) == 0


@pytest.mark.parametrize("method", list(CALLS))
def test_a_group_with_a_path_is_an_invalid_value(clock: rk.ManualClock, method: str) -> None:
    limiter = routed(clock)

    def call() -> Any:
        if method == "reduce":
            return limiter.reduce("alice", "/api/x", group="login")
        if method == "athrottle":
            return asyncio.run(limiter.athrottle("alice", "/api/x", group="login"))
        if method == "concurrent":
            return limiter.concurrent("alice", "/api/x", group="login").__enter__()
        return getattr(limiter, method)("alice", "/api/x", group="login")

    with pytest.raises(rk.InvalidValue) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert info.value.loc == ("group",)
    assert len(limiter) == 0


# --- group_policy --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "quota", "window"),
    [
        (rk.Rule("", "g", "10/min"), 10, 60.0),
        (rk.Rule("", "g", "10/s", burst=20), 20, 2.0),
        (rk.Rule("", "g", "100/hour", algorithm="fixed_window"), 100, 3600.0),
        (rk.Rule("", "g", "5/s", algorithm="token_bucket"), 5, 1.0),
    ],
    ids=["gcra", "gcra-burst", "fixed-window", "token-bucket"],
)
def test_group_policy_gives_the_quota_and_window(
    clock: rk.ManualClock, rule: rk.Rule, quota: int, window: float
) -> None:
    policy = rk.Limiter(rules=[rule], clock=clock).group_policy("g")
    assert (policy.group, policy.quota, policy.window, policy.unit) == ("g", quota, window, "requests")


def test_group_policy_of_a_concurrency_only_group_counts_concurrent_requests(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/up", "up", limits=[rk.Limit(concurrency=5)])], clock=clock)
    policy = limiter.group_policy("up")
    assert (policy.group, policy.quota, policy.unit) == ("up", 5, "concurrent-requests")
    assert policy.window is None


def test_group_policy_of_a_peer_shows_its_quota(clock: rk.ManualClock) -> None:
    limiter = routed(clock)
    limiter.set_quota("alice", "api", "100/min")
    assert (limiter.group_policy("api", "alice").quota, limiter.group_policy("api", "alice").window) == (100, 60.0)
    assert limiter.group_policy("api", peer="bob").quota == 10
    assert limiter.group_policy("api").quota == 10
    limiter.set_quota("alice", "api", None)
    assert limiter.group_policy("api", "alice").quota == 10


def test_group_policy_follows_update_rule(clock: rk.ManualClock) -> None:
    limiter = routed(clock)
    limiter.update_rule("api", rate="30/hour")
    assert (limiter.group_policy("api").quota, limiter.group_policy("api").window) == (30, 3600.0)


def test_group_policy_of_an_unknown_group_is_an_invalid_value(clock: rk.ManualClock) -> None:
    with pytest.raises(rk.InvalidValue, match="nope"):
        routed(clock).group_policy("nope")


# --- Decision.window and refused_by ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        rk.Rule("", "g", "2/min"),
        rk.Rule("", "g", "2/s", burst=4),
        rk.Rule("", "g", "2/hour", algorithm="fixed_window"),
        rk.Rule("", "g", "2/min", algorithm="sliding_window"),
    ],
    ids=["gcra", "gcra-burst", "fixed-window", "sliding-window"],
)
def test_decision_window_is_the_group_policys_window(clock: rk.ManualClock, rule: rk.Rule) -> None:
    limiter = rk.Limiter(rules=[rule], clock=clock)
    window = limiter.group_policy("g").window
    assert window is not None
    decisions = [limiter.check("alice") for _ in range(rule.burst + 1)]
    assert [d.allowed for d in decisions] == [True] * rule.burst + [False]
    assert {d.window for d in decisions} == {window}


def test_decision_window_and_refused_by_are_none_when_not_limited(clock: rk.ManualClock) -> None:
    limiter = routed(clock, exempt_peers=["admin"])
    for decision in (limiter.check("admin", "/api/x"), limiter.check("alice", "/static/app.js")):
        assert decision.allowed
        assert (decision.window, decision.refused_by, decision.limit, decision.remaining) == (None, None, None, None)


def test_refused_by_says_rate_for_a_rate_refusal(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", clock=clock)
    allowed, refused = limiter.check("alice"), limiter.check("alice")
    assert (allowed.allowed, allowed.refused_by) == (True, None)
    assert (refused.allowed, refused.refused_by) == (False, "rate")


def test_refused_by_says_concurrency_when_every_permit_is_in_use(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/up", "up", limits=["100/min", rk.Limit(concurrency=2)])], clock=clock)
    with limiter.concurrent("alice", "/up") as first, limiter.concurrent("alice", "/up"):
        assert first.refused_by is None
        with pytest.raises(rk.RateLimited) as info, limiter.concurrent("alice", "/up"):
            pytest.fail("a third request entered")
    decision = info.value.decision
    assert (decision.allowed, decision.refused_by, decision.group) == (False, "concurrency", "up")
    text = str(info.value)
    assert "all 2 concurrency permits" in text
    assert "0.000s" not in text


def test_a_rate_refusal_of_concurrent_says_rate(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/up", "up", limits=["1/min", rk.Limit(concurrency=5)])], clock=clock)
    with limiter.concurrent("alice", "/up"):
        pass
    with pytest.raises(rk.RateLimited) as info, limiter.concurrent("alice", "/up"):
        pytest.fail("the rate admitted a second request")
    assert info.value.decision.refused_by == "rate"
    assert info.value.retry_after == 60.0


def test_a_cost_above_the_burst_is_never_admitted_and_says_so(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/min", clock=clock)
    with pytest.raises(rk.RateLimited) as info:
        limiter.throttle("alice", cost=4)
    text = str(info.value)
    assert "never" in text
    assert "inf" not in text
    assert info.value.decision.refused_by == "rate"


# --- resolve -------------------------------------------------------------------------------------------------------


def test_resolve_gives_the_group_its_limits_and_policy(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(
        "5/min", rules=[rk.Rule("^/api", "api", limits=["10/min", "100/hour"], policy="fallback")], clock=clock
    )
    resolution = limiter.resolve("alice", "/api/x")
    assert resolution is not None
    assert (resolution.group, resolution.limits, resolution.policy) == (
        "api",
        [rk.Limit("10/min"), rk.Limit("100/hour")],
        "fallback",
    )
    by_name = limiter.resolve("alice", group="api")
    assert by_name is not None
    assert (by_name.group, by_name.limits, by_name.policy) == (resolution.group, resolution.limits, "fallback")
    default = limiter.resolve("alice", "/other")
    assert default is not None
    assert (default.group, default.limits, default.policy) == ("default", [rk.Limit("5/min")], "all")


def test_resolve_applies_the_per_key_quota_to_the_first_rate_limit(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", limits=["10/min", "100/hour"])], clock=clock)
    limiter.set_quota("alice", "api", "50/min")
    alice, bob = limiter.resolve("alice", "/api/x"), limiter.resolve("bob", "/api/x")
    assert alice is not None
    assert bob is not None
    assert [(limit.rate, limit.burst) for limit in alice.limits] == [
        (rk.Rate("50/min"), 50),
        (rk.Rate("100/hour"), 100),
    ]
    assert bob.limits == [rk.Limit("10/min"), rk.Limit("100/hour")]


def test_resolve_is_none_when_not_limited(clock: rk.ManualClock) -> None:
    limiter = routed(clock, exempt_peers=["admin"], exempt_paths=["^/api/health"])
    assert limiter.resolve("admin", "/api/x") is None
    assert limiter.resolve("admin", group="login") is None
    assert limiter.resolve("alice", "/api/health") is None
    assert limiter.resolve("alice", "/static/app.js") is None
    assert limiter.resolve("alice", "/api/x") is not None
    limiter.off()
    assert limiter.resolve("alice", "/api/x") is None
    assert limiter.resolve("alice", group="api") is None


def test_resolve_decides_nothing(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/min", clock=clock)
    for _ in range(10):
        limiter.resolve("alice")
    assert admitted(limiter, "alice", 5) == 2
    assert limiter.stats()["groups"]["default"]["requests"] == 5


def test_resolve_rejects_what_check_rejects(clock: rk.ManualClock) -> None:
    limiter = routed(clock)
    with pytest.raises(rk.InvalidValue) as unknown:
        limiter.resolve("alice", group="nope")
    assert unknown.value.loc == ("group",)
    with pytest.raises(rk.InvalidValue) as both:
        limiter.resolve("alice", "/api/x", group="api")
    assert both.value.loc == ("group",)
    with pytest.raises(rk.InvalidType) as peer:
        limiter.resolve(1.0)  # type: ignore[arg-type]
    assert peer.value.loc == ("peer",)


# --- add_group -------------------------------------------------------------------------------------------------


def test_add_group_makes_a_group_reached_only_by_name(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("100/min", clock=clock)
    limiter.add_group("login", ["2/min"])
    limiter.add_group("login", ["2/min"])  # the same limits again: nothing changes
    assert [limiter.allow("alice", group="login") for _ in range(3)] == [True, True, False]
    # No path routes to it: "/login" goes to the catch-all.
    assert limiter.check("alice", "/login").group == "default"
    with pytest.raises(rk.InvalidValue) as other:
        limiter.add_group("login", ["5/min"])
    assert other.value.loc == ("name",)
