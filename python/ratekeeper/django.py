"""Rate limiting for Django: a middleware, a view decorator, and throttles for Django REST framework.

>>> # settings.py
>>> MIDDLEWARE = [..., "ratekeeper.django.RateLimitMiddleware"]
>>> RATEKEEPER = {"LIMITER": "myproject.limits.lim", "TRUSTED_PROXIES": ["10.0.0.0/8"]}
>>> # views.py
>>> @limit("5/min")
... def login(request): ...

- :class:`RateLimitMiddleware` decides every request by the limiter's rules on its path, before Django
  resolves the URL: a refusal costs less than serving the smallest view. One class serves WSGI and ASGI
  Django (``sync_capable`` and ``async_capable``), with no thread hop on either.
- :func:`limit` limits a view (a function, sync or async, or a class-based view) in a group of its own.
- ``RateKeeperThrottle``, ``ScopedRateKeeperThrottle``, ``AnonRateKeeperThrottle`` and
  ``UserRateKeeperThrottle`` are DRF throttles (imported from here only when named: DRF is optional),
  with their rates in DRF's own ``DEFAULT_THROTTLE_RATES``.

Refusals answer 429 with the JSON body, ``Retry-After`` and the IETF ``RateLimit`` / ``RateLimit-Policy``
fields of the other integrations (DRF's throttles: DRF's own 429, with the fields added); allowed
responses carry the fields too. Every decision goes through :class:`ratekeeper._http.Gatekeeper`, the core
the ASGI middleware and the Flask extension share, so modes, shadow, missing keys, refunds and permits
behave alike. The settings live in ``settings.RATEKEEPER``; see :data:`SETTINGS`.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse
from django.http.response import ResponseHeaders
from django.utils.module_loading import import_string

from ratekeeper._core import Decision, Limit, Rate, Rule
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue
from ratekeeper._http import Admission, Gatekeeper, WebOptions
from ratekeeper.keys import ClientIP, KeyCallable, KeyFunction, client_ip
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
    "SETTINGS",
    "AnonRateKeeperThrottle",
    "RateKeeperThrottle",
    "RateLimitMiddleware",
    "ScopedRateKeeperThrottle",
    "UserKey",
    "UserRateKeeperThrottle",
    "get_limiter",
    "limit",
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
    "LOG_REFUSALS": "log the limiter's own 4xx answers as Django logs any 4xx (a 'django.request' warning each);"
    " default False: a flood of refusals would flood the log, and the limiter counts them (stats, metrics)",
}

# Settings given to WebOptions as they are, by their lower-case names.
_WEB_OPTIONS = ("MODE", "MAX_DELAY", "SHADOW", "HEADERS", "ON_MISSING_KEY", "MISSING_KEY_STATUS", "ANONYMOUS_KEY")


def user(fallback: KeyCallable | None = None) -> UserKey:
    """The authenticated user's primary key as the key (``"user:42"``); requests without an
    authenticated user are keyed by ``fallback`` (default: the client's IP, behind the
    ``TRUSTED_PROXIES`` setting).

    The middleware reads ``request.user``, so it goes after Django's ``AuthenticationMiddleware``; on ASGI
    it loads the user with ``request.auser()``. DRF's throttles see the user DRF authenticated.
    """
    if fallback is not None and not callable(fallback):
        raise InvalidType("fallback", f"must be a key function, got {type(fallback).__name__}")
    return UserKey(fallback)


class UserKey:
    """The key function :func:`user` makes."""

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
    if peer is not None and not isinstance(peer, str):
        raise InvalidType("key", f"must return a str or None, got {type(peer).__name__}")
    return peer


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
    or, when neither is set, one of the process's own with no rules (the groups of :func:`limit` and the
    DRF throttles are added to it)."""
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
    try:
        trusted = client_ip(raw.get("TRUSTED_PROXIES", ()))
    except InvalidArgument as error:
        raise _at(error, "TRUSTED_PROXIES") from None
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
    web["cost"], web["refund_when"] = _function(raw, "COST"), _function(raw, "REFUND_WHEN")
    key = _function(raw, "KEY")
    log_refusals = raw.get("LOG_REFUSALS", False)
    if not isinstance(log_refusals, bool):
        raise InvalidType(("RATEKEEPER", "LOG_REFUSALS"), f"must be a bool, got {type(log_refusals).__name__}")
    on_refused = _function(raw, "ON_REFUSED")
    config = _Config(limiter, configured, key, trusted, tuple(patterns), web, on_refused, log_refusals)
    try:
        config.options(limiter, None)  # every option checked now, not at the first request
    except InvalidArgument as error:
        raise _at(error, str(error.loc[0]).upper()) from None
    return config


# --- deciding a request ---------------------------------------------------------------------------------------------


