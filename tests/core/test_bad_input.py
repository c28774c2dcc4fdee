"""Bad input: every public entry point refuses a bad argument with ``rk.InvalidValue`` or
``rk.InvalidType`` naming the field (in the text and in ``.loc``), never with Python's own message, an
``OverflowError``, a ``UnicodeEncodeError`` or a panic, and never by accepting it silently.

The families tried on each argument: the wrong type, a bool where an int is expected, NaN, +-inf,
negative, zero, ints past 64 bits, lone surrogates and 10 MB strings. Values a demanding user would call
valid are asserted to work instead (``VALID``): a 10 MB peer or path is a key like any other, an empty
path is a path, ``timeout=inf`` waits for ever, a 10 MB group name is a name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import ratekeeper as rk
from ratekeeper._errors import format_loc
from ratekeeper._outgoing import Outgoing

NAN, INF = float("nan"), float("inf")
HUGE = 2**70
LONE = "\ud800"
BIG = "a" * 10_000_000  # 10 MB
URL = "redis://127.0.0.1:6379/0"  # only parsed: Redis(...) connects at the first request

Call = Callable[[rk.Limiter], object]


def make_limiter() -> rk.Limiter:
    rules = [rk.Rule("^/api", "api", "10/min"), rk.Rule("^/c", "c", limits=[rk.Limit(concurrency=2)])]
    return rk.Limiter("3/60s", rules=rules, clock=rk.ManualClock())


def athrottle(lim: rk.Limiter, *args: Any, **kwargs: Any) -> object:
    return asyncio.run(lim.athrottle(*args, **kwargs))


def concurrent(lim: rk.Limiter, *args: Any, **kwargs: Any) -> object:
    with lim.concurrent(*args, **kwargs) as decision:
        return decision


def add_group(lim: rk.Limiter, *args: Any, **kwargs: Any) -> None:
    lim.add_group(*args, **kwargs)


# Each entry point that takes a cost-like count, called with `value` for it.
COUNTS: dict[str, tuple[str, Callable[[rk.Limiter, object], object]]] = {
    "check": ("cost", lambda lim, v: lim.check("a", cost=v)),
    "allow": ("cost", lambda lim, v: lim.allow("a", cost=v)),
    "throttle": ("cost", lambda lim, v: lim.throttle("a", cost=v)),
    "athrottle": ("cost", lambda lim, v: athrottle(lim, "a", cost=v)),
    "concurrent": ("cost", lambda lim, v: concurrent(lim, "a", "/c", cost=v)),
    "reduce": ("n", lambda lim, v: lim.reduce("a", n=v)),
    "absorb": ("n", lambda lim, v: lim.absorb("a", "default", v)),
    "top_refused": ("n", lambda lim, v: lim.top_refused(v)),
    "update_rule": ("burst", lambda lim, v: lim.update_rule("default", burst=v)),
    "Limiter.burst": ("burst", lambda lim, v: rk.Limiter("1/s", burst=v)),
    "Limiter.max_keys": ("max_keys", lambda lim, v: rk.Limiter("1/s", max_keys=v)),
    "Limit.burst": ("burst", lambda lim, v: rk.Limit("1/s", burst=v)),
    "Limit.concurrency": ("concurrency", lambda lim, v: rk.Limit(concurrency=v)),
    "Rule.burst": ("burst", lambda lim, v: rk.Rule("", "g", "1/s", burst=v)),
    "Rate.count": ("count", lambda lim, v: rk.Rate(v, per=1.0)),
    "Quotas.workers": ("workers", lambda lim, v: rk.Quotas(workers=v)),
    "from_config.max_keys": ("max_keys", lambda lim, v: rk.Limiter.from_config({"default": "1/s", "max_keys": v})),
    "from_config.burst": (
        "burst",
        lambda lim, v: rk.Limiter.from_config({"default": {"rate": "1/s", "burst": v}}),
    ),
}
# top_refused(0) asks for no peers: a valid request.
COUNT_VALUES: list[tuple[str, object, type[Exception]]] = [
    ("bool-true", True, rk.InvalidType),
    ("bool-false", False, rk.InvalidType),
    ("float", 1.5, rk.InvalidType),
    ("nan", NAN, rk.InvalidType),
    ("str", "1", rk.InvalidType),
    ("zero", 0, rk.InvalidValue),
    ("negative", -1, rk.InvalidValue),
    ("huge", HUGE, rk.InvalidValue),
]

# Each entry point that takes a duration in seconds.
DURATIONS: dict[str, tuple[str, Callable[[rk.Limiter, object], object]]] = {
    "throttle.timeout": ("timeout", lambda lim, v: lim.throttle("a", timeout=v)),
    "athrottle.timeout": ("timeout", lambda lim, v: athrottle(lim, "a", timeout=v)),
    "wait_quotas.timeout": ("timeout", lambda lim, v: lim.wait_quotas(v)),
    "Rate.per": ("per", lambda lim, v: rk.Rate(10, per=v)),
    "ManualClock.start": ("start", lambda lim, v: rk.ManualClock(v)),
    "ManualClock.advance": ("seconds", lambda lim, v: rk.ManualClock().advance(v)),
    "Quotas.ttl": ("ttl", lambda lim, v: rk.Quotas(ttl=v)),
    "Quotas.timeout": ("timeout", lambda lim, v: rk.Quotas(timeout=v)),
    "Quotas.wait": ("wait", lambda lim, v: rk.Quotas(wait=v)),
    "Redis.timeout": ("timeout", lambda lim, v: rk.Redis(URL, timeout=v)),
    "Redis.sync_interval": ("sync_interval", lambda lim, v: rk.Redis(URL, mode="sync", sync_interval=v)),
    "Redis.lease_span": ("lease_span", lambda lim, v: rk.Redis(URL, mode="lease", lease_span=v)),
    "Redis.lease_ttl": ("lease_ttl", lambda lim, v: rk.Redis(URL, lease_ttl=v)),
    "limited.timeout": ("timeout", lambda lim, v: lim.limited("a", timeout=v)),
    "Outgoing.timeout": ("timeout", lambda lim, v: Outgoing(rk.Limiter(rules=[]), timeout=v)),
}
DURATION_VALUES: list[tuple[str, object, type[Exception]]] = [
    ("str", "1", rk.InvalidType),
    ("bool", True, rk.InvalidType),
    ("list", [1.0], rk.InvalidType),
    ("nan", NAN, rk.InvalidValue),
    ("negative", -1.0, rk.InvalidValue),
    ("minus-inf", -INF, rk.InvalidValue),
    ("huge-int", HUGE, rk.InvalidValue),
    ("beyond-a-float", 10**400, rk.InvalidValue),  # a bare OverflowError, where Python made it a float
    ("below-a-float", -(10**400), rk.InvalidValue),
]
# +inf means "for ever" where waiting for ever is meaningful; elsewhere it is refused.
INF_REFUSED = {"Rate.per", "ManualClock.start", "ManualClock.advance", "Quotas.ttl", "Quotas.timeout"}
INF_REFUSED |= {"Redis.timeout", "Redis.sync_interval", "Redis.lease_ttl", "Redis.lease_span", "Outgoing.timeout"}
# Zero is refused where a positive duration is needed.
ZERO_REFUSED = {"Rate.per", "Quotas.ttl", "Quotas.timeout"}
ZERO_REFUSED |= {"Redis.timeout", "Redis.sync_interval", "Redis.lease_ttl", "Redis.lease_span", "Outgoing.timeout"}
# A huge finite value: what can hold 2**70 seconds (a timeout) takes it; a clock or a period cannot.
HUGE_ACCEPTED = {"throttle.timeout", "athrottle.timeout", "wait_quotas.timeout", "Quotas.wait"}
HUGE_ACCEPTED |= {"Quotas.ttl", "Quotas.timeout"}
HUGE_ACCEPTED |= {"Redis.timeout", "Redis.sync_interval", "Redis.lease_ttl", "Redis.lease_span"}
HUGE_ACCEPTED |= {"limited.timeout", "Outgoing.timeout"}
# An int no float holds: for ever, where a wait takes +inf.
FOR_EVER_ACCEPTED = {"throttle.timeout", "athrottle.timeout", "wait_quotas.timeout", "Quotas.wait", "limited.timeout"}

# Each entry point that takes a str, called with `value` for it.
TEXTS: dict[str, tuple[str, Callable[[rk.Limiter, object], object]]] = {
    "check.peer": ("peer", lambda lim, v: lim.check(v)),
    "check.path": ("path", lambda lim, v: lim.check("a", v)),
    "check.group": ("group", lambda lim, v: lim.check("a", group=v)),
    "allow.peer": ("peer", lambda lim, v: lim.allow(v)),
    "allow.path": ("path", lambda lim, v: lim.allow("a", v)),
    "allow.group": ("group", lambda lim, v: lim.allow("a", group=v)),
    "throttle.peer": ("peer", lambda lim, v: lim.throttle(v)),
    "throttle.path": ("path", lambda lim, v: lim.throttle("a", v)),
    "athrottle.peer": ("peer", lambda lim, v: athrottle(lim, v)),
    "athrottle.group": ("group", lambda lim, v: athrottle(lim, "a", group=v)),
    "concurrent.peer": ("peer", lambda lim, v: concurrent(lim, v, "/c")),
    "concurrent.path": ("path", lambda lim, v: concurrent(lim, "a", v)),
    "reduce.peer": ("peer", lambda lim, v: lim.reduce(v)),
    "reduce.path": ("path", lambda lim, v: lim.reduce("a", v)),
    "reset.peer": ("peer", lambda lim, v: lim.reset(v)),
    "resolve.peer": ("peer", lambda lim, v: lim.resolve(v)),
    "resolve.path": ("path", lambda lim, v: lim.resolve("a", v)),
    "resolve.group": ("group", lambda lim, v: lim.resolve("a", group=v)),
    "group_policy.group": ("group", lambda lim, v: lim.group_policy(v)),
    "group_policy.peer": ("peer", lambda lim, v: lim.group_policy("api", v)),
    "top_refused.group": ("group", lambda lim, v: lim.top_refused(3, v)),
    "top_refused_error.group": ("group", lambda lim, v: lim.top_refused_error(v)),
    "set_quota.peer": ("peer", lambda lim, v: lim.set_quota(v, "api", "5/min")),
    "set_quota.group": ("group", lambda lim, v: lim.set_quota("a", v, "5/min")),
    "quota.group": ("group", lambda lim, v: lim.quota("a", v)),
    "absorb.group": ("group", lambda lim, v: lim.absorb("a", v, 1)),
    "update_rule.group": ("group", lambda lim, v: lim.update_rule(v, rate="5/s")),
    "add_group.name": ("name", lambda lim, v: add_group(lim, v, ["1/s"])),
    "Rule.pattern": ("pattern", lambda lim, v: rk.Rule(v, "g", "1/s")),
    "Rule.group": ("group", lambda lim, v: rk.Rule("", v, "1/s")),
    "Redis.url": ("url", lambda lim, v: rk.Redis(v)),
    "Redis.mode": ("mode", lambda lim, v: rk.Redis(URL, mode=v)),
    "Redis.prefix": ("prefix", lambda lim, v: rk.Redis(URL, prefix=v)),
    "Redis.on_error": ("on_error", lambda lim, v: rk.Redis(URL, on_error=v)),
    "Redis.tls_ca_file": ("tls_ca_file", lambda lim, v: rk.Redis(URL, tls_ca_file=v)),
    "Limiter.exempt_peers": ("exempt_peers", lambda lim, v: rk.Limiter("1/s", exempt_peers=[v])),
    "Limiter.exempt_paths": ("exempt_paths", lambda lim, v: rk.Limiter("1/s", exempt_paths=[v])),
    "from_config.exempt_peers": (
        "exempt_peers",
        lambda lim, v: rk.Limiter.from_config({"default": "1/s", "exempt_peers": [v]}),
    ),
}
# A peer or path is any str: long ones are keys like others. A group must be one the limiter has.
TEXT_VALUES: list[tuple[str, object, type[Exception]]] = [
    ("int", 5, rk.InvalidType),
    ("bytes", b"a", rk.InvalidType),
    ("surrogate", LONE, rk.InvalidValue),
    ("surrogate-inside", f"/api/{LONE}x", rk.InvalidValue),
]
# Optional str arguments take None; the others refuse it.
NONE_ACCEPTED = {k for k in TEXTS if k.endswith((".path", ".group"))} - {"Rule.group", "set_quota.group"}
NONE_ACCEPTED |= {"reset.peer", "group_policy.peer", "top_refused.group", "top_refused_error.group"}
NONE_ACCEPTED |= {"Redis.tls_ca_file"}
NONE_ACCEPTED -= {"group_policy.group", "quota.group", "absorb.group", "update_rule.group"}
# Where a 10 MB str is a valid value (a key or a name); elsewhere it names nothing or is too big a regex.
BIG_ACCEPTED = {k for k in TEXTS if k.endswith(".peer")} | {k for k in TEXTS if k.endswith(".path")}
BIG_ACCEPTED |= {"Rule.group", "add_group.name", "Limiter.exempt_peers", "from_config.exempt_peers"}
BIG_ACCEPTED |= {"Redis.prefix"}  # a key prefix: long, but a str like another

# Rates, policies, algorithms and other one-off arguments.
RATES: dict[str, tuple[str, Callable[[rk.Limiter, object], object]]] = {
    "Rate": ("rate", lambda lim, v: rk.Rate(v)),
    "Limit.rate": ("rate", lambda lim, v: rk.Limit(v)),
    "Rule.rate": ("rate", lambda lim, v: rk.Rule("", "g", v)),
    "Rule.limits": ("limits[0]", lambda lim, v: rk.Rule("", "g", limits=[v])),
    "Limiter.rate": ("rate", lambda lim, v: rk.Limiter(v)),
    "Quotas.failsafe": ("failsafe", lambda lim, v: rk.Quotas(failsafe=v)),
    "set_quota.rate": ("rate", lambda lim, v: lim.set_quota("a", "api", v)),
    "update_rule.rate": ("rate", lambda lim, v: lim.update_rule("api", rate=v)),
    "add_group.limits": ("limits[0]", lambda lim, v: add_group(lim, "n", [v])),
    "from_config.default": ("default", lambda lim, v: rk.Limiter.from_config({"default": v})),
}
RATE_VALUES: list[tuple[str, object, type[Exception]]] = [
    ("int", 5, rk.InvalidType),
    ("bool", True, rk.InvalidType),
    ("nan", NAN, rk.InvalidType),
    ("inf", INF, rk.InvalidType),
    ("bad", "10/fortnight", rk.InvalidValue),
    ("zero", "0/s", rk.InvalidValue),
    ("negative", "-1/s", rk.InvalidValue),
    ("huge", f"{HUGE}/s", rk.InvalidValue),
    ("surrogate", f"1/{LONE}", rk.InvalidValue),
    ("10MB", BIG, rk.InvalidValue),
]

ONE_OFFS: list[tuple[str, Call, type[Exception], str]] = [
    # names chosen from a set
    ("Limit.algorithm-none", lambda lim: rk.Limit("1/s", algorithm=None), rk.InvalidType, "algorithm"),
    ("Limit.algorithm-int", lambda lim: rk.Limit("1/s", algorithm=5), rk.InvalidType, "algorithm"),
    ("Limit.algorithm-unknown", lambda lim: rk.Limit("1/s", algorithm="nope"), rk.InvalidValue, "algorithm"),
    ("Limit.algorithm-surrogate", lambda lim: rk.Limit("1/s", algorithm=LONE), rk.InvalidValue, "algorithm"),
    ("Limit.algorithm-10MB", lambda lim: rk.Limit("1/s", algorithm=BIG), rk.InvalidValue, "algorithm"),
    ("Limit.neither", lambda lim: rk.Limit(), rk.InvalidValue, "rate"),
    ("Rule.algorithm-none", lambda lim: rk.Rule("", "g", "1/s", algorithm=None), rk.InvalidType, "algorithm"),
    ("Rule.policy-none", lambda lim: rk.Rule("", "g", "1/s", policy=None), rk.InvalidType, "policy"),
    ("Rule.policy-int", lambda lim: rk.Rule("", "g", "1/s", policy=1), rk.InvalidType, "policy"),
    ("Rule.policy-surrogate", lambda lim: rk.Rule("", "g", "1/s", policy=LONE), rk.InvalidValue, "policy"),
    ("Rule.policy-10MB", lambda lim: rk.Rule("", "g", "1/s", policy=BIG), rk.InvalidValue, "policy"),
    ("Rule.reduction-str", lambda lim: rk.Rule("", "g", "1/s", reduction="yes"), rk.InvalidType, "reduction"),
    ("Rule.reduction-int", lambda lim: rk.Rule("", "g", "1/s", reduction=1), rk.InvalidType, "reduction"),
    ("Rule.reduction-none", lambda lim: rk.Rule("", "g", "1/s", reduction=None), rk.InvalidType, "reduction"),
    ("Rule.limits-int", lambda lim: rk.Rule("", "g", limits=5), rk.InvalidType, "limits"),
    ("Rule.limits-str", lambda lim: rk.Rule("", "g", limits="1/s"), rk.InvalidType, "limits"),
    ("Rule.group-empty", lambda lim: rk.Rule("", "", "1/s"), rk.InvalidValue, "group"),
    ("Rule.pattern-none", lambda lim: rk.Rule(None, "g", "1/s"), rk.InvalidType, "pattern"),
    ("Rule.pattern-nested", lambda lim: rk.Rule("(" * 1000 + ")" * 1000, "g", "1/s"), rk.InvalidValue, "pattern"),
    ("Limiter.algorithm-none", lambda lim: rk.Limiter("1/s", algorithm=None), rk.InvalidType, "algorithm"),
    ("Limiter.algorithm-int", lambda lim: rk.Limiter("1/s", algorithm=5), rk.InvalidType, "algorithm"),
    ("Limiter.rules-int", lambda lim: rk.Limiter(rules=5), rk.InvalidType, "rules"),
    ("Limiter.rules-item", lambda lim: rk.Limiter(rules=["x"]), rk.InvalidType, "rules[0]"),
    ("Limiter.exempt_peers-str", lambda lim: rk.Limiter("1/s", exempt_peers="a"), rk.InvalidType, "exempt_peers"),
    ("Limiter.exempt_paths-bad", lambda lim: rk.Limiter("1/s", exempt_paths=["("]), rk.InvalidValue, "exempt_paths"),
    ("Limiter.clock-int", lambda lim: rk.Limiter("1/s", clock=5), rk.InvalidType, "clock"),
    ("Limiter.quotas-int", lambda lim: rk.Limiter("1/s", quotas=5), rk.InvalidType, "quotas"),
    ("Limiter.backend-int", lambda lim: rk.Limiter("1/s", backend=5), rk.InvalidType, "backend"),
    ("Limiter.track_usage-str", lambda lim: rk.Limiter("1/s", track_usage="yes"), rk.InvalidType, "track_usage"),
    ("Limiter.track_usage-int", lambda lim: rk.Limiter("1/s", track_usage=1), rk.InvalidType, "track_usage"),
    ("Limiter.neither", lambda lim: rk.Limiter(), rk.InvalidValue, "rate"),
    ("Quotas.provider-int", lambda lim: rk.Quotas(5), rk.InvalidType, "provider"),
    ("Quotas.workers-many", lambda lim: rk.Quotas(workers=257), rk.InvalidValue, "workers"),
    ("Rate.count-str", lambda lim: rk.Rate("10", per=1.0), rk.InvalidType, "count"),
    ("Rate.per-10-years", lambda lim: rk.Rate(10, per=1e10), rk.InvalidValue, "per"),
    ("Rate.none", lambda lim: rk.Rate(None), rk.InvalidType, "rate"),
    ("check.peer-none", lambda lim: lim.check(None), rk.InvalidType, "peer"),
    ("check.cost-none", lambda lim: lim.check("a", cost=None), rk.InvalidType, "cost"),
    ("check.path-and-group", lambda lim: lim.check("a", "/x", group="api"), rk.InvalidValue, "group"),
    ("throttle.timeout-list", lambda lim: lim.throttle("a", timeout=[]), rk.InvalidType, "timeout"),
    ("concurrent.rates-str", lambda lim: concurrent(lim, "a", "/c", rates="no"), rk.InvalidType, "rates"),
    ("add_group.limits-int", lambda lim: add_group(lim, "n", 5), rk.InvalidType, "limits"),
    ("add_group.limits-str", lambda lim: add_group(lim, "n", "1/s"), rk.InvalidType, "limits"),
    ("add_group.policy-none", lambda lim: add_group(lim, "n", ["1/s"], policy=None), rk.InvalidType, "policy"),
    ("add_group.reduction-str", lambda lim: add_group(lim, "n", ["1/s"], reduction="y"), rk.InvalidType, "reduction"),
    ("add_group.name-empty", lambda lim: add_group(lim, "", ["1/s"]), rk.InvalidValue, "name"),
    ("add_group.name-taken", lambda lim: add_group(lim, "api", ["1/s"]), rk.InvalidValue, "name"),
    ("set_quota.rate-int", lambda lim: lim.set_quota("a", "api", 5), rk.InvalidType, "rate"),
    (
        "from_config.max_keys-bool",
        lambda lim: rk.Limiter.from_config({"default": "1/s", "max_keys": True}),
        rk.InvalidType,
        "max_keys",
    ),
]


def cases() -> list[Any]:
    out: list[Any] = []
    for name, (field, call) in COUNTS.items():
        for label, value, kind in COUNT_VALUES:
            if name == "top_refused" and label == "zero":
                continue  # n=0 asks for no peers: valid (VALID below)
            if name == "top_refused" and label == "bool-false":
                kind = rk.InvalidType
            out.append(pytest.param(call, value, kind, field, id=f"{name}-{label}"))
    for name, (field, call) in DURATIONS.items():
        values = [
            (label, value, kind)
            for label, value, kind in DURATION_VALUES
            if not (label == "huge-int" and name in HUGE_ACCEPTED)
            and not (label == "beyond-a-float" and name in FOR_EVER_ACCEPTED)
        ]
        if name in INF_REFUSED:
            values.append(("inf", INF, rk.InvalidValue))
        if name in ZERO_REFUSED:
            values.append(("zero", 0.0, rk.InvalidValue))
        if name.startswith("ManualClock"):
            values.append(("past-range", 1e300, rk.InvalidValue))
            values.append(("past-2**62ns", 2.0**62 / 1e9 + 1.0, rk.InvalidValue))
        for label, value, kind in values:
            out.append(pytest.param(call, value, kind, field, id=f"{name}-{label}"))
    for name, (field, call) in TEXTS.items():
        values = list(TEXT_VALUES)
        if name not in NONE_ACCEPTED:
            values.append(("none", None, rk.InvalidType))
        if name not in BIG_ACCEPTED:
            values.append(("10MB", BIG, rk.InvalidValue))
        if name.endswith(".peer") and not name.startswith(("Limiter.", "from_config.")):
            # A peer may be an int (tests/core/test_int_peers.py), never a bool.
            values = [value if value[0] != "int" else ("bool", True, rk.InvalidType) for value in values]
        for label, value, kind in values:
            out.append(pytest.param(call, value, kind, field, id=f"{name}-{label}"))
    for name, (field, call) in RATES.items():
        for label, value, kind in RATE_VALUES:
            out.append(pytest.param(call, value, kind, field, id=f"{name}-{label}"))
    for name, call, kind, field in ONE_OFFS:
        out.append(pytest.param(lambda lim, v, call=call: call(lim), None, kind, field, id=name))
    return out


@pytest.mark.parametrize(("call", "value", "kind", "field"), cases())
def test_bad_input_is_refused_naming_the_field(
    call: Callable[[rk.Limiter, object], object], value: object, kind: type[Exception], field: str
) -> None:
    lim = make_limiter()
    with pytest.raises(rk.InvalidArgument) as info:
        call(lim, value)
    error = info.value
    assert type(error) is kind, f"{type(error).__name__}: {error}"
    assert field in format_loc(error.loc), error.loc
    assert field in str(error)
    # The offending value is quoted, but a 10 MB one is not echoed whole.
    assert len(str(error)) < 1_000
    lim.close()


VALID: list[tuple[str, Call, object]] = [
    ("check-10MB-peer", lambda lim: lim.check(BIG).allowed, True),
    ("allow-10MB-path", lambda lim: lim.allow("a", "/" + BIG), True),
    ("check-empty-path", lambda lim: lim.check("a", "").group, "default"),
    ("check-empty-peer", lambda lim: lim.check("").allowed, True),
    ("reset-10MB-peer", lambda lim: lim.reset(BIG), None),
    ("throttle-timeout-inf", lambda lim: lim.throttle("a", timeout=INF).allowed, True),
    ("throttle-timeout-zero", lambda lim: lim.throttle("a", timeout=0).allowed, True),
    ("throttle-timeout-int", lambda lim: lim.throttle("a", timeout=1).allowed, True),
    ("check-cost-huge-but-in-range", lambda lim: lim.check("a", cost=2**63 - 1).allowed, False),
    ("top_refused-zero", lambda lim: lim.top_refused(0), []),
    ("Rate-int-per", lambda lim: rk.Rate(10, per=1), rk.Rate("10/s")),
    ("Rule-10MB-group", lambda lim: len(rk.Rule("", BIG, "1/s").group), 10_000_000),
    ("Limiter-10MB-exempt-peer", lambda lim: rk.Limiter("1/s", exempt_peers=[BIG]).check(BIG).group, None),
    ("ManualClock-int-start", lambda lim: rk.ManualClock(5).now(), 5.0),
    ("ManualClock-to-2**62ns", lambda lim: rk.ManualClock(2**62 / 1e9 - 1).now() < 2**62 / 1e9, True),
    ("Quotas-wait-inf", lambda lim: rk.Quotas(wait=INF).wait, INF),
    ("Quotas-huge-ttl", lambda lim: rk.Quotas(ttl=1e300).ttl, 1e300),
]


@pytest.mark.parametrize(("call", "expected"), [pytest.param(c, e, id=n) for n, c, e in VALID])
def test_valid_edge_values_work(call: Call, expected: object) -> None:
    lim = make_limiter()
    assert call(lim) == expected
    lim.close()


def test_a_clock_at_its_end_still_limits() -> None:
    """Item 3 of the issue: a clock past 2**64 ns read as inf and admitted every request."""
    clock = rk.ManualClock()
    for bad in (1e300, INF, 2.0**64 / 1e9):
        with pytest.raises(rk.InvalidValue, match="seconds"):
            clock.advance(bad)
    clock.advance(2**62 / 1e9 - 10.0)
    with pytest.raises(rk.InvalidValue, match="seconds"):
        clock.advance(20.0)
    lim = rk.Limiter("1/s", clock=clock)
    assert sum(lim.allow("a") for _ in range(100)) == 1
    assert lim.throttle("a", timeout=5.0).allowed  # waits (moves the clock) 1 s
    assert sum(lim.allow("a") for _ in range(100)) == 0
