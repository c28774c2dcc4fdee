"""Errors of the core keep their structure: ``rk.InvalidValue`` (a ValueError) and ``rk.InvalidType`` (a
TypeError) with the place of the mistake as ``loc`` (``("rules", 1, "group")``) and what is wrong as ``msg``;
``str(error)`` is built from them (``rules[1].group: ...``), and both survive pickling.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable

import pytest
import ratekeeper as rk
from ratekeeper._errors import format_loc


def raised(make: Callable[[], Any]) -> rk.InvalidArgument:
    with pytest.raises(rk.InvalidArgument) as info:
        make()
    return info.value


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
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
        (lambda lim: lim.check(1), rk.InvalidType, ("peer",)),
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