def _plain_store() -> bool:
    """Whether ``ResponseHeaders`` keeps its fields as ``_store[name.lower()] = (name, value)``, as it has
    since Django 3.2: the fields can then be written there directly (see :func:`_add_fields`)."""
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
    """The Django side of :class:`Gatekeeper`: reads the request, answers refusals, finishes responses.

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

    def run(
        self,
        request: HttpRequest,
        path: str,
        group: str | None,
        respond: Callable[[HttpRequest], HttpResponseBase],
    ) -> HttpResponseBase:
        """Decides the request, then serves it with ``respond(request)`` or answers the refusal."""
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
        if admission.status:
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
    ) -> HttpResponseBase:
        """:meth:`run` on an event loop: the key, the decision and what follows never block it."""
        from_environ = self.from_environ
        peer = from_environ(request.META) if from_environ is not None else await _apeer_of(self.key, request)
        cost = self.cost(request) if self.cost is not None else 1
        admission = await self.gatekeeper.aadmit(peer, path, group, cost)
        if admission.status:
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
    resolved; see the module's docstring and :data:`SETTINGS`.

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


# --- the view decorator ---------------------------------------------------------------------------------------------


class _ViewLimit:
    """One decorated view's limit: its group, added to the limiter at the first request."""

    __slots__ = ("_built", "cost", "key", "limiter", "limits", "name")

    def __init__(
        self, name: str, limits: list[Limit | Rate | str], key: KeyCallable | None, limiter: Limiter | None, cost: Any
    ) -> None:
        self.name, self.limits, self.key, self.limiter, self.cost = name, limits, key, limiter, cost
        self._built: tuple[int, _Gate] | None = None

    def gate(self) -> _Gate:
        built = self._built
        if built is None or built[0] != _generation[0]:
            config = _config()
            limiter = self.limiter if self.limiter is not None else config.limiter
            limiter.add_group(self.name, self.limits)
            options = config.options(limiter, self.key, self.cost)
            built = self._built = (_generation[0], _Gate(options, config.on_refused, config.log_refusals))
        return built[1]


def limit(
    *limits: Limit | Rate | str,
    group: str | None = None,
    key: KeyCallable | None = None,
    limiter: Limiter | None = None,
    cost: Callable[[HttpRequest], int] | None = None,
) -> Callable[[View], View]:
    """A decorator limiting a view by ``limits`` (combined by policy ``"all"``), in a group of its own.

    It decorates a function view (sync or async), a class-based view (its ``dispatch``: every method), or,
    through ``method_decorator``, one method of a class-based view. The group is named after the view
    (``"myapp.views.login"``) unless ``group`` names one that several views share. The other options
    (mode, fields, missing keys, ``ON_REFUSED`` ...) are the ``RATEKEEPER`` settings'.

    Args:
        limits: e.g. ``"5/min"``, or several (``"10/s", "1000/hour"``), or :class:`~ratekeeper.Limit`.
        group: the group's name, to share it between views.
        key: this view's key function (default: the ``KEY`` setting, else the client's IP).
        limiter: the limiter to add the group to (default: :func:`get_limiter`).
        cost: a callable of the request giving its cost.

    Raises:
        InvalidValue, InvalidType: a bad argument, named by ``loc``.
    """
    if not limits:
        raise InvalidValue("limits", "give at least one limit, e.g. limit('5/min')")
    wanted = list(limits)
    Rule(NAMED_ONLY, group if group is not None else "view", limits=wanted)  # checked now, not at a request
    for name, value in (("key", key), ("cost", cost)):
        if value is not None and not callable(value):
            raise InvalidType(name, f"must be callable, got {type(value).__name__}")
    if limiter is not None and not isinstance(limiter, Limiter):
        raise InvalidType("limiter", f"must be a ratekeeper.Limiter, got {type(limiter).__name__}")
    # method_decorator decorates anew at every request: each view's limit is made once.
    made: dict[str, _ViewLimit] = {}

    def view_limit(view: Any) -> _ViewLimit:
        name = group if group is not None else f"{view.__module__}.{view.__qualname__}"
        found = made.get(name)
        if found is None:
            found = made[name] = _ViewLimit(name, wanted, key, limiter, cost)
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
                return await state.gate().arun(
                    request, request.path_info, state.name, lambda request: view(request, *args, **kwargs)
                )

            return functools.wraps(view)(limited_async)  # type: ignore[return-value]

        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            return state.gate().run(
                request, request.path_info, state.name, lambda request: view(request, *args, **kwargs)
            )

        return functools.wraps(view)(limited)  # type: ignore[return-value]

    return decorate


def _limit_class(view: Any, state: _ViewLimit) -> Any:
    """A class-based view whose ``dispatch`` decides first (``view_is_async``: awaiting the decision)."""
    from django.views import View as DjangoView

    if not issubclass(view, DjangoView):
        raise InvalidType("view", f"a class must be a django.views.View, got {view.__qualname__}")
    dispatch = view.dispatch
    if view.view_is_async:

        async def limited_async(self: Any, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            return await state.gate().arun(
                request, request.path_info, state.name, lambda request: dispatch(self, request, *args, **kwargs)
            )

        view.dispatch = functools.wraps(dispatch)(limited_async)
    else:

        def limited(self: Any, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            return state.gate().run(
                request, request.path_info, state.name, lambda request: dispatch(self, request, *args, **kwargs)
            )

        view.dispatch = functools.wraps(dispatch)(limited)
    return view


# --- Django REST framework: imported when named, so that DRF stays optional ------------------------------------------

_THROTTLES = ("AnonRateKeeperThrottle", "RateKeeperThrottle", "ScopedRateKeeperThrottle", "UserRateKeeperThrottle")


def __getattr__(name: str) -> Any:
    if name in _THROTTLES:
        from ratekeeper import _drf

        return getattr(_drf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
