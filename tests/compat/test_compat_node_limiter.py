"""The Arweave node's hybrid HTTP limiter through ``ratekeeper.compat.node_limiter``.

Per (peer, group): a concurrency limit refuses first; otherwise a sliding window admits; past it,
leaky-bucket tokens admit (``leaky_tick_reduction`` drained every ``leaky_tick_interval``); once they are
gone the request is refused. The handler may give tokens back (manual reduction) unless the group
disables it.
"""

from __future__ import annotations

from typing import Any

import pytest
import ratekeeper as rk
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue
from ratekeeper.compat import NODE_GROUPS, node_limiter

ROUTES = {"^/metrics$": "metrics", "^/chunk/": "chunk", "^/data_sync_record": "data_sync_record", "": "general"}


def admitted(lim: rk.Limiter, peer: str, path: str, n: int) -> int:
    return sum(lim.allow(peer, path) for _ in range(n))


def hybrid(clock: rk.ManualClock, **settings: Any) -> rk.Limiter:
    """The general group, routed from every path, with ``settings`` (without the prefix)."""
    return node_limiter({f"general.{key}": value for key, value in settings.items()}, {"": "general"}, clock=clock)


# --- configuration ----------------------------------------------------------------------------------


def test_the_nodes_default_groups_and_budgets(clock: rk.ManualClock) -> None:
    lim = node_limiter({}, ROUTES, clock=clock)
    assert lim.groups == ["metrics", "chunk", "data_sync_record", "general"]
    # No sliding window by default (limit 0): the leaky bucket's capacity is the whole budget.
    assert admitted(lim, "peer", "/metrics", 5) == 2
    assert admitted(lim, "peer", "/data_sync_record/1", 30) == 20
    assert admitted(lim, "peer", "/info", 500) == 450
    assert admitted(lim, "peer", "/chunk/1", 7000) == 6000


def test_every_node_group_admits_its_default_leaky_limit(clock: rk.ManualClock) -> None:
    # The node's table of leaky_limit defaults, checked through the limiter each group gets.
    lim = node_limiter({}, {f"^/{group}$": group for group in NODE_GROUPS}, clock=clock)
    assert {group: admitted(lim, "peer", f"/{group}", 6_100) for group in NODE_GROUPS} == {
        "general": 450,
        "chunk": 6000,
        "data_sync_record": 20,
        "recent_hash_list_diff": 120,
        "block_index": 10,
        "wallet_list": 10,
        "get_vdf": 90,
        "get_vdf_session": 30,
        "get_previous_vdf_session": 30,
        "metrics": 2,
    }


@pytest.mark.parametrize("prefix", ["", "http_api.limiter."])
def test_keys_with_or_without_prefix(clock: rk.ManualClock, prefix: str) -> None:
    lim = node_limiter({f"{prefix}metrics.leaky_limit": 5}, {"^/metrics$": "metrics"}, clock=clock)
    assert admitted(lim, "peer", "/metrics", 10) == 5


def test_routes_of_one_group_share_its_state(clock: rk.ManualClock) -> None:
    lim = node_limiter(
        {"block_index.leaky_limit": 3}, {"^/block_index": "block_index", "^/bi": "block_index"}, clock=clock
    )
    assert admitted(lim, "peer", "/block_index", 2) == 2
    assert admitted(lim, "peer", "/bi/2", 2) == 1
    assert lim.check("peer", "/unrouted").group is None


def test_exempt_peers(clock: rk.ManualClock) -> None:
    lim = node_limiter({"metrics.leaky_limit": 1}, {"^/metrics$": "metrics"}, exempt_peers=["127.0.0.1"], clock=clock)
    assert admitted(lim, "127.0.0.1", "/metrics", 10) == 10
    assert admitted(lim, "peer", "/metrics", 10) == 1


def test_peers_are_independent(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, sliding_window_limit=2, leaky_limit=3)
    assert admitted(lim, "a", "/x", 10) == 5
    assert admitted(lim, "b", "/x", 10) == 5


# --- order of precedence ----------------------------------------------------------------------------


def test_concurrency_refuses_first_even_when_tokens_remain(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, sliding_window_limit=10, leaky_limit=10, concurrency_limit=2)
    with lim.concurrent("peer", "/x"), lim.concurrent("peer", "/x"):
        with pytest.raises(rk.RateLimited), lim.concurrent("peer", "/x"):
            pytest.fail("a third request in flight must be refused")
        with lim.concurrent("other", "/x"):  # per peer
            pass
    with lim.concurrent("peer", "/x"):  # both released: in flight again
        pass


