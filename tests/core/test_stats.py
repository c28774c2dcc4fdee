"""``stats()``: the typed numbers the metrics export reads, per group: exempt, keys, evictions, delayed.

``delayed`` counts only waits that really happened: a throttle refused by its timeout or an athrottle
cancelled while it waited gave its slot back and is not counted. Every timing runs on a ManualClock.
"""

from __future__ import annotations

import asyncio

import pytest
import ratekeeper as rk
from _support import admitted, run_threads_while

STATS_KEYS = {
    "enabled",
    "keys",
    "max_keys",
    "evictions",
    "exempt",
    "memory_bytes",
    "quota_records",
    "quota_queue",
    "quota_running",
    "backend_errors",
    "backend_down",
    "backend_outages",
    "standing_share",
    "decision_seconds",
    "backend_seconds",
    "groups",
    "shared",
}
GROUP_KEYS = {
    "limits",
    "policy",
    "requests",
    "allowed",
    "refused",
    "delayed",
    "exempt",
    "keys",
    "evictions",
    "reductions",
    "quota_fetches",
    "quota_failures",
    "dropped",
    "abandoned",
    "waits",
    "quota_unknown",
    "adaptive",
}


def two_groups(clock: rk.ManualClock, **options: object) -> rk.Limiter:
    return rk.Limiter(
        rules=[rk.Rule("^/api", "api", "10/min"), rk.Rule("^/login", "login", "3/min")],
        clock=clock,
        **options,  # type: ignore[arg-type]
    )


def test_stats_has_the_documented_keys(clock: rk.ManualClock) -> None:
    stats = two_groups(clock).stats()
    assert set(stats) == STATS_KEYS
    assert set(stats["groups"]) == {"api", "login"}
    assert {name: set(group) for name, group in stats["groups"].items()} == {"api": GROUP_KEYS, "login": GROUP_KEYS}
    assert all(
        stats["groups"][name][counter] == 0
        for name in ("api", "login")
        for counter in GROUP_KEYS - {"limits", "policy", "waits", "adaptive"}
    )
    assert all(stats["groups"][name]["waits"]["count"] == 0 for name in ("api", "login"))


def test_the_typed_dicts_are_exported() -> None:
    assert set(rk.Stats.__annotations__) == STATS_KEYS
    assert set(rk.SharedStats.__annotations__) == {
        "path",
        "keys",
        "max_keys",
        "evictions",
        "dropped",
        "allowed",
        "refused",
        "top_refused",
        "groups",
        "stalls",
        "clock",
    }
    assert set(rk.GroupStats.__annotations__) == GROUP_KEYS


# --- exempt -------------------------------------------------------------------------------------------------------


def test_exempt_peers_count_in_the_group_their_path_routes_to(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock, exempt_peers=["admin"])
    for _ in range(3):
        limiter.check("admin", "/api/users")
    limiter.allow("admin", "/login")
    limiter.check("alice", "/api/users")
    stats = limiter.stats()
    assert stats["exempt"] == 4
    api, login = stats["groups"]["api"], stats["groups"]["login"]
    assert (api["exempt"], api["requests"], api["allowed"]) == (3, 1, 1)
    assert (login["exempt"], login["requests"]) == (1, 0)


def test_exempt_paths_count_in_the_group_they_route_to(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock, exempt_paths=["^/api/health$"])
    assert admitted(limiter, "alice", 20, "/api/health") == 20
    stats = limiter.stats()
    assert (stats["exempt"], stats["groups"]["api"]["exempt"], stats["groups"]["login"]["exempt"]) == (20, 20, 0)
    assert stats["groups"]["api"]["requests"] == 0


def test_exempt_peer_naming_a_group_counts_in_that_group(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock, exempt_peers=["admin"])
    limiter.check("admin", group="login")
    assert limiter.stats()["groups"]["login"]["exempt"] == 1


# --- keys ------------------------------------------------------------------------------------------------------


def test_keys_count_the_states_each_group_holds_now(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock)
    for peer in ("alice", "bob", "carol"):
        limiter.check(peer, "/api/x")
        limiter.check(peer, "/api/y")
    limiter.check("alice", "/login")
    stats = limiter.stats()
    assert (stats["groups"]["api"]["keys"], stats["groups"]["login"]["keys"]) == (3, 1)
    assert stats["keys"] == len(limiter) == 4
    limiter.reset("alice")
    stats = limiter.stats()
    assert (stats["groups"]["api"]["keys"], stats["groups"]["login"]["keys"]) == (2, 0)
    assert stats["keys"] == 2


