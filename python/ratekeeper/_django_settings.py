"""``settings.RATEKEEPER`` for the Django integration, read and checked once (and again when it changes), and
the rates it and the decorators are given (DRF's ``DEFAULT_THROTTLE_RATES``, django-ratelimit's spellings)
read as limits and added to the limiter as groups.

Imported by [`ratekeeper.django`][ratekeeper.django] (which re-exports ``SETTINGS`` and ``get_limiter``), by
``ratekeeper._django_gate`` and by ``ratekeeper._drf``; it imports none of them.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ratekeeper._core import Decision, Limit, Rate, Rule
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, Loc
from ratekeeper._http import WebOptions
from ratekeeper._peer_rates import expand_limits
from ratekeeper._stats import Algorithm
from ratekeeper.keys import ClientIP, KeyCallable, checked_key, client_ip
from ratekeeper.limiter import NAMED_ONLY, Limiter

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

__all__ = ["SETTINGS", "get_limiter"]

#: The keys of ``settings.RATEKEEPER``, all optional. A value shown as "dotted path" may also be given as
#: the object itself.
SETTINGS = {
    "LIMITER": "the Limiter (or its dotted path); default: one of its own, with no rules",
    "CONFIG": "a TOML/YAML config file to build the limiter from (Limiter.from_file), instead of LIMITER",
    "KEY": "who is asking: a callable of the request (or its dotted path), e.g. ratekeeper.keys.header('X-API-Key')"
    " or ratekeeper.django.user(); default: the client's IP, behind TRUSTED_PROXIES",
    "TRUSTED_PROXIES": "addresses or networks of the proxies in front of the service (client_ip's trusted_proxies)",
    "EXEMPT_PATHS": "path regexes the middleware never limits",
    "MODE": "'refuse' (default) or 'delay' (wait up to MAX_DELAY seconds for the slot, then refuse)",
    "MAX_DELAY": "the longest wait in delay mode, in seconds (default 5.0)",
    "SHADOW": "decide, count and log what would be refused; refuse nothing",
    "HEADERS": "a ratekeeper.HeaderOptions: which rate-limit fields responses carry",
    "ON_MISSING_KEY": "'refuse' (default; MISSING_KEY_STATUS) or 'anonymous' (decided as ANONYMOUS_KEY)",
    "MISSING_KEY_STATUS": "401, 403 or 429 (default)",
    "ANONYMOUS_KEY": "the key of requests without one, with ON_MISSING_KEY 'anonymous' (default 'anonymous')",
    "COST": "a callable of the request giving its cost (or its dotted path)",
    "REFUND_WHEN": "a predicate on the response status: true gives the request back (or its dotted path)",
    "ON_REFUSED": "a callable (request, decision) -> HttpResponse answering a refusal (or its dotted path)",
    "LOG_REFUSALS": "log the limiter's own 4xx answers as Django logs any 4xx (a 'django.request' warning each),"
    " and one 'ratekeeper.refusals' record per refusal with its peer, group, path and retry_after;"
    " default False: a flood of refusals would flood the log, and the limiter counts them (stats, metrics)",
    "PENALTY": "a ratekeeper.Penalty: a key refused that often within a time is refused for a while,"
    " whatever its rates",
    "ALGORITHM": "the algorithm of the rates @limit is given as strings (default 'gcra'; 'fixed_window' decides"
    " as django-ratelimit)",
    "THROTTLE_ALGORITHM": "the algorithm of the DRF throttles' rates given as strings (default 'sliding_log',"
    " DRF's own; 'gcra' spreads a burst's refusals evenly)",
    "IPV4_PREFIX": "the default key groups IPv4 clients by this many leading bits (default 32: each address)",
    "IPV6_PREFIX": "the default key groups IPv6 clients by this many leading bits (default 128; 64: a subnet)",
}

_ALGORITHMS: tuple[Algorithm, ...] = (
    "gcra",
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "leaky_bucket",
)

# Settings given to WebOptions as they are, by their lower-case names.
_WEB_OPTIONS = ("MODE", "MAX_DELAY", "SHADOW", "HEADERS", "ON_MISSING_KEY", "MISSING_KEY_STATUS", "ANONYMOUS_KEY")
_WEB_FIELDS = frozenset(field.name for field in fields(WebOptions))


# --- the settings ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Config:
    """``settings.RATEKEEPER``, checked once (and again after the setting changes)."""

    limiter: Limiter
    configured: bool  # LIMITER or CONFIG given: the middleware has rules to apply
    key: KeyCallable | None  # KEY, or None for each user's own default
    client_ip: ClientIP
    exempt: tuple[re.Pattern[str], ...]
    web: dict[str, Any]  # WebOptions' keywords but the key
    on_refused: Callable[[HttpRequest, Decision], HttpResponseBase] | None
    log_refusals: bool
    trusted_proxies: tuple[str, ...]
    algorithm: Algorithm  # ALGORITHM: @limit's rates given as strings
    throttle_algorithm: Algorithm  # THROTTLE_ALGORITHM: the DRF throttles'

    def options(self, limiter: Limiter, key: KeyCallable | None, cost: Any = None) -> WebOptions:
        """The web options of the settings, for ``limiter``; ``key`` and ``cost`` replace the settings'."""
        web = self.web if cost is None else {**self.web, "cost": cost}
        return WebOptions(limiter, key=key or self.key or self.client_ip, **web)