def test_concurrency_defaults_to_leaky_limit(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, leaky_limit=100, sliding_window_limit=100)
    with lim.concurrent("p", "/x"), lim.concurrent("p", "/x"):
        pass
    limited = hybrid(clock, leaky_limit=1, sliding_window_limit=100)
    with limited.concurrent("p", "/x"), pytest.raises(rk.RateLimited), limited.concurrent("p", "/x"):
        pytest.fail("leaky_limit 1 means one request in flight")


def test_sliding_window_then_leaky_tokens_then_refused(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, sliding_window_limit=2, sliding_window_duration=1000, leaky_limit=3)
    assert admitted(lim, "peer", "/x", 2) == 2  # the sliding window
    assert admitted(lim, "peer", "/x", 3) == 3  # past it, the leaky tokens
    refused = lim.check("peer", "/x")
    assert not refused.allowed
    assert refused.group == "general"


def test_sliding_window_admissions_take_no_leaky_tokens(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, sliding_window_limit=2, sliding_window_duration=1000, leaky_limit=3)
    for _ in range(3):
        assert admitted(lim, "peer", "/x", 2) == 2
        clock.advance(2)  # two windows later the window is empty again
    assert admitted(lim, "peer", "/x", 10) == 5  # the window's 2, then all 3 tokens


def test_a_refusal_consumes_nothing(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, sliding_window_limit=2, sliding_window_duration=1000, leaky_limit=3)
    assert admitted(lim, "peer", "/x", 20) == 5
    clock.advance(2)
    assert admitted(lim, "peer", "/x", 20) == 2  # the window again; the leaky bucket is still full


def test_without_sliding_window_only_leaky_tokens(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, sliding_window_limit=0, leaky_limit=3)
    assert admitted(lim, "peer", "/x", 10) == 3


# --- leaky ticks ------------------------------------------------------------------------------------


def test_leaky_ticks_drain_tick_reduction_every_interval(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, leaky_limit=3, leaky_tick_interval=10_000, leaky_tick_reduction=1)
    assert admitted(lim, "peer", "/x", 5) == 3
    clock.advance(9.999)
    assert not lim.allow("peer", "/x")
    clock.advance(0.001)  # t=10: one token drained
    assert admitted(lim, "peer", "/x", 5) == 1
    clock.advance(20)  # t=30: two more ticks
    assert admitted(lim, "peer", "/x", 5) == 2


def test_leaky_tokens_drain_in_ticks_not_continuously(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, leaky_limit=3)  # 3 drained every 30 s (the node's defaults)
    assert admitted(lim, "peer", "/x", 5) == 3
    clock.advance(15)  # half an interval: no tick yet
    assert not lim.allow("peer", "/x")
    clock.advance(15)
    assert admitted(lim, "peer", "/x", 5) == 3


def test_tick_reduction_above_the_limit_empties_the_bucket(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, leaky_limit=2, leaky_tick_interval=1000, leaky_tick_reduction=10)
    assert admitted(lim, "peer", "/x", 5) == 2
    clock.advance(1)
    assert admitted(lim, "peer", "/x", 5) == 2


# --- manual reduction -------------------------------------------------------------------------------


def test_manual_reduction_gives_leaky_tokens_back(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, leaky_limit=3)
    assert admitted(lim, "peer", "/x", 5) == 3
    assert lim.reduce("peer", "/x") is True
    assert admitted(lim, "peer", "/x", 5) == 1
    assert lim.reduce("peer", "/x", n=2) is True
    assert admitted(lim, "peer", "/x", 5) == 2
    assert admitted(lim, "other", "/x", 5) == 3  # the other peer's bucket was untouched


def test_manual_reduction_after_the_window_gives_back_only_leaky_tokens(clock: rk.ManualClock) -> None:
    # A defect once. The node limiter's design: "manual reduction reduces the leaky tokens", so with the window and
    # the bucket both full, reducing 2 lets exactly 2 more in; the window's admissions stay counted.
    lim = hybrid(clock, sliding_window_limit=5, sliding_window_duration=1000, leaky_limit=5)
    assert admitted(lim, "peer", "/x", 5) == 5  # the sliding window
    assert admitted(lim, "peer", "/x", 5) == 5  # the leaky tokens
    assert not lim.allow("peer", "/x")
    assert lim.reduce("peer", "/x", n=2) is True
    assert admitted(lim, "peer", "/x", 20) == 2
    clock.advance(2)  # two windows later the window is empty again; the bucket has not ticked (30 s)
    assert admitted(lim, "peer", "/x", 20) == 5


def test_manual_reduction_disabled(clock: rk.ManualClock) -> None:
    lim = hybrid(clock, leaky_limit=3, is_manual_reduction_disabled=True)
    assert admitted(lim, "peer", "/x", 5) == 3
    assert lim.reduce("peer", "/x") is False
    assert lim.reduce("peer", "/x", n=3) is False
    assert not lim.allow("peer", "/x")


