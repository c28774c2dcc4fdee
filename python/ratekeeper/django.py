"""Rate limiting for Django: a middleware, a view decorator, and throttles for Django REST framework.

>>> # settings.py
>>> MIDDLEWARE = [..., "ratekeeper.django.RateLimitMiddleware"]
>>> RATEKEEPER = {"LIMITER": "myproject.limits.lim", "TRUSTED_PROXIES": ["10.0.0.0/8"]}
>>> # views.py
>>> @limit("5/min")
... def login(request): ...

- [`RateLimitMiddleware`][ratekeeper.django.RateLimitMiddleware] decides every request by the limiter's rules on its
  path, before Django resolves the URL: a refusal costs less than serving the smallest view. One class serves WSGI and
  ASGI Django (``sync_capable`` and ``async_capable``), with no thread hop on either.
- [`limit`][ratekeeper.django.limit] limits a view (a function, sync or async, or a class-based view) in a group of its
own.
- ``RateKeeperThrottle``, ``ScopedRateKeeperThrottle``, ``AnonRateKeeperThrottle`` and
  ``UserRateKeeperThrottle`` are DRF throttles (imported from here only when named: DRF is optional),
  with their rates in DRF's own ``DEFAULT_THROTTLE_RATES``.

Refusals answer 429 with the JSON body, ``Retry-After`` and the IETF ``RateLimit`` / ``RateLimit-Policy``
fields of the other integrations (DRF's throttles: DRF's own 429, with the fields added); allowed
responses carry the fields too. Every decision goes through ``ratekeeper._http.Gatekeeper``, the core
the ASGI middleware and the Flask extension share, so modes, shadow, missing keys, refunds and permits
behave alike. The settings live in ``settings.RATEKEEPER``; see ``SETTINGS``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings as django_settings
from django.core.exceptions import PermissionDenied
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse
from django.http.response import ResponseHeaders
from django.utils.module_loading import import_string

from ratekeeper._core import Decision, Limit, Rate, Rule
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, Loc
from ratekeeper._http import Admission, Gatekeeper, WebOptions, declaring
from ratekeeper._peer_rates import expand_limits
from ratekeeper._stats import Algorithm
from ratekeeper.keys import ClientIP, KeyCallable, KeyFunction, checked_key, client_ip, key_text
from ratekeeper.limiter import NAMED_ONLY, Limiter

if TYPE_CHECKING:
    from django.http.response import HttpResponseBase

    from ratekeeper._drf import (
        AnonRateKeeperThrottle,
        RateKeeperThrottle,
        ScopedRateKeeperThrottle,
        UserRateKeeperThrottle,
    )

__all__ = [
    "ALL",
    "SETTINGS",
    "UNSAFE",
    "AnonRateKeeperThrottle",
    "RateKeeperThrottle",
    "RateLimitMiddleware",
    "Ratelimited",
    "ScopedRateKeeperThrottle",
    "Usage",
    "UserKey",
    "UserRateKeeperThrottle",
    "get_limiter",
    "get_usage",
    "is_ratelimited",
    "limit",
    "ratelimit",
    "usage",
    "user",
]

View = TypeVar("View", bound=Callable[..., Any])

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


def user(fallback: KeyCallable | None = None) -> UserKey:
    """The authenticated user's primary key as the key (``"user:42"``); requests without an
    authenticated user are keyed by ``fallback`` (default: the client's IP, behind the
    ``TRUSTED_PROXIES`` setting).

    The middleware reads ``request.user``, so it goes after Django's ``AuthenticationMiddleware``; on ASGI
    it loads the user with ``request.auser()``. DRF's throttles see the user DRF authenticated.
    """
    if fallback is not None:
        fallback = checked_key(fallback, "fallback")
    return UserKey(fallback)


class UserKey:
    """The key function [`user`][ratekeeper.django.user] makes."""

    __slots__ = ("fallback",)

    def __init__(self, fallback: KeyCallable | None) -> None:
        self.fallback = fallback

    def __call__(self, request: Any) -> str | None:
        return _peer_of(self, request)

    def __repr__(self) -> str:
        return f"user(fallback={self.fallback!r})"


def _user_id(user: Any) -> str | None:
    return f"user:{user.pk}" if user is not None and user.is_authenticated else None


def _checked(peer: object) -> str | None:
    return key_text(peer)


def _peer_of(key: KeyCallable, request: Any) -> str | None:
    """The key of a request served synchronously (WSGI, or a sync DRF view)."""
    if isinstance(key, KeyFunction):
        # META is the WSGI environ, and ASGI Django fills it alike (REMOTE_ADDR, HTTP_*).
        return key.from_environ(request.META)
    if isinstance(key, UserKey):
        who = _user_id(getattr(request, "user", None))
        return who if who is not None else _peer_of(key.fallback or _config().client_ip, request)
    peer = key(request)
    if inspect.isawaitable(peer):
        if inspect.iscoroutine(peer):
            peer.close()  # never awaited: closed, so Python does not warn about it
        raise InvalidType("key", "returned an awaitable to a request served synchronously: give a sync key function")
    return _checked(peer)


async def _apeer_of(key: KeyCallable, request: Any) -> str | None:
    """The key of a request served on an event loop: the user is loaded without blocking it."""
    if isinstance(key, KeyFunction):
        return key.from_environ(request.META)
    if isinstance(key, UserKey):
        load = getattr(request, "auser", None)  # Django >= 5.0
        if load is not None:
            who = _user_id(await load())
        elif hasattr(request, "user"):
            who = await sync_to_async(lambda: _user_id(request.user))()
        else:
            who = None
        return who if who is not None else await _apeer_of(key.fallback or _config().client_ip, request)
    peer = key(request)
    if inspect.isawaitable(peer):
        peer = await peer
    return _checked(peer)


# --- settings -------------------------------------------------------------------------------------------------------


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


# --- deciding a request ---------------------------------------------------------------------------------------------


def _plain_store() -> bool:
    """Whether ``ResponseHeaders`` keeps its fields as ``_store[name.lower()] = (name, value)``, as it has
    since Django 3.2: the fields can then be written there directly (see ``_add_fields``)."""
    probe = ResponseHeaders({"RateLimit": "x"})
    store = getattr(probe, "_store", None)
    return isinstance(store, dict) and store == {"ratelimit": ("RateLimit", "x")}


_PLAIN_STORE = _plain_store()


def _add_fields(response: HttpResponseBase, fields: Sequence[tuple[str, str]]) -> None:
    """Adds the rate-limit fields to a response; a second limit's (a view's and the middleware's) joins the
    first's ``RateLimit`` and ``RateLimit-Policy`` lists, and the longer ``Retry-After`` stays."""
    headers = response.headers
    if _PLAIN_STORE and type(headers) is ResponseHeaders:
        # The fields are printable ASCII by construction: nothing for Django to check or encode, and each
        # read or write through the case-insensitive mapping costs about as much as the decision.
        store = headers._store
        for name, value in fields:
            lower = name.lower()
            if lower in store:
                _join_field(headers, name, value)
            else:
                store[lower] = (name, value)
        return
    for name, value in fields:
        _join_field(headers, name, value)


