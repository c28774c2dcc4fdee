"""Presets that reproduce the seeds' rate limiters with ratekeeper's Limiter.

- :func:`peer_throttle` — seed 000, Arweave's ``ar_rate_limiter`` (Erlang gen_server): per (peer, type)
  sliding log over ``throttle_period``; a request waits (``lim.throttle``) instead of being refused
  while the window already holds the threshold, 80 % of the period's share of the rpm.
- :func:`node_limiter` — seed 003, the Arweave node's hybrid HTTP limiter: per group, a concurrency
  limit, then a sliding window, then leaky-bucket tokens as the fallback; manual reduction of tokens.

Both return a plain :class:`~ratekeeper.Limiter`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from ratekeeper._core import Limit, ManualClock, Rule
from ratekeeper.limiter import Limiter

__all__ = [
    "NODE_GROUPS",
    "NODE_LIMITER_KEYS",
    "node_limiter",
    "peer_throttle",
    "throttle_threshold",
]


def _kind(error: ValueError | TypeError) -> type[ValueError] | type[TypeError]:
    return TypeError if isinstance(error, TypeError) else ValueError


def _core_error(error: ValueError | TypeError, place: str, field: str | None = None) -> NoReturn:
    """Re-raises a core error at ``place``; its ``field: `` prefix is dropped when it is ``field``."""
    message = str(error)
    if field is not None and message.startswith(f"{field}: "):
        message = message[len(field) + 2 :]
    raise _kind(error)(f"{place}: {message}") from None


# ---------------------------------------------------------------------------------------------------
# Seed 000: ar_rate_limiter
# ---------------------------------------------------------------------------------------------------

PEER_THROTTLE_OPTIONS = ("throttle_period", "throttle_rpm_by_path", "throttle_exempt_peers", "throttle_exempt_paths")
DEFAULT_THROTTLE_PERIOD_MS = 30_000


def throttle_threshold(rpm: int, period_ms: int = DEFAULT_THROTTLE_PERIOD_MS) -> int:
    """Requests admitted per ``period_ms`` window for ``rpm`` requests per minute, as seed 000 computes it.

    The period's share of the rpm (``rpm * period_ms // 60000``, half of it for the default 30 s), of
    which 80 % is admitted, and at least 1: rpm 60 -> 24, rpm 10 -> 4, rpm 1 -> 1.
    """
    return max(1, (rpm * period_ms // 60_000) * 80 // 100)


def _text(value: object, place: str) -> str:
    """A str, or bytes decoded as UTF-8 (the seed's Erlang binaries), or an atom-like str."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise ValueError(f"{place}: {value!r} is not UTF-8") from None
    if isinstance(value, str):
        return value
    raise TypeError(f"{place}: must be a str or bytes, got {type(value).__name__}")


def _positive_int(value: object, place: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{place}: must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{place}: must be a positive int, got {value}")
    return value


def _text_list(value: object, place: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{place}: must be a list of str or bytes, got {type(value).__name__}")
    return [_text(item, f"{place}[{index}]") for index, item in enumerate(value)]


def _type_rpm(spec: object, place: str) -> tuple[str, int]:
    if isinstance(spec, (str, bytes)) or not isinstance(spec, (tuple, list)) or len(spec) != 2:
        raise TypeError(f"{place}: must be a (type, rpm) pair, got {spec!r}")
    return _text(spec[0], f"{place}[0]"), _positive_int(spec[1], f"{place}[1]")


def peer_throttle(opts: Mapping[Any, Any], *, clock: ManualClock | None = None) -> Limiter:
    """A limiter that behaves like seed 000's ``ar_rate_limiter``; call ``throttle(peer, path)`` on it.

    Options (names and values may be str or bytes, like the seed's binaries):

    - ``throttle_period``: the window in ms (default 30000).
    - ``throttle_rpm_by_path``: a mapping ``path regex -> (type, requests per minute)``, tried in the
      mapping's order (first match wins), or a single ``(type, rpm)`` pair for every path. Requests
      are counted per (peer, type); paths matching no pattern are not limited.
    - ``throttle_exempt_peers``: peers never limited (exact match).
    - ``throttle_exempt_paths``: path regexes never limited.

    Per (peer, type), a sliding log admits a request while fewer than :func:`throttle_threshold`
    requests are in the last ``throttle_period`` ms; ``throttle`` waits until the oldest one leaves
    the window rather than refusing. ``off()`` / ``on()`` as in the seed. Other option names are
    ignored (the seed receives the whole node's options), except unknown ``throttle_*`` ones, which are
    errors. Empty options give a limiter that limits nothing, like the seed's missing server.

    Raises:
        ValueError, TypeError: a bad option; the message names it.
    """
    options: dict[str, Any] = {}
    for key, value in opts.items():
        name = _text(key, "option name") if isinstance(key, (str, bytes)) else None
        if name is None:
            continue
        if name.startswith("throttle_") and name not in PEER_THROTTLE_OPTIONS:
            raise ValueError(f"{name}: unknown option (known: {', '.join(PEER_THROTTLE_OPTIONS)})")
        if name in PEER_THROTTLE_OPTIONS:
            options[name] = value
    period_ms = _positive_int(options.get("throttle_period", DEFAULT_THROTTLE_PERIOD_MS), "throttle_period")
    by_path = options.get("throttle_rpm_by_path")
    routes: list[tuple[str, str, int, str]] = []  # pattern, type, rpm, place
    if by_path is None:
        pass
    elif isinstance(by_path, Mapping):
        for raw_pattern, spec in by_path.items():
            pattern = _text(raw_pattern, "throttle_rpm_by_path key")
            place = f"throttle_rpm_by_path[{pattern!r}]"
            routes.append((pattern, *_type_rpm(spec, place), place))
    else:
        routes.append(("", *_type_rpm(by_path, "throttle_rpm_by_path"), "throttle_rpm_by_path"))
    rules = []
    rpm_of_type: dict[str, tuple[int, str]] = {}
    for pattern, kind, rpm, place in routes:
        if kind in rpm_of_type and rpm_of_type[kind][0] != rpm:
            earlier_rpm, earlier = rpm_of_type[kind]
            raise ValueError(f"{place}: type {kind!r} already has {earlier_rpm} rpm from {earlier}")
        rpm_of_type[kind] = (rpm, place)
        threshold = throttle_threshold(rpm, period_ms)
        try:
            limit = Limit(f"{threshold}/{period_ms}ms", algorithm="sliding_log")
            rules.append(Rule(pattern, kind, limits=[limit]))
        except (ValueError, TypeError) as error:
            _core_error(error, place, "pattern")
    exempt_peers = _text_list(options.get("throttle_exempt_peers", []), "throttle_exempt_peers")
    exempt_paths = _text_list(options.get("throttle_exempt_paths", []), "throttle_exempt_paths")
    try:
        return Limiter(rules=rules, exempt_peers=exempt_peers, exempt_paths=exempt_paths, clock=clock)
    except (ValueError, TypeError) as error:
        message = str(error)
        if message.startswith("exempt_"):  # "exempt_paths[0]: ..." -> "throttle_exempt_paths[0]: ..."
            raise _kind(error)(f"throttle_{message}") from None
        raise


# ---------------------------------------------------------------------------------------------------
# Seed 003: the node's hybrid limiter
# ---------------------------------------------------------------------------------------------------

# The seed's groups and their default leaky_limit.
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
            raise TypeError(f"node limiter config: keys must be str, got {type(key).__name__} {key!r}")
        short = key.removeprefix(NODE_LIMITER_PREFIX)
        group, dot, setting = short.partition(".")
        if not dot:
            raise ValueError(f"{key}: not a limiter setting; expected [{NODE_LIMITER_PREFIX}]<group>.<setting>")
        if group not in NODE_GROUPS:
            raise ValueError(f"{key}: unknown group {group!r} (groups: {', '.join(NODE_GROUPS)})")
        if setting not in NODE_LIMITER_KEYS:
            raise ValueError(f"{key}: unknown setting {setting!r} (settings: {', '.join(NODE_LIMITER_KEYS)})")
        if (group, setting) in seen:
            raise ValueError(f"{key}: given twice (also as {seen[group, setting]})")
        seen[group, setting] = key
        minimum = NODE_LIMITER_KEYS[setting]
        if minimum is None:
            if not isinstance(value, bool):
                raise TypeError(f"{key}: must be a bool, got {type(value).__name__}")
        else:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{key}: must be an int, got {type(value).__name__}")
            if value < minimum:
                raise ValueError(f"{key}: must be at least {minimum}, got {value}")
        given[group][setting] = value
    return given


def node_limiter(
    config: Mapping[str, Any],
    routes: Mapping[str, str],
    *,
    exempt_peers: Iterable[str] | None = None,
    clock: ManualClock | None = None,
) -> Limiter:
    """A limiter that behaves like seed 003's hybrid node limiter.

    Args:
        config: flat settings ``<group>.<setting>``, with or without the ``http_api.limiter.`` prefix:
            ``sliding_window_limit`` (0 = no sliding window), ``sliding_window_duration`` (ms, 1000),
            ``sliding_window_timestamp_cleanup_interval`` / ``_expiry`` (ms, 120000: accepted and
            validated; the core drops idle state itself), ``leaky_limit`` (the bucket's capacity;
            defaults in :data:`NODE_GROUPS`), ``leaky_tick_interval`` (ms, 30000),
            ``leaky_tick_reduction`` (tokens drained per tick, default ``leaky_limit``),
            ``concurrency_limit`` (default ``leaky_limit``), ``is_manual_reduction_disabled`` (False).
        routes: ``path regex -> group``, tried in order (first match wins); groups are the seed's.
            Only routed groups limit anything; a path no regex matches is not limited.
        exempt_peers: the local peers the seed exempts from limiting.
        clock: a :class:`~ratekeeper.ManualClock` for tests.

    Per (peer, group): ``lim.concurrent(peer, path)`` refuses once ``concurrency_limit`` requests are
    in flight; otherwise the sliding window admits while under its limit, and past it the leaky bucket
    admits while it has room (``leaky_limit`` tokens, ``leaky_tick_reduction`` drained every
    ``leaky_tick_interval``); then the request is refused. ``lim.reduce(peer, path, n)`` gives ``n``
    leaky tokens back, unless ``is_manual_reduction_disabled``.

    Raises:
        ValueError, TypeError: a bad setting or route; the message names the key.
    """
    settings = _node_settings(config)
    limits_of: dict[str, tuple[list[Limit], bool]] = {}
    rules = []
    for raw_pattern, group in routes.items():
        place = f"routes[{raw_pattern!r}]"
        if not isinstance(raw_pattern, str):
            raise TypeError(f"{place}: a route's pattern must be a str, got {type(raw_pattern).__name__}")
        if not isinstance(group, str):
            raise TypeError(f"{place}: must be a group name (str), got {type(group).__name__}")
        if group not in NODE_GROUPS:
            raise ValueError(f"{place}: unknown group {group!r} (groups: {', '.join(NODE_GROUPS)})")
        if group not in limits_of:
            limits_of[group] = _node_limits(group, settings[group])
        limits, reduction = limits_of[group]
        try:
            rules.append(Rule(raw_pattern, group, limits=limits, policy="fallback", reduction=reduction))
        except (ValueError, TypeError) as error:
            _core_error(error, place, "pattern")
    try:
        return Limiter(rules=rules, exempt_peers=exempt_peers, clock=clock)
    except (ValueError, TypeError) as error:
        _core_error(error, "node limiter")


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
    try:
        if window_limit > 0:
            duration = setting("sliding_window_duration")
            limits.append(Limit(f"{window_limit}/{duration}ms", algorithm="sliding_window"))
        interval = setting("leaky_tick_interval")
        limits.append(Limit(f"{reduction}/{interval}ms", burst=leaky_limit, algorithm="leaky_bucket"))
        limits.append(Limit(concurrency=concurrency))
    except (ValueError, TypeError) as error:
        _core_error(error, f"{NODE_LIMITER_PREFIX}{group}")
    disabled = bool(given.get("is_manual_reduction_disabled", False))
    return limits, not disabled
