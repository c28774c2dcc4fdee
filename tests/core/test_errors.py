"""Errors of the core: bad arguments raise ``TypeError`` / ``ValueError`` whose message names the offending
field and value, and those errors keep their structure: ``rk.InvalidValue`` (a ValueError) and
``rk.InvalidType`` (a TypeError) with the place of the mistake as ``loc`` (``("rules", 1, "group")``) and
what is wrong as ``msg``; ``str(error)`` is built from them (``rules[1].group: ...``), and both survive pickling.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import ratekeeper as rk
from ratekeeper._errors import format_loc


def raised(make: Callable[[], Any]) -> rk.InvalidArgument:
    with pytest.raises(rk.InvalidArgument) as info:
        make()
    return info.value


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
    """3 per minute by default, and a group ``api`` for the calls that name one."""
    return rk.Limiter("3/60s", rules=[rk.Rule("^/api", "api", "10/min")], clock=clock)


def test_the_classes_are_value_and_type_errors() -> None:
    assert issubclass(rk.InvalidValue, ValueError)
    assert issubclass(rk.InvalidValue, rk.InvalidArgument)
    assert issubclass(rk.InvalidType, TypeError)
    assert issubclass(rk.InvalidType, rk.InvalidArgument)


# --- Rule and Limiter construction -----------------------------------------------------------------------------


def test_a_bad_rule_pattern_names_the_pattern() -> None:
    error = raised(lambda: rk.Rule("^/a(", "g", "1/s"))
    assert isinstance(error, rk.InvalidValue)
    assert isinstance(error, ValueError)
    assert error.loc == ("pattern",)
    assert "^/a(" in error.msg
    assert str(error) == f"pattern: {error.msg}"


@pytest.mark.parametrize(
    ("make", "kind", "loc"),
    [
        (lambda: rk.Rule("", "g", "10/fortnight"), rk.InvalidValue, ("rate",)),
        (lambda: rk.Rule("", "g", "1/s", burst=0), rk.InvalidValue, ("burst",)),
        (lambda: rk.Rule("", "g", "1/s", algorithm="nope"), rk.InvalidValue, ("algorithm",)),
        (lambda: rk.Rule("", "g", "1/s", policy="nope"), rk.InvalidValue, ("policy",)),
        (lambda: rk.Rule("", "", "1/s"), rk.InvalidValue, ("group",)),
        (lambda: rk.Rule(1, "g", "1/s"), rk.InvalidType, ("pattern",)),
        (lambda: rk.Rule("", "g", limits=["1/s", "10/fortnight"]), rk.InvalidValue, ("limits", 1)),
        (lambda: rk.Rule("", "g", limits=["1/s", 3]), rk.InvalidType, ("limits", 1)),
        (lambda: rk.Limiter("10/fortnight"), rk.InvalidValue, ("rate",)),
        (lambda: rk.Limiter("1/s", burst=0), rk.InvalidValue, ("burst",)),
        (lambda: rk.Limiter("1/s", algorithm="nope"), rk.InvalidValue, ("algorithm",)),
        (lambda: rk.Limiter("1/s", max_keys=0), rk.InvalidValue, ("max_keys",)),
        (lambda: rk.Limiter("1/s", exempt_paths=["^/ok", "("]), rk.InvalidValue, ("exempt_paths", 1)),
        (lambda: rk.Limiter("1/s", exempt_peers=["a", 3]), rk.InvalidType, ("exempt_peers", 1)),
        (lambda: rk.Limiter("1/s", exempt_peers="admin"), rk.InvalidType, ("exempt_peers",)),
        (lambda: rk.Limiter("1/s", clock=1.0), rk.InvalidType, ("clock",)),
        (lambda: rk.Limiter("1/s", quotas=rk.Quotas(42)), rk.InvalidType, ("provider",)),
        (lambda: rk.Limit("1/s", concurrency=2), rk.InvalidValue, ()),
    ],
)
def test_construction_errors_carry_their_loc(make: Callable[[], Any], kind: type, loc: tuple[Any, ...]) -> None:
    error = raised(make)
    assert type(error) is kind
    assert error.loc[: len(loc)] == loc
    if loc:
        assert str(error).startswith(format_loc(loc))


def test_a_rule_error_in_a_limiter_starts_with_the_rules_index() -> None:
    ok = rk.Rule("^/a", "a", "1/s")
    twice = raised(lambda: rk.Limiter(rules=[ok, rk.Rule("^/b", "a", "2/s")]))
    assert isinstance(twice, rk.InvalidValue)
    assert twice.loc[:2] == ("rules", 1)
    assert str(twice).startswith("rules[1]")
    not_a_rule = raised(lambda: rk.Limiter(rules=[ok, ("^/b", "b", "1/s")]))
    assert isinstance(not_a_rule, rk.InvalidType)
    assert not_a_rule.loc[:2] == ("rules", 1)


def test_a_limiter_without_rate_or_rules_is_an_invalid_value() -> None:
    assert isinstance(raised(rk.Limiter), rk.InvalidValue)


# --- calls -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "kind", "loc"),
    [
        (lambda lim: lim.check(1.0), rk.InvalidType, ("peer",)),
        (lambda lim: lim.allow(b"alice"), rk.InvalidType, ("peer",)),
        (lambda lim: lim.check("alice", 42), rk.InvalidType, ("path",)),
        (lambda lim: lim.check("p", cost=0), rk.InvalidValue, ("cost",)),
        (lambda lim: lim.allow("p", cost=-1), rk.InvalidValue, ("cost",)),
        (lambda lim: lim.check("p", cost=1.5), rk.InvalidType, ("cost",)),
        (lambda lim: lim.throttle("p", cost=0), rk.InvalidValue, ("cost",)),
        (lambda lim: lim.throttle("p", timeout=-1.0), rk.InvalidValue, ("timeout",)),
        (lambda lim: lim.check("p", group=3), rk.InvalidType, ("group",)),
        (lambda lim: lim.update_rule("api", burst=0), rk.InvalidValue, ("burst",)),
        (lambda lim: lim.update_rule("api", rate="10/fortnight"), rk.InvalidValue, ("rate",)),
        (lambda lim: lim.set_quota("alice", "api", "10/fortnight"), rk.InvalidValue, ("rate",)),
    ],
)
def test_call_errors_carry_their_loc(
    limiter: rk.Limiter, call: Callable[[rk.Limiter], Any], kind: type, loc: tuple[Any, ...]
) -> None:
    error = raised(lambda: call(limiter))
    assert type(error) is kind
    assert error.loc[: len(loc)] == loc
    assert len(limiter) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda lim: lim.update_rule("nope", rate="1/s"),
        lambda lim: lim.set_quota("alice", "nope", "1/s"),
        lambda lim: lim.quota("alice", "nope"),
        lambda lim: lim.group_policy("nope"),
    ],
)
def test_an_unknown_group_is_an_invalid_value_naming_it(limiter: rk.Limiter, call: Callable[[rk.Limiter], Any]) -> None:
    error = raised(lambda: call(limiter))
    assert isinstance(error, rk.InvalidValue)
    assert "nope" in str(error)


def test_a_negative_clock_advance_is_an_invalid_value(clock: rk.ManualClock) -> None:
    assert isinstance(raised(lambda: clock.advance(-1.0)), rk.InvalidValue)


def test_a_bad_rate_is_an_invalid_value() -> None:
    assert isinstance(raised(lambda: rk.Rate("ten/min")), rk.InvalidValue)
    assert isinstance(raised(lambda: rk.Rate(0, per=1.0)), rk.InvalidValue)
    assert isinstance(raised(lambda: rk.Rate(1.5)), rk.InvalidType)
    assert isinstance(raised(lambda: rk.Rate(b"1/s")), rk.InvalidType)


# --- the exception objects ------------------------------------------------------------------------------------


def test_a_raised_error_survives_pickling() -> None:
    error = raised(lambda: rk.Limiter(rules=[rk.Rule("^/a", "a", "1/s"), rk.Rule("^/b", "a", "2/s")]))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (copy.loc, copy.msg, copy.file, str(copy)) == (error.loc, error.msg, error.file, str(error))


@pytest.mark.parametrize("kind", [rk.InvalidValue, rk.InvalidType])
def test_a_built_error_survives_pickling_with_its_file(kind: type[rk.InvalidArgument]) -> None:
    error = kind(("rules", 2, "pattern"), "is not a valid regex", file="rk.toml")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is kind
    assert (copy.loc, copy.msg, copy.file) == (("rules", 2, "pattern"), "is not a valid regex", "rk.toml")
    assert str(copy) == "rk.toml: rules[2].pattern: is not a valid regex"


def test_at_and_in_file_move_an_error_without_rewording_it() -> None:
    error = rk.InvalidValue(("rules", 3, "rate"), '"10/fortnight" is not a rate')
    moved = error.at("groups", "api", drop=2)
    assert type(moved) is rk.InvalidValue
    assert moved.loc == ("groups", "api", "rate")
    assert str(moved) == 'groups.api.rate: "10/fortnight" is not a rate'
    assert str(moved.in_file("rk.toml")) == 'rk.toml: groups.api.rate: "10/fortnight" is not a rate'
    assert str(rk.InvalidValue((), "neither rate nor rules")) == "neither rate nor rules"


# --- messages name the field and the value ------------------------------------------------------------------


def shown(error: BaseException) -> str:
    """The error as a traceback prints it: the message plus any notes."""
    return "".join(traceback.format_exception_only(type(error), error))


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda lim: lim.check(1.0), "peer"),
        (lambda lim: lim.check(None), "peer"),
        (lambda lim: lim.allow(b"alice"), "peer"),
        (lambda lim: lim.check("alice", 42), "path"),
        (lambda lim: lim.allow("alice", b"/a"), "path"),
        (lambda lim: lim.throttle(True), "peer"),
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