def _join_field(headers: ResponseHeaders, name: str, value: str) -> None:
    old = headers.get(name)
    if old is None:
        headers[name] = value
    elif name in ("RateLimit", "RateLimit-Policy"):
        headers[name] = f"{old}, {value}"
    elif name == "Retry-After":
        headers[name] = max(old, value, key=lambda seconds: int(seconds) if seconds.isdigit() else 0)
    else:
        headers[name] = value


def _refusal_response(admission: Admission) -> HttpResponse:
    """The limiter's own answer: the JSON body and the fields, in a plain ``HttpResponse``."""
    response = HttpResponse(admission.body, status=admission.status, content_type="application/json")
    _add_fields(response, admission.fields)
    return response


class _Gate:
    """The Django side of ``Gatekeeper``: reads the request, answers refusals, finishes responses.

    What the options fix is looked up once, here, not at every request."""

    __slots__ = (
        "cost",
        "from_environ",
        "gatekeeper",
        "key",
        "log_refusals",
        "on_refused",
        "options",
        "refunds",
    )

    def __init__(
        self,
        options: WebOptions,
        on_refused: Callable[[HttpRequest, Decision], HttpResponseBase] | None,
        log_refusals: bool = False,
    ) -> None:
        self.options = options
        self.gatekeeper = Gatekeeper(options)
        self.key = key = options.key_function
        # META is the WSGI environ, and ASGI Django fills it alike (REMOTE_ADDR, HTTP_*).
        self.from_environ = key.from_environ if isinstance(key, KeyFunction) else None
        self.cost = options.cost
        self.refunds = options.refund_when is not None
        self.on_refused = on_refused
        self.log_refusals = log_refusals

    def refusal(self, request: HttpRequest, admission: Admission) -> HttpResponseBase:
        if admission.refused_by_limit and self.on_refused is not None:
            assert admission.decision is not None
            response = self.on_refused(request, admission.decision)
        else:
            response = _refusal_response(admission)
        if not self.log_refusals:
            # Django's handler logs a "django.request" warning for every 4xx unless the response says it
            # has been logged; the limiter counts its refusals itself (stats, metrics).
            response._has_been_logged = True
        return response

    def limited(self, request: HttpRequest, admission: Admission) -> bool:
        """``block=False``: a refusal by a limit is served with ``request.limited`` set and the rate-limit
        fields but ``Retry-After`` (the view answers); a missing key is refused still."""
        if not admission.refused_by_limit:
            return False
        request.limited = True
        admission.status = 0
        admission.fields = [field for field in admission.fields if field[0] != "Retry-After"]
        return True

    def run(
        self,
        request: HttpRequest,
        path: str,
        group: str | None,
        respond: Callable[[HttpRequest], HttpResponseBase],
        block: bool = True,
    ) -> HttpResponseBase:
        """Decides the request, then serves it with ``respond(request)`` or answers the refusal (with
        ``block`` False, serves it with ``request.limited`` set, for the view to decide)."""
        from_environ = self.from_environ
        peer = from_environ(request.META) if from_environ is not None else _peer_of(self.key, request)
        if self.gatekeeper.quick and group is None and peer is not None:
            # One core call decides it and, when it is allowed with no permits held, hands back only its
            # fields (no Decision, no Admission).
            admitted = self.gatekeeper.admit_quick(peer, path)
            if type(admitted) is tuple:  # allowed, nothing held: only the fields are owed
                response = respond(request)
                if admitted:
                    _add_fields(response, admitted)
                return response
            assert isinstance(admitted, Decision)
            admission = self.gatekeeper.admission(admitted, peer, path)
        else:
            cost = self.cost(request) if self.cost is not None else 1
            admission = self.gatekeeper.admit(peer, path, group, cost)
        if admission.status and (block or not self.limited(request, admission)):
            return self.refusal(request, admission)
        if admission.permits:
            try:
                response = respond(request)
            except BaseException:
                self.gatekeeper.release(admission)
                raise
        else:  # nothing to give back if the view raises: no try block to enter
            response = respond(request)
        if admission.fields:
            _add_fields(response, admission.fields)
        if self.refunds:
            self.gatekeeper.settle(admission, response.status_code)
        if not admission.permits:
            return response
        if response.streaming:
            _release_after_streaming(response, self.gatekeeper, admission)
        else:
            # The work is done: held while the server writes the body, a permit would refuse a client
            # that asks again as soon as it has read it.
            self.gatekeeper.release(admission)
        return response

    async def arun(
        self,
        request: HttpRequest,
        path: str,
        group: str | None,
        respond: Callable[[HttpRequest], Awaitable[HttpResponseBase]],
        block: bool = True,
    ) -> HttpResponseBase:
        """``run`` on an event loop: the key, the decision and what follows never block it."""
        from_environ = self.from_environ
        peer = from_environ(request.META) if from_environ is not None else await _apeer_of(self.key, request)
        cost = self.cost(request) if self.cost is not None else 1
        admission = await self.gatekeeper.aadmit(peer, path, group, cost)
        if admission.status and (block or not self.limited(request, admission)):
            return self.refusal(request, admission)
        try:
            response = await respond(request)
        except BaseException:
            await self.gatekeeper.arelease(admission)
            raise
        if admission.fields:
            _add_fields(response, admission.fields)
        if self.refunds:
            await self.gatekeeper.asettle(admission, response.status_code)
        if admission.permits:
            if response.streaming:
                _release_after_streaming(response, self.gatekeeper, admission)
            else:
                await self.gatekeeper.arelease(admission)
        return response


