"""Two ready-made limiters, configured from flat option mappings rather than rules.

- [`peer_throttle`][ratekeeper.compat.peer_throttle] — a throttle per peer and request type: requests per minute by
  type, counted per (peer, type) in a sliding log over ``throttle_period``; a request waits (``lim.throttle``)
  instead of being refused while the window already holds the threshold, 80 % of the period's share of the rpm.
- [`node_limiter`][ratekeeper.compat.node_limiter] — a hybrid HTTP limiter for a node's API, one group per kind of
  endpoint: a concurrency limit, then a sliding window, then leaky-bucket tokens as the fallback; handlers may give
  tokens back (manual reduction).

Both return a plain [`Limiter`][ratekeeper.Limiter]. Bad options raise [`InvalidValue`][ratekeeper.InvalidValue] /
[`InvalidType`][ratekeeper.InvalidType] whose ``loc`` names the option (``("throttle_period",)``,
``("general.leaky_limit",)``); an error of the core is moved to the option it came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ratekeeper._core import Limit, ManualClock, Rule
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, Loc, format_loc
from ratekeeper.config import RulePlaces, move_rule_error
from ratekeeper.limiter import Limiter

__all__ = [
    "NODE_GROUPS",
    "NODE_LIMITER_KEYS",
    "node_limiter",
    "peer_throttle",
    "throttle_threshold",
]


def _keyed(name: str, key: object) -> Loc:
    """The place of ``key`` in the mapping option ``name``, written ``name['key']``.

    The key is a regex (``"^/api/"``), which ``format_loc`` would join with a dot (``name.^/api/``), so
    the place is one part of the ``loc``.
    """
    return (f"{name}[{key!r}]",)


def _limiter_error(error: InvalidArgument, rule_places: list[RulePlaces], prefix: str = "") -> InvalidArgument:
    """A core error of ``Limiter(rules=..., exempt_...=...)``: one about ``rules[i]`` at the option that
    gave rule ``i``; one about an exemption at ``prefix`` + its name (``throttle_exempt_paths[0]``)."""
    if error.loc and error.loc[0] in ("exempt_peers", "exempt_paths"):
        return error.at(f"{prefix}{error.loc[0]}", drop=1)
    return move_rule_error(error, rule_places)


# ---------------------------------------------------------------------------------------------------
# The peer throttle
# ---------------------------------------------------------------------------------------------------

PEER_THROTTLE_OPTIONS = ("throttle_period", "throttle_rpm_by_path", "throttle_exempt_peers", "throttle_exempt_paths")
DEFAULT_THROTTLE_PERIOD_MS = 30_000


def throttle_threshold(rpm: int, period_ms: int = DEFAULT_THROTTLE_PERIOD_MS) -> int:
    """Requests admitted per ``period_ms`` window for ``rpm`` requests per minute, as the peer throttle counts.

    The period's share of the rpm (``rpm * period_ms // 60000``, half of it for the default 30 s), of
    which 80 % is admitted, and at least 1: rpm 60 -> 24, rpm 10 -> 4, rpm 1 -> 1.
    """
    return max(1, (rpm * period_ms // 60_000) * 80 // 100)


def _text(value: object, loc: Loc, what: str = "") -> str:
    """A str, or bytes decoded as UTF-8 (options read from another system's config, as binaries).

    ``what``: what the value is, when it is not the value at ``loc`` but a key in it (``"key"``).
    """
    what = f"{what} " if what else ""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise InvalidValue(loc, f"{what}{value!r} is not UTF-8") from None
    if isinstance(value, str):
        return value
    raise InvalidType(loc, f"{what}must be a str or bytes, got {type(value).__name__}")


def _positive_int(value: object, loc: Loc) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(loc, f"must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidValue(loc, f"must be a positive int, got {value}")
    return value


def _text_list(value: object, loc: Loc) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidType(loc, f"must be a list of str or bytes, got {type(value).__name__}")
    return [_text(item, (*loc, index)) for index, item in enumerate(value)]


def _type_rpm(spec: object, loc: Loc) -> tuple[str, int]:
    if isinstance(spec, (str, bytes)) or not isinstance(spec, (tuple, list)) or len(spec) != 2:
        raise InvalidType(loc, f"must be a (type, rpm) pair, got {spec!r}")
    return _text(spec[0], (*loc, 0)), _positive_int(spec[1], (*loc, 1))


def peer_throttle(opts: Mapping[Any, Any], *, clock: ManualClock | None = None) -> Limiter:
    """A peer throttle: each (peer, request type) may make a number of requests per minute, and a request
    over it waits for its turn rather than being refused; call ``throttle(peer, path)`` on it.

    Options (names and values may be str or bytes):

    - ``throttle_period``: the window in ms (default 30000).
    - ``throttle_rpm_by_path``: a mapping ``path regex -> (type, requests per minute)``, tried in the
      mapping's order (first match wins), or a single ``(type, rpm)`` pair for every path. Requests
      are counted per (peer, type); paths matching no pattern are not limited.
    - ``throttle_exempt_peers``: peers never limited (exact match).
    - ``throttle_exempt_paths``: path regexes never limited.

    Per (peer, type), a sliding log admits a request while fewer than
    [`throttle_threshold`][ratekeeper.compat.throttle_threshold] requests are in the last ``throttle_period`` ms;
    ``throttle`` waits until the oldest one leaves the window rather than refusing. ``off()`` / ``on()`` turn it off
    and on. Other option names are ignored (so a whole application's options may be passed), except unknown
    ``throttle_*`` ones, which are errors. Empty options give a limiter that limits nothing.

    Raises:
        InvalidValue, InvalidType: a bad option; ``loc`` names it (``("throttle_period",)``).
    """
    options: dict[str, Any] = {}
    for key, value in opts.items():
        name = _text(key, (), "option name") if isinstance(key, (str, bytes)) else None
        if name is None:
            continue
        if name.startswith("throttle_") and name not in PEER_THROTTLE_OPTIONS:
            raise InvalidValue((name,), f"unknown option (known: {', '.join(PEER_THROTTLE_OPTIONS)})")
        if name in PEER_THROTTLE_OPTIONS:
            options[name] = value
    period_ms = _positive_int(options.get("throttle_period", DEFAULT_THROTTLE_PERIOD_MS), ("throttle_period",))
    by_path = options.get("throttle_rpm_by_path")
    routes: list[tuple[str, str, int, Loc]] = []  # pattern, type, rpm, place
    if by_path is None:
        pass
    elif isinstance(by_path, Mapping):
        for raw_pattern, spec in by_path.items():
            pattern = _text(raw_pattern, ("throttle_rpm_by_path",), "key")
            loc = _keyed("throttle_rpm_by_path", pattern)
            routes.append((pattern, *_type_rpm(spec, loc), loc))
    else:
        routes.append(("", *_type_rpm(by_path, ("throttle_rpm_by_path",)), ("throttle_rpm_by_path",)))
    rules = []
    rpm_of_type: dict[str, tuple[int, Loc]] = {}
    for pattern, kind, rpm, loc in routes:
        if kind in rpm_of_type and rpm_of_type[kind][0] != rpm:
            earlier_rpm, earlier = rpm_of_type[kind]
            raise InvalidValue(loc, f"type {kind!r} already has {earlier_rpm} rpm from {format_loc(earlier)}")
        rpm_of_type[kind] = (rpm, loc)
        threshold = throttle_threshold(rpm, period_ms)
        try:
            limit = Limit(f"{threshold}/{period_ms}ms", algorithm="sliding_log")
        except InvalidArgument as error:  # a period too long for a rate: the rate is made of both options
            raise error.at(*loc, drop=1) from None
        try:
            rules.append(Rule(pattern, kind, limits=[limit]))
        except InvalidArgument as error:
            raise RulePlaces.of_option(loc).move(error, 0) from None
    exempt_peers = _text_list(options.get("throttle_exempt_peers", []), ("throttle_exempt_peers",))
    exempt_paths = _text_list(options.get("throttle_exempt_paths", []), ("throttle_exempt_paths",))
    try:
        return Limiter(rules=rules, exempt_peers=exempt_peers, exempt_paths=exempt_paths, clock=clock)
    except InvalidArgument as error:
        raise _limiter_error(error, [RulePlaces.of_option(loc) for *_, loc in routes], "throttle_") from None


# ---------------------------------------------------------------------------------------------------
# The node limiter
# ---------------------------------------------------------------------------------------------------

# The node limiter's groups and their default leaky_limit.
NODE_GROUPS: Mapping[str, int] = {
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
NODE_LIMITER_PREFIX = "http_api.limiter."
# Setting -> its minimum; None: a bool. Defaults that depend on leaky_limit are filled in later.
NODE_LIMITER_KEYS: Mapping[str, int | None] = {
    "sliding_window_limit": 0,
    "sliding_window_duration": 1,
    "sliding_window_timestamp_cleanup_interval": 1,
    "sliding_window_timestamp_cleanup_expiry": 1,
    "leaky_limit": 1,
    "leaky_tick_interval": 1,
    "leaky_tick_reduction": 1,
    "concurrency_limit": 1,
    "is_manual_reduction_disabled": None,
}
_NODE_DEFAULTS: Mapping[str, int | bool] = {
    "sliding_window_limit": 0,
    "sliding_window_duration": 1000,
    "sliding_window_timestamp_cleanup_interval": 120_000,
    "sliding_window_timestamp_cleanup_expiry": 120_000,
    "leaky_tick_interval": 30_000,
    "is_manual_reduction_disabled": False,
}


def _node_settings(config: Mapping[str, Any]) -> dict[str, dict[str, int | bool]]:
    """Validates the flat config; returns the given settings per group."""
    given: dict[str, dict[str, int | bool]] = {group: {} for group in NODE_GROUPS}
    seen: dict[tuple[str, str], str] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise InvalidType((), f"the node limiter config's keys must be str, got {type(key).__name__} {key!r}")
        loc = (key,)  # the config is flat: a key such as "general.leaky_limit" is one place
        short = key.removeprefix(NODE_LIMITER_PREFIX)
        group, dot, setting = short.partition(".")
        if not dot:
            raise InvalidValue(loc, f"not a limiter setting; expected [{NODE_LIMITER_PREFIX}]<group>.<setting>")
        if group not in NODE_GROUPS:
            raise InvalidValue(loc, f"unknown group {group!r} (groups: {', '.join(NODE_GROUPS)})")
        if setting not in NODE_LIMITER_KEYS:
            raise InvalidValue(loc, f"unknown setting {setting!r} (settings: {', '.join(NODE_LIMITER_KEYS)})")
        if (group, setting) in seen:
            raise InvalidValue(loc, f"given twice (also as {seen[group, setting]})")
        seen[group, setting] = key
        minimum = NODE_LIMITER_KEYS[setting]
        if minimum is None:
            if not isinstance(value, bool):
                raise InvalidType(loc, f"must be a bool, got {type(value).__name__}")
        else:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidType(loc, f"must be an int, got {type(value).__name__}")
            if value < minimum:
                raise InvalidValue(loc, f"must be at least {minimum}, got {value}")
        given[group][setting] = value
    return given


def node_limiter(
    config: Mapping[str, Any],
    routes: Mapping[str, str],
    *,
    exempt_peers: Iterable[str] | None = None,
    clock: ManualClock | None = None,
) -> Limiter:
    """A hybrid HTTP limiter, one group per kind of endpoint: per (peer, group) a concurrency limit, then a
    sliding window, then leaky-bucket tokens as the fallback, configured by flat ``<group>.<setting>`` keys.

    Args:
        config: flat settings ``<group>.<setting>``, with or without the ``http_api.limiter.`` prefix:
            ``sliding_window_limit`` (0 = no sliding window), ``sliding_window_duration`` (ms, 1000),
            ``sliding_window_timestamp_cleanup_interval`` / ``_expiry`` (ms, 120000: accepted and
            validated; the core drops idle state itself), ``leaky_limit`` (the bucket's capacity;
            defaults in ``NODE_GROUPS``), ``leaky_tick_interval`` (ms, 30000),
            ``leaky_tick_reduction`` (tokens drained per tick, default ``leaky_limit``),
            ``concurrency_limit`` (default ``leaky_limit``), ``is_manual_reduction_disabled`` (False).
        routes: ``path regex -> group``, tried in order (first match wins); groups are those of ``NODE_GROUPS``.
            Only routed groups limit anything; a path no regex matches is not limited.
        exempt_peers: peers never limited (exact match), e.g. the local ones.
        clock: a [`ManualClock`][ratekeeper.ManualClock] for tests.

    Per (peer, group): ``lim.concurrent(peer, path)`` refuses once ``concurrency_limit`` requests are
    in flight; otherwise the sliding window admits while under its limit, and past it the leaky bucket
    admits while it has room (``leaky_limit`` tokens, ``leaky_tick_reduction`` drained every
    ``leaky_tick_interval``); then the request is refused. ``lim.reduce(peer, path, n)`` gives ``n``
    leaky tokens back, unless ``is_manual_reduction_disabled``.

    Raises:
        InvalidValue, InvalidType: a bad setting or route; ``loc`` names the key (``("general.leaky_limit",)``,
            ``("routes['^/x']",)``).
    """
    settings = _node_settings(config)
    limits_of: dict[str, tuple[list[Limit], bool]] = {}
    rules = []
    rule_locs: list[Loc] = []
    for raw_pattern, group in routes.items():
        loc = _keyed("routes", raw_pattern)
        if not isinstance(raw_pattern, str):
            raise InvalidType(loc, f"a route's pattern must be a str, got {type(raw_pattern).__name__}")
        if not isinstance(group, str):
            raise InvalidType(loc, f"must be a group name (str), got {type(group).__name__}")
        if group not in NODE_GROUPS:
            raise InvalidValue(loc, f"unknown group {group!r} (groups: {', '.join(NODE_GROUPS)})")
        if group not in limits_of:
            limits_of[group] = _node_limits(group, settings[group])
        limits, reduction = limits_of[group]
        try:
            rules.append(Rule(raw_pattern, group, limits=limits, policy="fallback", reduction=reduction))
        except InvalidArgument as error:
            raise RulePlaces.of_option(loc).move(error, 0) from None
        rule_locs.append(loc)
    try:
        return Limiter(rules=rules, exempt_peers=exempt_peers, clock=clock)
    except InvalidArgument as error:
        raise _limiter_error(error, [RulePlaces.of_option(loc) for loc in rule_locs]) from None


# The setting a field of a node limit comes from: (the limit's kind, the field of the core's error).
_SETTING_OF_FIELD: Mapping[tuple[str, str | int], str] = {
    ("sliding_window", "rate"): "sliding_window_duration",
    ("leaky_bucket", "rate"): "leaky_tick_interval",
    ("leaky_bucket", "burst"): "leaky_limit",
    ("concurrency", "concurrency"): "concurrency_limit",
}


def _node_limit(group: str, kind: str, **arguments: Any) -> Limit:
    """``Limit(**arguments)`` of ``group``; a core error about it is moved to the setting it comes from."""
    try:
        return Limit(**arguments)
    except InvalidArgument as error:
        setting = _SETTING_OF_FIELD.get((kind, error.loc[0])) if error.loc else None
        if setting is None:
            raise error.at(f"{NODE_LIMITER_PREFIX}{group}") from None
        raise error.at(f"{group}.{setting}", drop=1) from None


def _node_limits(group: str, given: Mapping[str, int | bool]) -> tuple[list[Limit], bool]:
    def setting(name: str) -> int:
        value = given.get(name, _NODE_DEFAULTS.get(name))
        assert isinstance(value, int)
        return int(value)

    leaky_limit = int(given.get("leaky_limit", NODE_GROUPS[group]))
    reduction = int(given.get("leaky_tick_reduction", leaky_limit))
    concurrency = int(given.get("concurrency_limit", leaky_limit))
    window_limit = setting("sliding_window_limit")
    limits = []
    if window_limit > 0:
        duration = setting("sliding_window_duration")
        rate = f"{window_limit}/{duration}ms"
        limits.append(_node_limit(group, "sliding_window", rate=rate, algorithm="sliding_window"))
    rate = f"{reduction}/{setting('leaky_tick_interval')}ms"
    limits.append(_node_limit(group, "leaky_bucket", rate=rate, burst=leaky_limit, algorithm="leaky_bucket"))
    limits.append(_node_limit(group, "concurrency", concurrency=concurrency))
    disabled = bool(given.get("is_manual_reduction_disabled", False))
    return limits, not disabled
