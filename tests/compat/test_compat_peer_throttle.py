"""Arweave's peer throttle (``ar_rate_limiter``, an Erlang gen_server) through ``ratekeeper.compat.peer_throttle``.

ar_rate_limiter's eunit tests are ported one by one, with their names. Their timing runs on a ManualClock: where
the original asserts a call was "instant" (< 100 ms), the clock must not have moved; where it asserts a delay of
at least 1000 ms, the clock must have moved by at least 1 s (a wait on a ManualClock advances it).
"""

from __future__ import annotations

from typing import Any

import pytest
import ratekeeper as rk
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue
from ratekeeper.compat import peer_throttle, throttle_threshold


def instant(lim: rk.Limiter, clock: rk.ManualClock, peer: str, path: str, times: int = 1) -> None:
    """``times`` throttles, each admitted without waiting."""
    for _ in range(times):
        before = clock.now()
        decision = lim.throttle(peer, path)
        assert decision.allowed
        assert clock.now() == before


# --- start_link/1 -----------------------------------------------------------------------------------


def test_start_link_basic(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_period": 30000, "throttle_rpm_by_path": ("api", 60)}, clock=clock)
    assert isinstance(lim, rk.Limiter)
    assert lim.enabled
    assert lim.groups == ["api"]
    assert lim.check("peer1", "/anything").group == "api"  # a single (type, rpm) covers every path


def test_start_link_with_exemptions(clock: rk.ManualClock) -> None:
    lim = peer_throttle(
        {"throttle_exempt_peers": [b"trusted-peer"], "throttle_exempt_paths": [b"/health", b"/metrics"]}, clock=clock
    )
    assert isinstance(lim, rk.Limiter)
    assert lim.enabled
    instant(lim, clock, "trusted-peer", "/api/data", 100)
    instant(lim, clock, "peer1", "/health", 100)


# --- throttle/3 -------------------------------------------------------------------------------------


def test_throttle_exempt_peer(clock: rk.ManualClock) -> None:
    opts = {"throttle_exempt_peers": [b"trusted-peer"], "throttle_rpm_by_path": ("api", 60)}
    lim = peer_throttle(opts, clock=clock)
    instant(lim, clock, "trusted-peer", "/api/data", 100)  # far past the 24 a peer gets
    assert lim.throttle("trusted-peer", "/api/data").group is None


def test_throttle_exempt_path(clock: rk.ManualClock) -> None:
    opts = {"throttle_exempt_paths": [b"/health", b"/metrics"], "throttle_rpm_by_path": ("default", 60)}
    lim = peer_throttle(opts, clock=clock)
    instant(lim, clock, "peer1", "/health", 100)
    instant(lim, clock, "peer1", "/metrics/node", 100)  # regexes are searched, as ar_rate_limiter does
    assert lim.check("peer1", "/api/data").group == "default"


def test_throttle_under_limit(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_period": 30000, "throttle_rpm_by_path": ("api", 60)}, clock=clock)
    instant(lim, clock, "peer1", "/api/data", 10)


def test_throttle_over_limit(clock: rk.ManualClock) -> None:
    # 10 requests per minute = 5 per 30 s; 80 % of that = 4 requests.
    lim = peer_throttle({"throttle_period": 30000, "throttle_rpm_by_path": ("api", 10)}, clock=clock)
    instant(lim, clock, "peer1", "/api/data", 4)
    start = clock.now()
    assert lim.throttle("peer1", "/api/data").allowed
    assert clock.now() - start >= 1.0


def test_throttle_different_peers(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_rpm_by_path": ("api", 60)}, clock=clock)
    for peer in ("peer1", "peer2", "peer3"):
        instant(lim, clock, peer, "/api/data")
    for peer in ("peer1", "peer2", "peer3"):  # each its own 24
        instant(lim, clock, peer, "/api/data", 23)


def test_throttle_no_server(clock: rk.ManualClock) -> None:
    lim = peer_throttle({}, clock=clock)
    instant(lim, clock, "peer1", "/api/data", 100)
    assert lim.throttle("peer1", "/api/data").group is None
    assert lim.groups == []


# --- off/0 and on/0 ---------------------------------------------------------------------------------


def test_off_disables_limiting(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_rpm_by_path": ("api", 60)}, clock=clock)
    lim.off()
    assert not lim.enabled
    instant(lim, clock, "peer1", "/api/data", 100)


def test_on_enables_limiting(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_rpm_by_path": ("api", 60)}, clock=clock)
    lim.off()
    lim.on()
    assert lim.enabled
    instant(lim, clock, "peer1", "/api/data", 4)
    instant(lim, clock, "peer1", "/api/data", 20)  # up to the threshold, 24
    lim.throttle("peer1", "/api/data")  # limiting is back: the 25th waits
    assert clock.now() >= 30.0


def test_on_off_toggle(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_rpm_by_path": ("api", 60)}, clock=clock)
    lim.off()
    lim.on()
    lim.off()
    assert not lim.enabled
    instant(lim, clock, "peer1", "/api/data", 50)  # while off, nothing is counted
    lim.on()
    assert lim.enabled
    instant(lim, clock, "peer1", "/api/data", 24)
    assert not lim.check("peer1", "/api/data").allowed


# --- the threshold ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rpm", "period_ms", "threshold"),
    [
        (60, 30_000, 24),  # ar_rate_limiter's example: half of 60 is 30, 80 % of it 24
        (10, 30_000, 4),  # ar_rate_limiter's over-limit test
        (100, 30_000, 40),
        (120, 30_000, 48),
        (1, 30_000, 1),  # never below 1
        (100, 60_000, 80),
        (60, 1_000, 1),
    ],
)
def test_threshold_table(rpm: int, period_ms: int, threshold: int) -> None:
    assert throttle_threshold(rpm, period_ms) == threshold


@pytest.mark.parametrize(("rpm", "threshold"), [(60, 24), (10, 4), (120, 48)])
def test_threshold_admitted_immediately_then_the_next_waits_for_the_window(
    clock: rk.ManualClock, rpm: int, threshold: int
) -> None:
    lim = peer_throttle({"throttle_rpm_by_path": ("api", rpm)}, clock=clock)
    instant(lim, clock, "peer1", "/api/data", threshold)
    assert not lim.check("peer1", "/api/data").allowed
    lim.throttle("peer1", "/api/data")
    # Admitted once the first timestamp (t=0) leaves the 30 s window: ar_rate_limiter retries every second.
    assert 30.0 <= clock.now() <= 31.0


def test_sliding_log_frees_only_what_left_the_window(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_rpm_by_path": ("api", 60)}, clock=clock)
    instant(lim, clock, "p", "/api", 12)  # t=0
    clock.advance(10)
    instant(lim, clock, "p", "/api", 12)  # t=10: 24 in the window
    clock.advance(10)
    lim.throttle("p", "/api")  # t=20: waits for the t=0 batch to leave
    assert 30.0 <= clock.now() <= 31.0
    instant(lim, clock, "p", "/api", 11)  # 12 (t=10) + 1 + 11 = 24
    assert not lim.check("p", "/api").allowed


def test_custom_period(clock: rk.ManualClock) -> None:
    # rpm 60 over 10 s: 10 per window, 80 % -> 8.
    lim = peer_throttle({"throttle_period": 10_000, "throttle_rpm_by_path": ("api", 60)}, clock=clock)
    instant(lim, clock, "p", "/x", 8)
    lim.throttle("p", "/x")
    assert 10.0 <= clock.now() <= 11.0


@pytest.mark.asyncio
async def test_athrottle_waits_too(clock: rk.ManualClock) -> None:
    lim = peer_throttle({"throttle_rpm_by_path": ("api", 10)}, clock=clock)
    for _ in range(4):
        await lim.athrottle("p", "/x")
    assert clock.now() == 0.0
    await lim.athrottle("p", "/x")
    assert 30.0 <= clock.now() <= 31.0


# --- routing by path --------------------------------------------------------------------------------


def test_rpm_by_path_routes_by_type_in_order(clock: rk.ManualClock) -> None:
    opts: dict[Any, Any] = {
        b"throttle_rpm_by_path": {
            b"/api/v1/.*": (b"api_v1", 10),
            "/api/v2/.*": ("api_v2", 10),
            b"/tx/.*": ("transactions", 10),
            b".*": ("default", 100),
        },
        "port": 1984,  # the rest of the node's options are ignored
    }
    lim = peer_throttle(opts, clock=clock)
    assert lim.groups == ["api_v1", "api_v2", "transactions", "default"]
    assert lim.check("p", "/api/v1/x").group == "api_v1"
    assert lim.check("p", "/api/v2/query").group == "api_v2"
    assert lim.check("p", "/tx/abc").group == "transactions"
    assert lim.check("p", "/graphql").group == "default"
    instant(lim, clock, "p", "/api/v1/x", 3)  # the check above was the first of 4
    assert not lim.check("p", "/api/v1/y").allowed  # per (peer, type)
    instant(lim, clock, "p", "/api/v2/x", 3)  # another type, its own window


def test_paths_of_one_type_share_its_window(clock: rk.ManualClock) -> None:
    opts = {"throttle_rpm_by_path": {"^/a": ("shared", 10), "^/b": ("shared", 10)}}
    lim = peer_throttle(opts, clock=clock)
    instant(lim, clock, "p", "/a", 2)
    instant(lim, clock, "p", "/b", 2)
    assert not lim.check("p", "/a").allowed
    assert lim.check("p", "/c").group is None  # no catch-all: not limited


# --- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opts", "kind", "message"),
    [
        ({"throttle_period": "30s"}, TypeError, "throttle_period: must be an int, got str"),
        ({"throttle_period": 0}, ValueError, "throttle_period: must be a positive int, got 0"),
        ({"throttle_rpm_by_path": ("api", 0)}, ValueError, "throttle_rpm_by_path[1]: must be a positive int"),
        ({"throttle_rpm_by_path": ("api",)}, TypeError, "throttle_rpm_by_path: must be a (type, rpm) pair"),
        ({"throttle_rpm_by_path": {"/a": 60}}, TypeError, "throttle_rpm_by_path['/a']: must be a (type, rpm) pair"),
        ({"throttle_rpm_by_path": {"/a": (1, 60)}}, TypeError, "throttle_rpm_by_path['/a'][0]: must be a str or bytes"),
        (
            {"throttle_rpm_by_path": {"(": ("a", 60)}},
            ValueError,
            "throttle_rpm_by_path['(']: \"(\" is not a valid regex",
        ),
        (
            {"throttle_rpm_by_path": {"/a": ("t", 60), "/b": ("t", 30)}},
            ValueError,
            "throttle_rpm_by_path['/b']: type 't' already has 60 rpm from throttle_rpm_by_path['/a']",
        ),
        ({"throttle_exempt_peers": b"peer"}, TypeError, "throttle_exempt_peers: must be a list of str or bytes"),
        ({"throttle_exempt_paths": ["("]}, ValueError, "throttle_exempt_paths[0]: "),
        ({"throttle_rpm": ("api", 60)}, ValueError, "throttle_rpm: unknown option"),
    ],
)
def test_bad_options_are_named(opts: dict[str, Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind) as info:
        peer_throttle(opts)
    assert isinstance(info.value, InvalidArgument)
    assert str(info.value).startswith(message), str(info.value)


def test_errors_have_a_structured_loc() -> None:
    with pytest.raises(InvalidValue) as period:
        peer_throttle({"throttle_period": 0})
    assert (period.value.loc, period.value.msg) == (("throttle_period",), "must be a positive int, got 0")
    with pytest.raises(InvalidType) as rpm:
        peer_throttle({"throttle_rpm_by_path": {"/a": ("t", "60")}})
    assert rpm.value.loc == ("throttle_rpm_by_path['/a']", 1)
    with pytest.raises(InvalidValue) as exempt:  # the core's error, moved to the option
        peer_throttle({"throttle_exempt_paths": [b"/ok", b"("]})
    assert exempt.value.loc == ("throttle_exempt_paths", 1)
    with pytest.raises(InvalidValue) as regex:
        peer_throttle({"throttle_rpm_by_path": {"(": ("a", 60)}})
    assert regex.value.loc == ("throttle_rpm_by_path['(']",)
