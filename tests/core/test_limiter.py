"""``Limiter.check`` / ``allow`` and the controls: routing, exemptions, off/on, reset, len, stats, Decision, cost."""

from __future__ import annotations

import inspect
import math
from typing import Any

import pytest
import ratekeeper as rk


def admitted(limiter: rk.Limiter, peer: str, path: str | None = None, *, times: int) -> int:
    return sum(limiter.allow(peer, path) for _ in range(times))


# --- routing ---------------------------------------------------------------------------------------------------


def test_single_rate_limits_every_path_in_the_default_group(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    decisions = [limiter.check("alice", path) for path in ("/a", "/b/c", "", None)]
    assert [d.group for d in decisions] == ["default"] * 4
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert limiter.groups == ["default"]


def test_first_matching_rule_wins(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(
        rules=[rk.Rule("^/api/login", "login", "1/min"), rk.Rule("^/api", "api", "10/min")], clock=clock
    )
    assert limiter.check("alice", "/api/login").group == "login"
    assert limiter.check("alice", "/api/users").group == "api"


def test_rules_come_before_the_catch_all_rate(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("5/min", rules=[rk.Rule("^/api", "api", "2/min")], clock=clock)
    assert limiter.check("alice", "/api/x").group == "api"
    assert limiter.check("alice", "/other").group == "default"
    assert limiter.groups == ["api", "default"]


def test_pattern_is_searched_anywhere_in_the_path(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("login", "login", "1/min"), rk.Rule("^/api", "api", "1/min")], clock=clock)
    assert limiter.check("alice", "/v2/login/form").group == "login"
    assert limiter.check("alice", "/v2/api").group is None


def test_path_matching_no_rule_is_not_limited(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", "1/min")], clock=clock)
    decisions = [limiter.check("alice", "/static/app.js") for _ in range(50)]
    assert all(d.allowed for d in decisions)
    assert {(d.group, d.limit, d.remaining, d.retry_after, d.reset_after) for d in decisions} == {
        (None, None, None, 0.0, 0.0)
    }
    assert len(limiter) == 0


def test_no_path_is_routed_like_the_empty_string(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", "1/min"), rk.Rule("^$", "bare", "2/min")], clock=clock)
    assert limiter.check("alice").group == "bare"
    assert limiter.check("alice", "").group == "bare"
    assert not limiter.allow("alice")


def test_no_path_is_unlimited_when_no_rule_matches_the_empty_string(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/api", "api", "1/min")], clock=clock)
    assert admitted(limiter, "alice", times=10) == 10
    assert limiter.check("alice").group is None


def test_rules_sharing_a_group_share_its_budget(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/a", "g", "1/min"), rk.Rule("^/b", "g", "1/min")], clock=clock)
    assert limiter.groups == ["g"]
    assert limiter.allow("alice", "/a")
    assert not limiter.allow("alice", "/b")


def test_peers_have_independent_budgets(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/min", clock=clock)
    assert admitted(limiter, "alice", times=5) == 2
    assert admitted(limiter, "bob", times=5) == 2


def test_groups_have_independent_budgets_for_one_peer(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/min", rules=[rk.Rule("^/api", "api", "1/min")], clock=clock)
    assert admitted(limiter, "alice", "/api", times=5) == 1
    assert admitted(limiter, "alice", "/page", times=5) == 2


# --- exemptions ------------------------------------------------------------------------------------------------


def test_exempt_peer_is_always_allowed_without_tracking(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", exempt_peers=["admin", "monitor"], clock=clock)
    decisions = [limiter.check("admin", "/x") for _ in range(20)]
    assert all(d.allowed and d.group is None for d in decisions)
    assert len(limiter) == 0
    assert limiter.stats()["exempt"] == 20


def test_exempt_path_pattern_is_searched_and_not_tracked(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", exempt_paths=["^/health"], clock=clock)
    assert admitted(limiter, "alice", "/health/live", times=10) == 10
    assert len(limiter) == 0
    assert limiter.check("alice", "/x/health").group == "default"


def test_exemption_does_not_extend_to_other_peers(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", exempt_peers=["admin"], clock=clock)
    assert admitted(limiter, "administrator", times=3) == 1


# --- off / on ----------------------------------------------------------------------------------------------------


def test_off_allows_everything_and_on_restores_limits(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", clock=clock)
    assert limiter.allow("alice")
    limiter.off()
    assert not limiter.enabled
    assert not limiter.stats()["enabled"]
    assert admitted(limiter, "alice", times=10) == 10
    limiter.on()
    assert limiter.enabled
    assert limiter.check("alice").retry_after == 60.0


def test_requests_while_off_consume_nothing(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/min", clock=clock)
    limiter.off()
    admitted(limiter, "alice", times=10)
    limiter.on()
    assert admitted(limiter, "alice", times=10) == 3


# --- reset and len ---------------------------------------------------------------------------------------------


def test_len_counts_one_key_per_peer_and_group(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("5/min", rules=[rk.Rule("^/api", "api", "5/min")], clock=clock)
    limiter.check("alice", "/api")
    limiter.check("alice", "/page")
    limiter.check("alice", "/page")
    limiter.check("bob")
    assert len(limiter) == 3
    assert limiter.stats()["keys"] == 3


def test_reset_of_one_peer_restores_its_budget_in_every_group(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", rules=[rk.Rule("^/api", "api", "1/min")], clock=clock)
    for peer in ("alice", "bob"):
        limiter.check(peer, "/api")
        limiter.check(peer, "/page")
    limiter.reset("alice")
    assert len(limiter) == 2
    assert limiter.allow("alice", "/api")
    assert limiter.allow("alice", "/page")
    assert not limiter.allow("bob", "/api")


def test_reset_without_peer_forgets_every_key(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", clock=clock)
    for peer in ("alice", "bob", "carol"):
        limiter.check(peer)
    limiter.reset()
    assert len(limiter) == 0
    assert all(limiter.allow(peer) for peer in ("alice", "bob", "carol"))


# --- stats -------------------------------------------------------------------------------------------------------


WAIT_BOUNDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
LATENCY_BOUNDS = [1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2, 1e-1]


def test_stats_reports_configuration_and_counters(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(
        "3/60s",
        rules=[rk.Rule("^/api", "api", "1/s", burst=2, algorithm="token_bucket")],
        exempt_peers=["admin"],
        max_keys=500,
        clock=clock,
    )
    for _ in range(5):
        limiter.check("alice", "/page")
    limiter.check("alice", "/api")
    limiter.check("admin", "/page")
    stats = limiter.stats()
    assert isinstance(stats.pop("memory_bytes"), int)
    # Sampled: one decision in 64 per thread, wherever this thread's count stands.
    decisions = stats.pop("decision_seconds")
    assert decisions["count"] == sum(decisions["counts"]) <= 7
    assert len(decisions["counts"]) == 15
    no_waits = {"bounds": WAIT_BOUNDS, "counts": [0] * 15, "sum": 0.0, "count": 0}
    assert stats == {
        "enabled": True,
        "keys": 2,
        "max_keys": 500,
        "evictions": 0,
        "exempt": 1,
        "quota_records": 0,
        "quota_queue": 0,
        "quota_running": 0,
        "backend_errors": 0,
        "backend_down": False,
        "backend_outages": 0,
        "standing_share": None,
        "backend_seconds": {"bounds": LATENCY_BOUNDS, "counts": [0] * 15, "sum": 0.0, "count": 0},
        "groups": {
            "api": {
                "limits": [{"rate": "1/s", "burst": 2, "algorithm": "token_bucket"}],
                "policy": "all",
                "requests": 1,
                "allowed": 1,
                "refused": 0,
                "delayed": 0,
                "exempt": 0,
                "keys": 1,
                "evictions": 0,
                "reductions": 0,
                "quota_fetches": 0,
                "quota_failures": 0,
                "quota_unknown": 0,
                "dropped": 0,
                "abandoned": 0,
                "waits": no_waits,
                "adaptive": [],
            },
            "default": {
                "limits": [{"rate": "3/min", "burst": 3, "algorithm": "gcra"}],
                "policy": "all",
                "requests": 5,
                "allowed": 3,
                "refused": 2,
                "delayed": 0,
                "exempt": 1,  # admin's request to /page, which routes here
                "keys": 1,
                "evictions": 0,
                "reductions": 0,
                "quota_fetches": 0,
                "quota_failures": 0,
                "quota_unknown": 0,
                "dropped": 0,
                "abandoned": 0,
                "waits": no_waits,
                "adaptive": [],
            },
        },
        "shared": None,
    }


def test_stats_memory_grows_with_tracked_keys(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", clock=clock)
    before = limiter.stats()["memory_bytes"]
    for i in range(1000):
        limiter.check(f"peer-{i}")
    assert limiter.stats()["memory_bytes"] > before


def test_limiter_exposes_its_clock_and_max_keys(clock: rk.ManualClock) -> None:
    assert rk.Limiter("1/s", clock=clock).clock is clock
    assert rk.Limiter("1/s").clock is None
    assert rk.Limiter("1/s", max_keys=7).max_keys == 7
    assert rk.Limiter("1/s").max_keys == 1_000_000


# --- Decision ----------------------------------------------------------------------------------------------------


def test_admitted_decision_is_truthy_with_zero_retry(clock: rk.ManualClock) -> None:
    decision = rk.Limiter("3/60s", clock=clock).check("alice", "/x")
    assert decision
    assert (decision.allowed, decision.group, decision.limit, decision.remaining) == (True, "default", 3, 2)
    assert (decision.retry_after, decision.reset_after) == (0.0, 20.0)


def test_refused_decision_is_falsy_and_tells_when_to_retry(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", clock=clock)
    limiter.check("alice")
    decision = limiter.check("alice")
    assert not decision
    assert (decision.allowed, decision.limit, decision.remaining, decision.retry_after) == (False, 1, 0, 1.0)


def test_retry_after_is_exact(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    for _ in range(3):
        limiter.check("alice")
    clock.advance(7.25)
    wait = limiter.check("alice").retry_after
    assert wait == 12.75
    clock.advance(wait - 1e-6)
    assert not limiter.allow("alice")
    clock.advance(1e-6)
    assert limiter.allow("alice")


def test_allow_agrees_with_check(clock: rk.ManualClock) -> None:
    checked = rk.Limiter("3/60s", clock=clock)
    allowed = rk.Limiter("3/60s", clock=clock)
    for _ in range(6):
        assert allowed.allow("alice") == checked.check("alice").allowed
        clock.advance(7)


def test_burst_defaults_to_the_rate_count(clock: rk.ManualClock) -> None:
    assert rk.Limiter("4/min", clock=clock).check("alice").limit == 4
    assert rk.Rule("^/a", "a", "4/min").burst == 4


def test_explicit_burst_admits_that_many_at_once_then_the_rate(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", burst=5, clock=clock)
    assert admitted(limiter, "alice", times=10) == 5
    clock.advance(1)
    assert admitted(limiter, "alice", times=10) == 1


def test_burst_of_one_spaces_requests_by_the_interval(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/s", burst=1, clock=clock)
    assert limiter.allow("alice")
    assert limiter.check("alice").retry_after == pytest.approx(0.1, abs=1e-9)


def test_rule_exposes_its_configuration() -> None:
    rule = rk.Rule("^/api", "api", "10/min", burst=3, algorithm="token_bucket")
    assert (rule.pattern, rule.group, rule.rate, rule.burst, rule.algorithm) == (
        "^/api",
        "api",
        rk.Rate("10/min"),
        3,
        "token_bucket",
    )


# --- a refusal changes no state -------------------------------------------------------------------------------


def fields(decision: rk.Decision) -> tuple[object, ...]:
    return (decision.allowed, decision.group, decision.remaining, decision.retry_after, decision.reset_after)


@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket"])
def test_refused_checks_change_nothing(clock: rk.ManualClock, algorithm: str) -> None:
    quiet = rk.Limiter("3/60s", algorithm=algorithm, clock=clock)
    hammered = rk.Limiter("3/60s", algorithm=algorithm, clock=clock)
    for _ in range(12):
        got = hammered.check("alice")
        assert fields(got) == fields(quiet.check("alice"))
        if not got.allowed:
            retries = [hammered.check("alice") for _ in range(100)]
            assert {fields(d) for d in retries} == {fields(got)}
        clock.advance(9)


# --- cost ----------------------------------------------------------------------------------------------------------


def test_cost_consumes_that_many_units(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    decision = limiter.check("alice", cost=2)
    assert (decision.allowed, decision.remaining, decision.reset_after) == (True, 1, 40.0)


def test_cost_above_what_remains_is_refused_until_enough_has_recovered(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("3/60s", clock=clock)
    limiter.check("alice", cost=2)
    refused = limiter.check("alice", cost=2)
    assert (refused.allowed, refused.retry_after) == (False, 20.0)
    assert limiter.check("alice", cost=1).allowed


@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket"])
def test_cost_above_the_burst_can_never_pass(clock: rk.ManualClock, algorithm: str) -> None:
    limiter = rk.Limiter("3/60s", algorithm=algorithm, clock=clock)
    clock.advance(86_400)
    decision = limiter.check("alice", cost=4)
    assert not decision.allowed
    assert math.isinf(decision.retry_after)
    assert limiter.check("alice", cost=3).allowed


# --- token bucket ------------------------------------------------------------------------------------------------


def test_token_bucket_gives_the_burst_per_window(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", algorithm="token_bucket", clock=clock)
    assert admitted(limiter, "alice", times=5) == 2
    clock.advance(0.5)
    refused = limiter.check("alice")
    assert (refused.allowed, refused.retry_after) == (False, 0.5)
    clock.advance(0.5)
    assert admitted(limiter, "alice", times=5) == 2


def test_token_bucket_windows_align_to_the_first_request(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", algorithm="token_bucket", clock=clock)
    clock.advance(0.3)
    admitted(limiter, "alice", times=2)
    clock.advance(0.7)
    assert not limiter.allow("alice")
    clock.advance(0.3)
    assert limiter.allow("alice")


def test_token_bucket_unused_permits_do_not_carry_over(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", algorithm="token_bucket", clock=clock)
    limiter.check("alice")
    clock.advance(10.5)
    assert admitted(limiter, "alice", times=10) == 2


def test_token_bucket_window_is_burst_intervals_long(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/s", burst=4, algorithm="token_bucket", clock=clock)
    assert admitted(limiter, "alice", times=10) == 4
    clock.advance(3.999)
    assert not limiter.allow("alice")
    clock.advance(0.001)
    assert admitted(limiter, "alice", times=10) == 4


def test_token_bucket_decision_reports_remaining_and_window_end(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", algorithm="token_bucket", clock=clock)
    decision = limiter.check("alice")
    assert (decision.group, decision.limit, decision.remaining, decision.reset_after) == ("default", 2, 1, 1.0)


@pytest.mark.parametrize("rate", ["3/60s", "3/s", "7/min", "6/ms"])
@pytest.mark.parametrize("algorithm", ["gcra", "token_bucket"])
def test_first_request_on_a_fresh_manual_clock_is_admitted(clock: rk.ManualClock, rate: str, algorithm: str) -> None:
    decision = rk.Limiter(rate, algorithm=algorithm, clock=clock).check("alice")
    assert (decision.allowed, decision.retry_after) == (True, 0.0)


# --- the signature and the docs ------------------------------------------------------------------------------


def test_limiter_signature_shows_the_real_parameters() -> None:
    parameters = inspect.signature(rk.Limiter).parameters
    assert list(parameters)[:3] == ["rate", "rules", "exempt_peers"]
    expected = ["exempt_paths", "max_keys", "burst", "algorithm", "clock", "quotas", "track_usage"]
    assert set(expected) <= set(parameters)
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters.values())
    assert parameters["rate"].default is None
    assert parameters["max_keys"].default == 1_000_000
    assert parameters["algorithm"].default == "gcra"
    assert parameters["track_usage"].default is False
    assert parameters["quotas"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("method", ["check", "allow", "throttle", "athrottle", "concurrent", "reduce", "resolve"])
def test_methods_taking_a_group_show_it_in_their_signature(method: str) -> None:
    parameters = inspect.signature(getattr(rk.Limiter, method)).parameters
    assert parameters["group"].default is None
    assert parameters["group"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    "documented",
    [
        rk.Limiter.check,
        rk.Limiter.allow,
        rk.Limiter.stats,
        rk.Limiter.reduce,
        rk.Limiter.group_policy,
        rk.Limiter.resolve,
        rk.Limiter.drain_pending,
        rk.Limiter.absorb,
    ],
    ids=lambda f: getattr(f, "__name__", "?"),
)
def test_methods_have_docstrings(documented: Any) -> None:
    assert (documented.__doc__ or "").strip()


@pytest.mark.parametrize("field", ["allowed", "group", "limit", "remaining", "retry_after", "window", "refused_by"])
def test_decision_fields_have_docstrings(field: str) -> None:
    assert (getattr(rk.Decision, field).__doc__ or "").strip()


def test_next_after_says_when_one_more_request_comes_back(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/min", clock=clock)
    assert limiter.check("alice").next_after == 6.0  # the first use comes back after one interval
    clock.advance(4.0)
    assert limiter.check("alice").next_after == 2.0
    clock.advance(60.0)
    assert limiter.check("bob").next_after == 6.0
    assert rk.Limiter("10/min", algorithm="fixed_window", clock=clock).check("c").next_after == 60.0