def _release_after_streaming(response: Any, gatekeeper: Gatekeeper, admission: Admission) -> None:
    """Holds a streamed response's permits until its body is exhausted, fails, or is closed (the client
    left), whichever comes first: the view's work goes on while the body streams. (A ``FileResponse``
    then streams through Python rather than ``wsgi.file_wrapper``.)"""
    body = response.streaming_content
    if response.is_async:
        response.streaming_content = _AsyncReleasingBody(body, gatekeeper, admission)
    else:
        response.streaming_content = _ReleasingBody(body, gatekeeper, admission)


class _ReleasingBody:
    __slots__ = ("_admission", "_body", "_gatekeeper")

    def __init__(self, body: Iterator[bytes], gatekeeper: Gatekeeper, admission: Admission) -> None:
        self._body, self._gatekeeper, self._admission = body, gatekeeper, admission

    def __iter__(self) -> _ReleasingBody:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._body)
        except BaseException:  # StopIteration included: the last chunk has been handed to the server
            self.close()
            raise

    def close(self) -> None:  # Django registers it with the response's closers
        self._gatekeeper.release(self._admission)


class _AsyncReleasingBody:
    __slots__ = ("_admission", "_body", "_gatekeeper")

    def __init__(self, body: AsyncIterator[bytes], gatekeeper: Gatekeeper, admission: Admission) -> None:
        self._body, self._gatekeeper, self._admission = body, gatekeeper, admission

    def __aiter__(self) -> _AsyncReleasingBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._body.__anext__()
        except BaseException:
            await self._gatekeeper.arelease(self._admission)
            raise

    def close(self) -> None:  # called by Django on a thread when the response closes
        self._gatekeeper.release(self._admission)


# --- the middleware -------------------------------------------------------------------------------------------------