def test_manual_reduction_of_an_unrouted_path(clock: rk.ManualClock) -> None:
    lim = node_limiter({}, {"^/metrics$": "metrics"}, clock=clock)
    assert lim.reduce("peer", "/elsewhere") is False


# --- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "routes", "kind", "message"),
    [
        ({}, {"^/x": "gossip"}, ValueError, "routes['^/x']: unknown group 'gossip' (groups: general, chunk"),
        ({}, {"^/x": 1}, TypeError, "routes['^/x']: must be a group name (str), got int"),
        ({}, {"(": "general"}, ValueError, "routes['(']: \"(\" is not a valid regex"),
        ({"gossip.leaky_limit": 1}, {}, ValueError, "gossip.leaky_limit: unknown group 'gossip'"),
        (
            {"general.leaky": 1},
            {},
            ValueError,
            "general.leaky: unknown setting 'leaky' (settings: sliding_window_limit",
        ),
        ({"leaky_limit": 1}, {}, ValueError, "leaky_limit: not a limiter setting"),
        ({"general.leaky_limit": "5"}, {}, TypeError, "general.leaky_limit: must be an int, got str"),
        ({"general.leaky_limit": True}, {}, TypeError, "general.leaky_limit: must be an int, got bool"),
        ({"general.leaky_limit": 0}, {}, ValueError, "general.leaky_limit: must be at least 1, got 0"),
        ({"general.sliding_window_limit": -1}, {}, ValueError, "general.sliding_window_limit: must be at least 0"),
        ({"general.sliding_window_duration": 0}, {}, ValueError, "general.sliding_window_duration: must be at least 1"),
        ({"general.leaky_tick_interval": 0}, {}, ValueError, "general.leaky_tick_interval: must be at least 1"),
        ({"general.concurrency_limit": 0}, {}, ValueError, "general.concurrency_limit: must be at least 1"),
        (
            {"http_api.limiter.chunk.sliding_window_timestamp_cleanup_interval": 0},
            {},
            ValueError,
            "http_api.limiter.chunk.sliding_window_timestamp_cleanup_interval: must be at least 1",
        ),
        (
            {"general.sliding_window_timestamp_cleanup_expiry": 1.5},
            {},
            TypeError,
            "general.sliding_window_timestamp_cleanup_expiry: must be an int, got float",
        ),
        (
            {"general.is_manual_reduction_disabled": 1},
            {},
            TypeError,
            "general.is_manual_reduction_disabled: must be a bool, got int",
        ),
        (
            {"general.leaky_limit": 1, "http_api.limiter.general.leaky_limit": 2},
            {},
            ValueError,
            "http_api.limiter.general.leaky_limit: given twice (also as general.leaky_limit)",
        ),
    ],
)
def test_bad_settings_are_named(
    config: dict[str, Any], routes: dict[str, Any], kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind) as info:
        node_limiter(config, routes)
    assert isinstance(info.value, InvalidArgument)
    assert str(info.value).startswith(message), str(info.value)


def test_errors_have_a_structured_loc() -> None:
    with pytest.raises(InvalidType) as setting:
        node_limiter({"http_api.limiter.general.leaky_limit": "5"}, {})
    assert (setting.value.loc, setting.value.msg) == (
        ("http_api.limiter.general.leaky_limit",),
        "must be an int, got str",
    )
    with pytest.raises(InvalidValue) as regex:  # the core's error about the pattern, moved to the route
        node_limiter({}, {"^/ok": "general", "(": "chunk"})
    assert regex.value.loc == ("routes['(']",)
    assert regex.value.msg.startswith('"(" is not a valid regex')
    with pytest.raises(InvalidType) as peers:  # the core's error, at the argument of the same name
        node_limiter({}, {}, exempt_peers=["a", 1])  # type: ignore[list-item]
    assert peers.value.loc == ("exempt_peers", 1)


def test_a_core_error_about_a_setting_names_the_setting() -> None:
    # A tick interval of 20 years is not a rate the core takes: the error names the setting.
    with pytest.raises(InvalidValue) as info:
        node_limiter({"general.leaky_tick_interval": 20 * 365 * 86_400_000}, {"": "general"})
    assert info.value.loc == ("general.leaky_tick_interval",)


def test_cleanup_settings_are_accepted(clock: rk.ManualClock) -> None:
    lim = hybrid(
        clock,
        leaky_limit=2,
        sliding_window_timestamp_cleanup_interval=60_000,
        sliding_window_timestamp_cleanup_expiry=60_000,
    )
    assert admitted(lim, "peer", "/x", 5) == 2