def test_a_group_of_several_limits_holds_one_state_per_limit(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(
        rules=[rk.Rule("^/api", "api", limits=["10/min", "100/hour"]), rk.Rule("^/login", "login", "3/min")],
        clock=clock,
    )
    for peer in ("alice", "bob"):
        limiter.check(peer, "/api/x")
    limiter.check("alice", "/login")
    stats = limiter.stats()
    assert (stats["groups"]["api"]["keys"], stats["groups"]["login"]["keys"]) == (4, 1)
    assert stats["keys"] == len(limiter) == 5


# --- evictions ---------------------------------------------------------------------------------------------------


def test_evictions_are_counted_in_the_group_that_lost_the_states(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(
        rules=[rk.Rule("^/steady", "steady", "1/min"), rk.Rule("^/flood", "flood", "1/min")],
        max_keys=1000,
        clock=clock,
    )
    assert limiter.allow("busy", "/steady")
    for i in range(20_000):
        limiter.allow(f"one-shot-{i}", "/flood")
        if i % 20 == 0:
            assert not limiter.allow("busy", "/steady")  # still tracked: never evicted
    stats = limiter.stats()
    steady, flood = stats["groups"]["steady"], stats["groups"]["flood"]
    assert steady["evictions"] == 0
    assert steady["keys"] == 1
    assert flood["evictions"] > 0
    assert stats["evictions"] == flood["evictions"]
    assert flood["keys"] + steady["keys"] == stats["keys"] <= 1000
    assert flood["evictions"] + flood["keys"] == 20_000


# --- delayed -----------------------------------------------------------------------------------------------------


def test_delayed_counts_throttles_that_waited(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock)
    for _ in range(5):
        limiter.throttle("alice", "/login")  # 3 at once, then 2 waits
    assert clock.now() == 40.0
    login = limiter.stats()["groups"]["login"]
    assert (login["requests"], login["allowed"], login["refused"], login["delayed"]) == (5, 5, 0, 2)


def test_a_throttle_refused_by_its_timeout_is_not_delayed(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock)
    assert admitted(limiter, "alice", 3, "/login") == 3
    for _ in range(4):
        with pytest.raises(rk.RateLimited):
            limiter.throttle("alice", "/login", timeout=1.0)
    assert clock.now() == 0.0
    assert limiter.stats()["groups"]["login"]["delayed"] == 0


@pytest.mark.asyncio
async def test_athrottles_that_waited_are_delayed(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock)
    await asyncio.gather(*(limiter.athrottle("alice", "/login") for _ in range(5)))
    assert clock.now() == 40.0
    assert limiter.stats()["groups"]["login"]["delayed"] == 2


@pytest.mark.asyncio
async def test_an_athrottle_cancelled_while_waiting_is_not_delayed(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock)
    assert admitted(limiter, "alice", 3, "/login") == 3
    assert limiter.check("alice", "/login").retry_after == 20.0
    waiter = asyncio.create_task(limiter.athrottle("alice", "/login"))
    for _ in range(20):  # until the task has reserved its slot (a refused check changes nothing)
        await asyncio.sleep(0)
        if limiter.check("alice", "/login").retry_after > 20.0:
            break
    assert (limiter.check("alice", "/login").retry_after, clock.now(), waiter.done()) == (40.0, 0.0, False)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert clock.now() == 0.0
    assert limiter.check("alice", "/login").retry_after == 20.0  # the slot was given back
    login = limiter.stats()["groups"]["login"]
    assert login["delayed"] == 0


# --- counters under threads ------------------------------------------------------------------------------------


def test_counters_stay_consistent_under_threads(clock: rk.ManualClock) -> None:
    limiter = two_groups(clock, exempt_peers=["admin"])
    threads, rounds = 8, 500
    paths = ["/api/x", "/login", "/api/y", "/static"]
    routed = {"/api/x": "api", "/api/y": "api", "/login": "login"}
    sent = [{"api": 0, "login": 0, "exempt": 0} for _ in range(threads)]
    reads: list[int] = []

    def read() -> None:  # stats() while the workers decide: one shard at a time, never a deadlock
        reads.append(len(limiter.stats()["groups"]))

    def work(i: int) -> None:
        for n in range(rounds):
            path = paths[n % len(paths)]
            peer = "admin" if n % 7 == 0 else f"peer-{(i + n) % 13}"
            limiter.allow(peer, path)
            group = routed.get(path)
            if group is not None:
                sent[i]["exempt" if peer == "admin" else group] += 1

    run_threads_while(threads, work, read)
    assert reads
    assert set(reads) == {2}
    stats = limiter.stats()
    for name in ("api", "login"):
        group = stats["groups"][name]
        assert group["requests"] == sum(s[name] for s in sent)
        assert group["requests"] == group["allowed"] + group["refused"]
        assert group["allowed"] > 0
    assert stats["groups"]["api"]["exempt"] + stats["groups"]["login"]["exempt"] == sum(s["exempt"] for s in sent)
    assert stats["keys"] == len(limiter) == stats["groups"]["api"]["keys"] + stats["groups"]["login"]["keys"]
