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
responses carry the fields too. Every request goes through ``ratekeeper._gatekeeper``, the lifecycle the
ASGI middleware and the Flask extension share, so modes, shadow, missing keys, refunds and permits behave
alike. The settings live in ``settings.RATEKEEPER``, read by ``ratekeeper._django_settings``; see
``SETTINGS``. ``ratekeeper._django_gate`` reads a request's key and writes the fields and refusals on
Django's responses.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings as django_settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.module_loading import import_string

from ratekeeper._core import Decision, Limit, Rate, Rule
from ratekeeper._django_gate import UserKey, _Gate, _peer_of, user
from ratekeeper._django_settings import (
    _ALGORITHMS,
    SETTINGS,
    _admits_nothing,
    _built_limits,
    _config,
    _generation,
    _groups_lock,
    _peer_rate_items,
    _set_group,
    _spelled,
    get_limiter,
)
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue
from ratekeeper._http import declaring
from ratekeeper._stats import Algorithm
from ratekeeper.keys import ClientIP, KeyCallable, checked_key, client_ip, key_text
from ratekeeper.limiter import NAMED_ONLY, Limiter

if TYPE_CHECKING:
    from django.http.response import HttpResponseBase

    # Not imported here at run time: DRF is optional (see __getattr__ at the end).
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