_config_cache: list[_Config] = []  # the settings in force, checked; emptied when they change
_default_limiter: list[Limiter] = []
_generation = [0]  # bumped when RATEKEEPER or REST_FRAMEWORK changes: what was built from them is rebuilt


def _on_setting_changed(*, setting: str, **_: object) -> None:
    if setting in ("RATEKEEPER", "REST_FRAMEWORK"):
        _config_cache.clear()
        _generation[0] += 1


setting_changed.connect(_on_setting_changed)


def _config() -> _Config:
    if not _config_cache:
        _config_cache.append(_load(getattr(django_settings, "RATEKEEPER", {})))
    return _config_cache[0]


def get_limiter() -> Limiter:
    """The limiter of the settings: ``RATEKEEPER["LIMITER"]``, the one built from ``RATEKEEPER["CONFIG"]``,
    or, when neither is set, one of the process's own with no rules (the groups of [`limit`][ratekeeper.django.limit]
    and the DRF throttles are added to it)."""
    return _config().limiter


def _at(error: InvalidArgument, name: str) -> InvalidArgument:
    """An error of a WebOptions field moved to its setting: ``mode`` -> ``RATEKEEPER.MODE``."""
    return error.at("RATEKEEPER", name, drop=1)


def _imported(name: str, value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return import_string(value)
    except ImportError as error:
        raise InvalidValue(("RATEKEEPER", name), f"cannot import {value!r}: {error}") from None


def _function(raw: Mapping[str, Any], name: str) -> Any:
    value = _imported(name, raw.get(name))
    if value is not None and not callable(value):
        raise InvalidType(("RATEKEEPER", name), f"must be callable or its dotted path, got {type(value).__name__}")
    return value


def _load(raw: object) -> _Config:
    if not isinstance(raw, Mapping):
        raise InvalidType("RATEKEEPER", f"must be a dict, got {type(raw).__name__}")
    for name in raw:
        if name not in SETTINGS:
            raise InvalidValue(("RATEKEEPER", str(name)), f"unknown setting; known: {', '.join(SETTINGS)}")
    configured = "LIMITER" in raw or "CONFIG" in raw
    if "LIMITER" in raw and "CONFIG" in raw:
        raise InvalidValue(("RATEKEEPER", "CONFIG"), "give LIMITER or CONFIG, not both")
    if "LIMITER" in raw:
        limiter = _imported("LIMITER", raw["LIMITER"])
        if not isinstance(limiter, Limiter):
            raise InvalidType(
                ("RATEKEEPER", "LIMITER"),
                f"must be a ratekeeper.Limiter or its dotted path, got {type(limiter).__name__}",
            )
    elif "CONFIG" in raw:
        path = raw["CONFIG"]
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidType(("RATEKEEPER", "CONFIG"), f"must be a file path, got {type(path).__name__}")
        try:
            limiter = Limiter.from_file(path)
        except OSError as error:
            raise InvalidValue(("RATEKEEPER", "CONFIG"), f"cannot read {os.fspath(path)!r}: {error.strerror}") from None
    else:
        if not _default_limiter:
            _default_limiter.append(Limiter(rules=[]))
        limiter = _default_limiter[0]
    proxies = raw.get("TRUSTED_PROXIES", ())
    prefixes = {}
    for name in ("IPV4_PREFIX", "IPV6_PREFIX"):
        if name in raw:
            prefixes[name.lower()] = raw[name]
    try:
        trusted = client_ip(proxies, **prefixes)
    except InvalidArgument as error:
        raise _at(
            error, "TRUSTED_PROXIES" if error.loc[:1] == ("trusted_proxies",) else str(error.loc[0]).upper()
        ) from None
    exempt = raw.get("EXEMPT_PATHS", ())
    if isinstance(exempt, str) or not isinstance(exempt, Sequence):
        raise InvalidType(("RATEKEEPER", "EXEMPT_PATHS"), f"must be a list of regexes, got {type(exempt).__name__}")
    patterns = []
    for index, pattern in enumerate(exempt):
        if not isinstance(pattern, str):
            raise InvalidType(("RATEKEEPER", "EXEMPT_PATHS", index), f"must be a str, got {type(pattern).__name__}")
        try:
            patterns.append(re.compile(pattern))
        except re.error as error:
            raise InvalidValue(("RATEKEEPER", "EXEMPT_PATHS", index), f"{pattern!r} is not a regex: {error}") from None
    web = {name.lower(): raw[name] for name in _WEB_OPTIONS if name in raw}
    if "PENALTY" in raw:
        web["penalty"] = raw["PENALTY"]
    web["cost"], web["refund_when"] = _function(raw, "COST"), _function(raw, "REFUND_WHEN")
    key = _function(raw, "KEY")
    if key is not None:
        checked_key(key, ("RATEKEEPER", "KEY"))
    log_refusals = raw.get("LOG_REFUSALS", False)
    if not isinstance(log_refusals, bool):
        raise InvalidType(("RATEKEEPER", "LOG_REFUSALS"), f"must be a bool, got {type(log_refusals).__name__}")
    if log_refusals and "log_refusals" in _WEB_FIELDS:
        web["log_refusals"] = True  # the record on "ratekeeper.refusals", beside Django's own
    on_refused = _function(raw, "ON_REFUSED")
    algorithms = []
    for name, default in (("ALGORITHM", "gcra"), ("THROTTLE_ALGORITHM", "sliding_log")):
        algorithm = raw.get(name, default)
        if algorithm not in _ALGORITHMS:
            raise InvalidValue(("RATEKEEPER", name), f"must be one of {', '.join(_ALGORITHMS)}, got {algorithm!r}")
        algorithms.append(algorithm)
    _check_throttle_rates(algorithms[1])
    config = _Config(
        limiter,
        configured,
        key,
        trusted,
        tuple(patterns),
        web,
        on_refused,
        log_refusals,
        tuple(proxies),
        algorithms[0],
        algorithms[1],
    )
    try:
        config.options(limiter, None)  # every option checked now, not at the first request
    except InvalidArgument as error:
        raise _at(error, str(error.loc[0]).upper()) from None
    return config


_THROTTLE_RATES: Loc = ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES")


def _check_throttle_rates(algorithm: Algorithm) -> None:
    """DRF's ``DEFAULT_THROTTLE_RATES`` read as ratekeeper's throttles read them, with the settings (at
    start-up when the middleware is installed), when ``DEFAULT_THROTTLE_CLASSES`` names one of them: a typo
    fails there, naming its scope, not at the first request the scope throttles. (A throttle named only at
    its views reads its scope's rate at its first request.)"""
    drf = getattr(django_settings, "REST_FRAMEWORK", None)
    if not isinstance(drf, Mapping):
        return
    classes = drf.get("DEFAULT_THROTTLE_CLASSES") or ()
    rates = drf.get("DEFAULT_THROTTLE_RATES")
    if isinstance(classes, str) or not any(_ratekeeper_throttle(given) for given in classes):
        return
    if not isinstance(rates, Mapping):
        raise InvalidType(_THROTTLE_RATES, f"must be a dict of rates by scope, got {type(rates).__name__}")
    for scope, rate in rates.items():
        _throttle_limits(rate, algorithm, (*_THROTTLE_RATES, str(scope)))


def _ratekeeper_throttle(given: object) -> bool:
    """Whether a ``DEFAULT_THROTTLE_CLASSES`` entry is one of ratekeeper's throttles (by its dotted path, or
    a class made from one), without importing anything."""
    if isinstance(given, str):
        return given.startswith("ratekeeper.")
    return isinstance(given, type) and any(base.__module__ == "ratekeeper._drf" for base in given.__mro__)


def _throttle_limits(rate: object, algorithm: Algorithm, loc: Loc) -> list[Limit] | None:
    """A DRF throttle's rate as limits, read as DRF's are (``"100/day"``; a list of them; a
    [`Limit`][ratekeeper.Limit]); ``None`` when the rate is ``None``, DRF's "not throttled".

    Raises:
        InvalidValue, InvalidType: at ``loc`` (a single rate's error there, a list's at its index).
    """
    if rate is None:
        return None
    given: object
    if isinstance(rate, (list, tuple)) and not _is_count_and_period(rate):
        single, given = False, list(rate)
    elif isinstance(rate, (str, Rate, Limit, tuple)):
        single, given = True, rate
    else:
        raise InvalidType(loc, f"must be a rate, a Limit, a list of them or None, got {type(rate).__name__}")
    try:
        items = _peer_rate_items(given, loc)
        return None if items is None else _built_limits(items, algorithm, loc)
    except InvalidArgument as error:
        if single and error.loc[len(loc) : len(loc) + 1] == (0,):  # a single rate's error is the scope's own
            raise error.at(*loc, drop=len(loc) + 1) from None
        raise


# --- the groups added to the limiter ----------------------------------------------------------------------------------

# The groups this module added to each limiter, with the limits it gave them: only those may be rebuilt with
# other limits (the settings changed, a throttle class's rate changed); a group of the user's own is never
# touched.
_added: weakref.WeakKeyDictionary[Limiter, dict[str, list[Limit]]] = weakref.WeakKeyDictionary()
_groups_lock = threading.Lock()


def _set_group(limiter: Limiter, name: str, limits: Sequence[Limit | Rate | str], loc: Loc) -> None:
    """Adds the per-route group ``name`` with ``limits``; when this module added it before with other limits,
    its limits are replaced in place and its keys keep their states, as [`Limiter.reload`][ratekeeper.Limiter.reload]
    keeps them.

    Raises:
        InvalidValue: ``name`` is a group of the limiter's own (its rules) with other limits, at ``loc``.
    """
    wanted = Rule(NAMED_ONLY, name, limits=limits)
    with _groups_lock:
        rules = limiter.rules
        same = [index for index, rule in enumerate(rules) if rule.group == name]
        if not same:
            limiter.add_group(name, wanted.limits)
        elif rules[same[0]].limits != wanted.limits:
            ours = _added.get(limiter, {}).get(name)
            found = rules[same[0]]
            if len(same) > 1 or found.pattern != NAMED_ONLY or ours is None or found.limits != ours:
                raise InvalidValue(loc, f"group {name!r} already exists in the limiter with other limits: {found!r}")
            rules[same[0]] = wanted
            limiter._reconfigure(rules, limiter.exempt_peers, limiter.exempt_paths)
        _added.setdefault(limiter, {})[name] = wanted.limits


def _peer_rate_items(value: object, loc: Loc) -> list[object] | None:
    """A rate as the peers write it, as limit items: a tuple ``(count, seconds)`` (django-ratelimit's) is a
    [`Rate`][ratekeeper.Rate]; a string may be a peer's spelling (``"100/10"``, ``"10 per minute"``) or hold several
    limits (``"10/s; 100/min"``); ``None`` is no limit (``None`` returned when nothing else is given).

    Raises:
        InvalidValue, InvalidType: at ``(*loc, index)``; a count of zero among them.
    """
    if _is_count_and_period(value):
        assert isinstance(value, tuple)
        count, seconds = value
        try:
            return [Rate(count, per=float(seconds))]
        except InvalidArgument as error:
            raise type(error)(loc, error.msg) from None
    given: list[object] = list(value) if isinstance(value, list) else [value]
    items: list[object] = []
    nones = 0
    for index, spec in enumerate(given):
        try:
            expanded = expand_limits([spec], "limits")
        except InvalidArgument as error:
            at = (*loc, index, "rate") if isinstance(error, InvalidValue) else (*loc, index)  # a rate string's
            raise type(error)(at, error.msg) from None
        if expanded is None:
            nones += 1
        else:
            items.extend(expanded)
    return None if nones and not items else items


def _is_count_and_period(value: object) -> bool:
    """django-ratelimit's rate tuple: ``(count, seconds)``."""
    return isinstance(value, tuple) and len(value) == 2 and all(type(part) is int for part in value)


def _admits_nothing(rate: object) -> bool:
    """django-ratelimit's rate of zero (``"0/m"``, ``(0, 60)``): every request is limited."""
    if _is_count_and_period(rate):
        assert isinstance(rate, tuple)
        return bool(rate[0] == 0)
    return isinstance(rate, str) and _ZERO_COUNT.match(rate) is not None


_ZERO_COUNT = re.compile(r"^\s*0+\s*(?:/|\s+per\s+)", re.IGNORECASE)


def _built_limits(items: Sequence[object], algorithm: Algorithm, loc: Loc) -> list[Limit]:
    """Limit items as [`Limit`][ratekeeper.Limit], a rate (``"5/min"``, [`Rate`][ratekeeper.Rate]) enforced by
    ``algorithm``."""
    limits: list[Limit] = []
    for index, item in enumerate(items):
        if isinstance(item, Limit):
            limits.append(item)
        elif isinstance(item, (str, Rate)):
            try:
                limits.append(Limit(item, algorithm=algorithm))
            except InvalidArgument as error:
                raise error.at(*loc, index) from None
        else:
            raise InvalidType((*loc, index), f"must be a rate or a ratekeeper.Limit, got {type(item).__name__}")
    return limits


def _spelled(limits: Sequence[Limit]) -> str:
    """The limits as a group name's suffix: ``"10/min"``, ``"10/s; 1000/h"``."""
    return "; ".join(
        str(limit.rate) if limit.rate is not None and limit.burst == limit.rate.count else repr(limit)
        for limit in limits
    )
