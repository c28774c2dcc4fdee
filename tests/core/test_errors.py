"""Bad arguments raise ``TypeError`` / ``ValueError`` whose message names the offending field and value."""

from __future__ import annotations

import traceback
from typing import Any, Callable

import pytest
import ratekeeper as rk


def shown(error: BaseException) -> str:
    """The error as a traceback prints it: the message plus any notes."""
    return "".join(traceback.format_exception_only(type(error), error))


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter("3/60s", clock=clock)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda lim: lim.check(1), "peer"),
        (lambda lim: lim.check(None), "peer"),
        (lambda lim: lim.allow(b"alice"), "peer"),
        (lambda lim: lim.check("alice", 42), "path"),
        (lambda lim: lim.allow("alice", b"/a"), "path"),
        (lambda lim: lim.throttle(7), "peer"),
    ],
)
def test_non_str_peer_or_path_is_a_type_error_naming_the_field(
    limiter: rk.Limiter, call: Callable[[rk.Limiter], Any], field: str
) -> None:
    with pytest.raises(TypeError) as info:
        call(limiter)
    assert field in shown(info.value)


@pytest.mark.parametrize("text", ["10/fortnight", "ten/min", "0/min", ""])
def test_bad_rate_string_is_a_value_error_quoting_it(text: str) -> None:
    with pytest.raises(ValueError, match="rate") as info:
        rk.Rate(text)
    assert f'"{text}"' in str(info.value)


@pytest.mark.parametrize("text", ["10/fortnight", "ten/min", "0/min", ""])
def test_bad_rate_string_in_limiter_is_a_value_error_quoting_it(text: str) -> None:
    with pytest.raises(ValueError, match="rate") as info:
        rk.Limiter(text)
    assert f'"{text}"' in str(info.value)


@pytest.mark.parametrize("cost", [0, -1])
@pytest.mark.parametrize("method", ["check", "allow", "throttle"])
def test_non_positive_cost_is_a_value_error(limiter: rk.Limiter, method: str, cost: int) -> None:
    with pytest.raises(ValueError, match=rf"cost.*{cost}"):
        getattr(limiter, method)("alice", cost=cost)


@pytest.mark.parametrize("method", ["check", "allow", "throttle"])
def test_fractional_cost_is_a_type_error(limiter: rk.Limiter, method: str) -> None:
    with pytest.raises(TypeError, match="cost"):
        getattr(limiter, method)("alice", cost=1.5)


def test_bad_cost_changes_no_state(limiter: rk.Limiter) -> None:
    with pytest.raises(ValueError, match="cost"):
        limiter.check("alice", cost=0)
    assert len(limiter) == 0
    assert limiter.check("alice").remaining == 2


def test_invalid_rule_pattern_is_a_value_error_quoting_it() -> None:
    with pytest.raises(ValueError, match="pattern") as info:
        rk.Rule("(", "g", "1/s")
    assert '"("' in str(info.value)


def test_invalid_exempt_path_pattern_is_a_value_error_naming_its_index() -> None:
    with pytest.raises(ValueError, match=r"exempt_paths\[1\]"):
        rk.Limiter("1/s", exempt_paths=["^/ok", "("])


@pytest.mark.parametrize(
    "make",
    [
        lambda: rk.Limiter("1/s", burst=0),
        lambda: rk.Rule("^/a", "g", "1/s", burst=0),
        lambda: rk.Limiter("1/s", burst=-3),
    ],
)
def test_non_positive_burst_is_a_value_error(make: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=r"burst.*-?\d"):
        make()


def test_fractional_burst_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="burst"):
        rk.Limiter("1/s", burst=1.5)


@pytest.mark.parametrize(
    "make", [lambda: rk.Limiter("1/s", algorithm="nope"), lambda: rk.Rule("^/a", "g", "1/s", algorithm="nope")]
)
def test_unknown_algorithm_is_a_value_error_quoting_it(make: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=r"algorithm.*nope"):
        make()


@pytest.mark.parametrize("max_keys", [0, -1])
def test_non_positive_max_keys_is_a_value_error(max_keys: int) -> None:
    with pytest.raises(ValueError, match=rf"max_keys.*{max_keys}"):
        rk.Limiter("1/s", max_keys=max_keys)


def test_rule_given_as_tuple_is_a_type_error_naming_its_index() -> None:
    with pytest.raises(TypeError, match=r"rules\[0\].*tuple"):
        rk.Limiter(rules=[("^/a", "g", "1/s")])


@pytest.mark.parametrize("field", ["exempt_peers", "exempt_paths"])
def test_single_str_instead_of_list_is_a_type_error(field: str) -> None:
    with pytest.raises(TypeError, match=field):
        rk.Limiter("1/s", **{field: "admin"})


def test_non_str_exempt_peer_is_a_type_error_naming_its_index() -> None:
    with pytest.raises(TypeError, match=r"exempt_peers\[1\]"):
        rk.Limiter("1/s", exempt_peers=["admin", 3])


def test_limiter_without_rate_or_rules_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="rate"):
        rk.Limiter()


def test_one_group_with_two_different_rates_is_a_value_error() -> None:
    rules = [rk.Rule("^/a", "g", "1/s"), rk.Rule("^/b", "g", "2/s")]
    with pytest.raises(ValueError, match=r"rules\[1\]\.group"):
        rk.Limiter(rules=rules)


def test_empty_group_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="group"):
        rk.Rule("^/a", "", "1/s")


def test_clock_of_the_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="clock"):
        rk.Limiter("1/s", clock=3)


@pytest.mark.parametrize("timeout", [-1, -0.001, float("nan")])
def test_negative_or_nan_timeout_is_a_value_error(limiter: rk.Limiter, timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        limiter.throttle("alice", timeout=timeout)


@pytest.mark.asyncio
async def test_negative_timeout_is_a_value_error_in_athrottle(limiter: rk.Limiter) -> None:
    with pytest.raises(ValueError, match="timeout"):
        await limiter.athrottle("alice", timeout=-1)


@pytest.mark.parametrize(("count", "per", "field"), [(0, 1.0, "count"), (10, 0.0, "per"), (10, -1.0, "per")])
def test_rate_with_non_positive_count_or_period_is_a_value_error(count: int, per: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        rk.Rate(count, per=per)


def test_manual_clock_cannot_go_backwards(clock: rk.ManualClock) -> None:
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(-1)
    assert clock.now() == 0.0