class RateLimitMiddleware:
    """Decides every request by the limiter's rules on its path (``request.path_info``), before the URL is
    resolved; see the module's docstring and ``SETTINGS``.

    Raises:
        InvalidValue: no ``RATEKEEPER["LIMITER"]`` nor ``RATEKEEPER["CONFIG"]`` (nothing to apply).
        InvalidValue, InvalidType: a bad setting, named by ``loc`` (``("RATEKEEPER", "MODE")``).
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)
        if not _config().configured:
            raise InvalidValue(
                ("RATEKEEPER", "LIMITER"),
                "the middleware needs a limiter: set RATEKEEPER['LIMITER'] (a Limiter or its dotted path) or "
                "RATEKEEPER['CONFIG'] (a config file)",
            )
        self._state = self._build()

    def _build(self) -> tuple[int, _Gate, Limiter, Callable[[str], object] | None]:
        """What the settings fix, for their generation: one tuple, swapped whole, so a thread serving a
        request while the settings change (tests) sees the old settings or the new, never a mix."""
        generation = _generation[0]
        config = _config()
        gate = _Gate(config.options(config.limiter, None), config.on_refused, config.log_refusals)
        state = (generation, gate, config.limiter, _exempt_search(config.exempt))
        self._state = state
        return state

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        generation, gate, limiter, exempt = self._state
        if generation != _generation[0]:  # the settings changed: rebuilt once
            generation, gate, limiter, exempt = self._build()
        path = request.path_info
        if not limiter.enabled or (exempt is not None and exempt(path)):
            return self.get_response(request)
        return gate.run(request, path, None, self.get_response)

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        generation, gate, limiter, exempt = self._state
        if generation != _generation[0]:
            generation, gate, limiter, exempt = self._build()
        path = request.path_info
        if not limiter.enabled or (exempt is not None and exempt(path)):
            response: HttpResponseBase = await self.get_response(request)
            return response
        return await gate.arun(request, path, None, self.get_response)


# A numbered backreference or conditional would refer to another group once the patterns are joined.
_NUMBERED_GROUP_REFERENCE = re.compile(r"\\[1-9]|\(\?\(\d")


def _exempt_search(patterns: tuple[re.Pattern[str], ...]) -> Callable[[str], object] | None:
    """One search for ``EXEMPT_PATHS``: the patterns joined into one regex when that means the same
    (no inline global flags, no numbered references), else each tried in turn; ``None`` when none."""
    if not patterns:
        return None
    if len(patterns) == 1:
        return patterns[0].search
    if not any(_NUMBERED_GROUP_REFERENCE.search(p.pattern) for p in patterns):
        try:
            return re.compile("|".join(f"(?:{p.pattern})" for p in patterns)).search
        except re.error:  # e.g. "(?i)" inside, or a group name used twice
            pass
    return lambda path: any(p.search(path) for p in patterns)


# --- groups added to the limiter ------------------------------------------------------------------------------------

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


# --- the view decorator ---------------------------------------------------------------------------------------------

# Which limit() claimed each group name derived from a view: a second decorator on the same view (stacked, or
# the same view decorated twice) gets a name of its own ("view#2"), so that each is a limit of its own.
_claims: dict[str, object] = {}


def _claim(name: str, owner: object) -> str:
    with _groups_lock:
        for number in itertools.count(1):
            candidate = name if number == 1 else f"{name}#{number}"
            holder = _claims.setdefault(candidate, owner)
            if holder is owner:
                return candidate
    raise AssertionError("unreachable")  # pragma: no cover


def _view_name(view: Any) -> str:
    """The dotted name of a view: a function's, a class-based view's class (also for an ``as_view()``
    result), or, for a method decorated by ``method_decorator``, its class's and the method's."""
    view_class = getattr(view, "view_class", None) or getattr(view, "cls", None)
    if isinstance(view_class, type):
        return f"{view_class.__module__}.{view_class.__qualname__}"
    if isinstance(view, functools.partial):
        bound = view.func
        owner = getattr(bound, "__self__", None)
        if owner is not None:  # method_decorator: a partial of the method bound to the view instance
            cls = type(owner)
            return f"{cls.__module__}.{cls.__qualname__}.{getattr(bound, '__name__', 'view')}"
        view = bound
    module = getattr(view, "__module__", None) or "view"
    return f"{module}.{getattr(view, '__qualname__', type(view).__qualname__)}"


RateOfRequest = Callable[[HttpRequest], object]


class _ViewLimit:
    """One decorated view's limit: its group (or, for a rate computed per request, its groups), added to the
    limiter at the first request, and made again when the settings change."""

    __slots__ = ("_built", "_computed", "algorithm", "block", "cost", "key", "limiter", "methods", "name", "rate_of")

    def __init__(
        self,
        name: str,
        limits: list[object] | RateOfRequest,
        options: tuple[KeyCallable | None, Limiter | None, Any, frozenset[str] | None, bool, Algorithm | None],
    ) -> None:
        self.name = name
        self.key, self.limiter, self.cost, self.methods, self.block, self.algorithm = options
        self.rate_of: RateOfRequest | None = limits if callable(limits) else None
        self._computed: list[object] = [] if callable(limits) else limits
        self._built: tuple[int, _Gate, Limiter, dict[str, str | None]] | None = None

    def built(self) -> tuple[int, _Gate, Limiter, dict[str, str | None]]:
        built = self._built
        if built is None or built[0] != _generation[0]:
            config = _config()
            limiter = self.limiter if self.limiter is not None else config.limiter
            if self.rate_of is None:
                algorithm = self.algorithm or config.algorithm
                _set_group(limiter, self.name, _built_limits(self._computed, algorithm, ("limits",)), ("group",))
            options = config.options(limiter, self.key, self.cost)
            gate = _Gate(options, config.on_refused, config.log_refusals)
            built = self._built = (_generation[0], gate, limiter, {})
        return built

    def gate(self) -> _Gate:
        return self.built()[1]

    def group(self, request: HttpRequest) -> str | None:
        """The group deciding ``request``; ``None`` when its method is not limited or its rate is ``None``."""
        if self.methods is not None and request.method not in self.methods:
            return None
        if self.rate_of is None:
            return self.name
        _, _, limiter, groups = self.built()
        rate = self.rate_of(request)
        spelled = repr(rate)
        if spelled in groups:
            return groups[spelled]
        try:
            items = _peer_rate_items(rate, ("rate",))
            if items is None:
                groups[spelled] = None
                return None
            limits = _built_limits(items, self.algorithm or _config().algorithm, ("rate",))
        except InvalidArgument as error:  # computed for this request: the error names the view
            raise type(error)(error.loc, f"{error.msg} (the rate computed for the view {self.name})") from None
        name = f"{self.name}@{_spelled(limits)}"
        _set_group(limiter, name, limits, ("rate",))
        groups[spelled] = name
        return name

    def decision(self, request: HttpRequest, cost: int) -> Decision | None:
        """What this limit would decide for ``request`` now, counting nothing."""
        group = self.group(request)
        if group is None:
            return None
        gate = self.gate()
        peer = _peer_of(gate.key, request)
        if peer is None:
            return None
        return gate.gatekeeper.limiter.peek(peer, None, cost=cost, group=group)


def _unlimited(request: HttpRequest, block: bool) -> None:
    if not block and not hasattr(request, "limited"):
        request.limited = False


@declaring  # its errors name the line: the view is not known yet (limit(...) decorates it after)
def limit(
    *limits: Limit | Rate | str | RateOfRequest,
    group: str | None = None,
    key: KeyCallable | None = None,
    limiter: Limiter | None = None,
    cost: Callable[[HttpRequest], int] | None = None,
    methods: Iterable[str] | None = None,
    block: bool = True,
    algorithm: Algorithm | None = None,
) -> Callable[[View], View]:
    """A decorator limiting a view by ``limits`` (combined by policy ``"all"``), in a group of its own.

    It decorates a function view (sync or async), a class-based view (its ``dispatch``: every method), an
    ``as_view()`` result, or, through ``method_decorator``, one method of a class-based view. The group is
    named after the view (``"myapp.views.login"``; a second ``@limit`` on the same view, ``"...login#2"``: each
    is a limit of its own) unless ``group`` names one that several views share. The other options (mode,
    fields, missing keys, ``ON_REFUSED`` ...) are the ``RATEKEEPER`` settings'.

    Args:
        limits: e.g. ``"5/min"``, or several (``"10/s", "1000/hour"``, or ``"10/s; 1000/hour"``), or
            [`Limit`][ratekeeper.Limit]; or one callable of the request giving its rate (a rate, a list, or
            ``None``: not limited), each distinct rate a group of its own (``"myapp.views.search@10/min"``).
        group: the group's name, to share it between views.
        key: this view's key function (default: the ``KEY`` setting, else the client's IP).
        limiter: the limiter to add the group to (default: [`get_limiter`][ratekeeper.django.get_limiter]).
        cost: a callable of the request giving its cost.
        methods: the HTTP methods limited (``["POST"]``); others pass without a decision. Default: all.
        block: ``False`` serves a refused request too, with ``request.limited`` set (``False`` when admitted),
            for the view to decide; default ``True`` answers 429.
        algorithm: the algorithm of the rates given as strings (default: the ``ALGORITHM`` setting, ``"gcra"``;
            ``"fixed_window"`` decides as django-ratelimit).

    Raises:
        InvalidValue, InvalidType: a bad argument, named by ``loc``.
    """
    if not limits:
        raise InvalidValue("limits", "give at least one limit, e.g. limit('5/min')")
    if algorithm is not None and algorithm not in _ALGORITHMS:
        raise InvalidValue("algorithm", f"must be one of {', '.join(_ALGORITHMS)}, got {algorithm!r}")
    if len(limits) == 1 and callable(limits[0]) and not isinstance(limits[0], (Limit, Rate)):
        wanted: list[object] | RateOfRequest = limits[0]
    else:
        items = _peer_rate_items(list(limits), ("limits",))
        if items is None:
            raise InvalidValue("limits", "no limit given (None); leave the view undecorated to not limit it")
        checked = _built_limits(items, algorithm or "gcra", ("limits",))
        Rule(NAMED_ONLY, group if group is not None else "view", limits=checked)  # checked now, not at a request
        wanted = items
    if key is not None:
        key = checked_key(key, "key")
    if cost is not None and not callable(cost):
        raise InvalidType("cost", f"must be callable, got {type(cost).__name__}")
    if limiter is not None and not isinstance(limiter, Limiter):
        raise InvalidType("limiter", f"must be a ratekeeper.Limiter, got {type(limiter).__name__}")
    if not isinstance(block, bool):
        raise InvalidType("block", f"must be a bool, got {type(block).__name__}")
    limited_methods = _methods(methods, "methods")
    options = (key, limiter, cost, limited_methods, block, algorithm)
    owner = object()  # this decorator: the views it decorates claim their group names for it
    # method_decorator decorates anew at every request: each view's limit is made once.
    made: dict[str, _ViewLimit] = {}

    def view_limit(view: Any) -> _ViewLimit:
        name = group if group is not None else _view_name(view)
        found = made.get(name)
        if found is None:
            claimed = name if group is not None else _claim(name, owner)
            found = made[name] = _ViewLimit(claimed, wanted, options)
        return found

    def decorate(view: View) -> View:
        if isinstance(view, type):
            limited_class: View = _limit_class(view, view_limit(view))
            return limited_class
        if not callable(view):
            raise InvalidType("view", f"must be a view function or class, got {type(view).__name__}")
        state = view_limit(view)
        if iscoroutinefunction(view):

            async def limited_async(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                _unlimited(request, state.block)
                group = state.group(request)
                if group is None:
                    response: HttpResponseBase = await view(request, *args, **kwargs)
                    return response
                return await state.gate().arun(
                    request, request.path_info, group, lambda request: view(request, *args, **kwargs), state.block
                )

            wrapper: Any = functools.wraps(view)(limited_async)
        else:

            def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                _unlimited(request, state.block)
                group = state.group(request)
                if group is None:
                    response: HttpResponseBase = view(request, *args, **kwargs)
                    return response
                return state.gate().run(
                    request, request.path_info, group, lambda request: view(request, *args, **kwargs), state.block
                )

            wrapper = functools.wraps(view)(limited)
        wrapper._ratekeeper_limit = state
        return wrapper  # type: ignore[no-any-return]

    return decorate


def _methods(methods: object, loc: str) -> frozenset[str] | None:
    """HTTP methods, upper-cased; ``None`` (or django-ratelimit's ``ALL``) for every method."""
    if methods is None or methods == ALL:
        return None
    if isinstance(methods, str):
        methods = [methods]
    if not isinstance(methods, Iterable):
        raise InvalidType(loc, f"must be a list of HTTP methods, got {type(methods).__name__}")
    names = []
    for index, method in enumerate(methods):
        if not isinstance(method, str) or not method.isalpha():
            raise InvalidValue((loc, index), f"must be an HTTP method such as 'POST', got {method!r}")
        names.append(method.upper())
    return frozenset(names)


def usage(view: Any, request: HttpRequest, *, cost: int = 1) -> Decision | None:
    """What the ``@limit`` of ``view`` would decide for ``request`` now, counting nothing: its ``remaining``,
    ``retry_after`` and ``reset_after`` (django-ratelimit's ``get_usage`` with ``increment=False``).

    ``None`` when the view's limit does not apply to the request (its method, a rate of ``None``, no key).
    For stacked limits, the outermost's.

    Raises:
        InvalidType: ``view`` is not limited by [`limit`][ratekeeper.django.limit].
    """
    state = getattr(view, "_ratekeeper_limit", None)
    if state is None:
        dispatch = getattr(view, "dispatch", None)
        state = getattr(dispatch, "_ratekeeper_limit", None)
    if not isinstance(state, _ViewLimit):
        raise InvalidType("view", f"is not limited by ratekeeper.django.limit: {view!r}")
    return state.decision(request, cost)


def _limit_class(view: Any, state: _ViewLimit) -> Any:
    """A class-based view whose ``dispatch`` decides first (``view_is_async``: awaiting the decision)."""
    from django.views import View as DjangoView

    if not issubclass(view, DjangoView):
        raise InvalidType("view", f"a class must be a django.views.View, got {view.__qualname__}")
    dispatch = view.dispatch
    if view.view_is_async:

        async def limited_async(self: Any, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            _unlimited(request, state.block)
            group = state.group(request)
            if group is None:
                response: HttpResponseBase = await dispatch(self, request, *args, **kwargs)
                return response
            return await state.gate().arun(
                request,
                request.path_info,
                group,
                lambda request: dispatch(self, request, *args, **kwargs),
                state.block,
            )

        limited_dispatch: Any = functools.wraps(dispatch)(limited_async)
    else:

        def limited(self: Any, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            _unlimited(request, state.block)
            group = state.group(request)
            if group is None:
                response: HttpResponseBase = dispatch(self, request, *args, **kwargs)
                return response
            return state.gate().run(
                request,
                request.path_info,
                group,
                lambda request: dispatch(self, request, *args, **kwargs),
                state.block,
            )

        limited_dispatch = functools.wraps(dispatch)(limited)
    limited_dispatch._ratekeeper_limit = state
    view.dispatch = limited_dispatch
    return view


# --- django-ratelimit's decorator and functions ---------------------------------------------------------------------

#: django-ratelimit's ``method=ALL``: every HTTP method.
ALL: tuple[None] = (None,)
#: django-ratelimit's ``method=UNSAFE``: the methods that change things.
UNSAFE: list[str] = ["DELETE", "PATCH", "POST", "PUT"]


class Ratelimited(PermissionDenied):  # type: ignore[misc]  # Django has no type information
    """Raised by [`ratelimit`][ratekeeper.django.ratelimit] with ``block=True`` (django-ratelimit's exception): Django
    answers 403, or the view ``RATELIMIT_VIEW`` names through django-ratelimit's middleware."""


@dataclass(frozen=True)
class Usage:
    """What [`get_usage`][ratekeeper.django.get_usage] reports, as django-ratelimit's dict does (``usage["count"]``
    reads too).

    Attributes:
        count: requests counted in the key's window (refused requests are not counted: at most ``limit``).
        limit: requests a window admits.
        should_limit: whether the request is (``increment=True``) or the next would be refused.
        time_left: whole seconds until the key's window ends (the rate's period when nothing is counted).
    """

    count: int
    limit: int
    should_limit: bool
    time_left: int

    def __getitem__(self, name: str) -> int | bool:
        value: int | bool = getattr(self, name)
        return value


PeerKey = Callable[[str, HttpRequest], str]


def _peer_ip(request: HttpRequest) -> str:
    """django-ratelimit's ``"ip"``: the client's address behind ``TRUSTED_PROXIES``, grouped by
    ``RATELIMIT_IPV4_MASK`` (default 32) and ``RATELIMIT_IPV6_MASK`` (default 64) bits, as it groups them."""
    ipv4 = getattr(django_settings, "RATELIMIT_IPV4_MASK", 32)
    ipv6 = getattr(django_settings, "RATELIMIT_IPV6_MASK", 64)
    config = _config()
    masks = _peer_ip_keys.get((_generation[0], ipv4, ipv6))
    if masks is None:
        _peer_ip_keys.clear()
        try:
            masks = client_ip(config.trusted_proxies, ipv4_prefix=ipv4, ipv6_prefix=ipv6)
        except InvalidArgument as error:
            setting = "RATELIMIT_IPV4_MASK" if error.loc[:1] == ("ipv4_prefix",) else "RATELIMIT_IPV6_MASK"
            raise error.at(setting, drop=1) from None
        _peer_ip_keys[(_generation[0], ipv4, ipv6)] = masks
    return masks.from_environ(request.META) or ""


_peer_ip_keys: dict[tuple[int, object, object], ClientIP] = {}


def _peer_user(request: HttpRequest) -> str:
    return str(getattr(getattr(request, "user", None), "pk", None))


def _peer_user_or_ip(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    return str(user.pk) if user is not None and user.is_authenticated else _peer_ip(request)


_PEER_KEYS: dict[str, Callable[[HttpRequest], str]] = {
    "ip": _peer_ip,
    "user": _peer_user,
    "user_or_ip": _peer_user_or_ip,
}


def _peer_key(key: object) -> PeerKey:
    """django-ratelimit's ``key``: ``"ip"``, ``"user"``, ``"user_or_ip"``, ``"header:x-real-ip"``,
    ``"get:q"``, ``"post:field"``, a callable of ``(group, request)`` or its dotted path."""
    if callable(key):
        return key
    if not isinstance(key, str) or not key:
        raise InvalidValue(
            "key", f"give a key: 'ip', 'user', 'user_or_ip', 'header:x-...', 'get:q', 'post:f', a callable; got {key!r}"
        )
    simple = _PEER_KEYS.get(key)
    if simple is not None:
        return lambda group, request: simple(request)
    if ":" in key:
        accessor, name = key.split(":", 1)
        if accessor == "header":
            meta = "HTTP_" + name.replace("-", "_").upper()
            return lambda group, request: str(request.META.get(meta, ""))
        if accessor == "get":
            return lambda group, request: str(request.GET.get(name, ""))
        if accessor == "post":
            return lambda group, request: str(request.POST.get(name, ""))
        raise InvalidValue("key", f"unknown accessor {accessor!r} in {key!r}; known: header, get, post")
    if "." in key:
        imported: list[PeerKey] = []

        def dotted(group: str, request: HttpRequest) -> str:
            if not imported:
                imported.append(_imported_callable("key", key))
            return imported[0](group, request)

        return dotted
    raise InvalidValue(
        "key", f"cannot read the key {key!r}: 'ip', 'user', 'user_or_ip', 'header:x-...', 'get:q', 'post:f'"
    )


def _imported_callable(loc: str, path: str) -> Any:
    try:
        found = import_string(path)
    except ImportError as error:
        raise InvalidValue(loc, f"cannot import {path!r}: {error}") from None
    if not callable(found):
        raise InvalidType(loc, f"{path!r} is not callable")
    return found


def _peer_group_name(fn: Any) -> str:
    return _view_name(fn)


# The groups of django-ratelimit's rates, by (settings generation, limiter, group name): made once each.
_peer_groups: dict[tuple[int, int, str], bool] = {}


def _peer_usage(
    request: HttpRequest, group: str, key: PeerKey, rate: object, methods: frozenset[str] | None, increment: bool
) -> Usage | None:
    if not getattr(django_settings, "RATELIMIT_ENABLE", True):
        return None
    if methods is not None and request.method not in methods:
        return None
    if callable(rate):
        rate = rate(group, request)
    elif isinstance(rate, str) and "." in rate and "/" not in rate:
        rate = _imported_callable("rate", rate)(group, request)
    if _admits_nothing(rate):  # "0/m": django-ratelimit's way to refuse every request; nothing to count
        return Usage(0, 0, True, 0)
    items = _peer_rate_items(rate, ("rate",))
    if items is None:
        return None
    limits = _built_limits(items, "fixed_window", ("rate",))
    # As django-ratelimit counts: by group, rate and (when not every method) the methods.
    name = f"{group}@{_spelled(limits)}"
    if methods is not None:
        name += f" {','.join(sorted(methods))}"
    limiter = get_limiter()
    made = (_generation[0], id(limiter), name)
    if made not in _peer_groups:
        _set_group(limiter, name, limits, ("rate",))
        _peer_groups[made] = True
    peer = key_text(key(group, request))
    if peer is None:
        raise InvalidType("key", "must return a str or an int, got None")
    # Read without counting through Limiter.peek.
    decision = limiter.check(peer, group=name) if increment else limiter.peek(peer, group=name)
    quota = decision.limit or 0
    remaining = decision.remaining if decision.remaining is not None else quota
    window = decision.window or 0.0
    time_left = math.ceil(decision.reset_after) if remaining < quota else math.ceil(window)
    return Usage(quota - remaining, quota, not decision.allowed, time_left)


def _peer_rate(rate: object) -> object:
    """A ``rate`` argument checked at decoration: a fixed rate is read now, a callable or dotted path later."""
    if rate is None or callable(rate) or (isinstance(rate, str) and "." in rate and "/" not in rate):
        return rate
    if _admits_nothing(rate):
        return rate
    items = _peer_rate_items(rate, ("rate",))
    if items is not None:
        _built_limits(items, "fixed_window", ("rate",))
    return rate


def get_usage(
    request: HttpRequest,
    group: str | None = None,
    fn: Any = None,
    key: object = None,
    rate: object = None,
    method: object = ALL,
    increment: bool = False,
) -> Usage | None:
    """django-ratelimit's ``get_usage``: the key's use of ``rate`` in ``group`` (or ``fn``'s group), counted
    (``increment=True``) or only read (the default: through ``Limiter.peek``, counting nothing); ``None``
    when not limited (the method, a rate of ``None``, ``RATELIMIT_ENABLE = False``).

    Raises:
        InvalidValue, InvalidType: a bad argument, named by ``loc``.
    """
    if group is None and fn is None:
        raise InvalidValue("group", "give group= or fn= (the view whose group to read)")
    name = group if group is not None else _peer_group_name(fn)
    return _peer_usage(request, name, _peer_key(key), _peer_rate(rate), _methods(method, "method"), increment)


def is_ratelimited(
    request: HttpRequest,
    group: str | None = None,
    fn: Any = None,
    key: object = None,
    rate: object = None,
    method: object = ALL,
    increment: bool = False,
) -> bool:
    """django-ratelimit's ``is_ratelimited``: [`get_usage`][ratekeeper.django.get_usage]'s ``should_limit`` (False when
    not limited)."""
    found = get_usage(request, group, fn, key, rate, method, increment)
    return found is not None and found.should_limit


@declaring  # its errors name the line, as limit()'s
def ratelimit(
    group: str | None = None, key: object = None, rate: object = None, method: object = ALL, block: bool = True
) -> Callable[[View], View]:
    """django-ratelimit's ``@ratelimit``, deciding as it does: fixed windows per key, group, rate and methods;
    ``request.limited`` set on every request it sees; with ``block`` (the default) a refusal raises
    [`Ratelimited`][ratekeeper.django.Ratelimited] (a ``PermissionDenied``: 403), or ``RATELIMIT_EXCEPTION_CLASS``.

    The counts live in the limiter of the settings ([`get_limiter`][ratekeeper.django.get_limiter]: every store), the
    ``"ip"`` key is the client behind ``TRUSTED_PROXIES``, and ``RATELIMIT_ENABLE``, ``RATELIMIT_IPV4_MASK`` and
    ``RATELIMIT_IPV6_MASK`` are read as django-ratelimit reads them.

    Raises:
        InvalidValue, InvalidType: a bad argument (a missing key, an unreadable rate), named by ``loc``.
    """
    peer_key = _peer_key(key)
    fixed_rate = _peer_rate(rate)
    methods = _methods(method, "method")
    if not isinstance(block, bool):
        raise InvalidType("block", f"must be a bool, got {type(block).__name__}")

    def decide(request: HttpRequest, name: str) -> None:
        old = getattr(request, "limited", False)
        found = _peer_usage(request, name, peer_key, fixed_rate, methods, increment=True)
        limited = found is not None and found.should_limit
        request.limited = limited or old
        if limited and block:
            raised = getattr(django_settings, "RATELIMIT_EXCEPTION_CLASS", Ratelimited)
            raise (import_string(raised) if isinstance(raised, str) else raised)()

    def decorate(fn: View) -> View:
        if not callable(fn) or isinstance(fn, type):
            raise InvalidType("view", f"must be a view function (method_decorator for a class), got {fn!r}")
        if iscoroutinefunction(fn):

            async def wrapped_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                name = group if group is not None else _peer_group_name(fn)
                if get_limiter()._waits_on_io:
                    await sync_to_async(decide)(request, name)
                else:
                    decide(request, name)
                return await fn(request, *args, **kwargs)

            return functools.wraps(fn)(wrapped_async)  # type: ignore[return-value]

        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            decide(request, group if group is not None else _peer_group_name(fn))
            return fn(request, *args, **kwargs)

        return functools.wraps(fn)(wrapped)  # type: ignore[return-value]

    return decorate


# --- Django REST framework: imported when named, so that DRF stays optional ------------------------------------------

_THROTTLES = ("AnonRateKeeperThrottle", "RateKeeperThrottle", "ScopedRateKeeperThrottle", "UserRateKeeperThrottle")


def __getattr__(name: str) -> Any:
    if name in _THROTTLES:
        from ratekeeper import _drf

        return getattr(_drf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
