"""Django REST framework throttles that decide with ratekeeper; import them from
[`ratekeeper.django`][ratekeeper.django].

A DRF project switches by naming them in ``DEFAULT_THROTTLE_CLASSES``; their rates stay in DRF's
``DEFAULT_THROTTLE_RATES``, by scope, and read as DRF's do (``"100/day"``, ``"5/m"``; ratekeeper's
``"3/60s"`` or a [`Limit`][ratekeeper.Limit] too). They decide as DRF's ``SimpleRateThrottle`` does: each rate
is a sliding log (the ``THROTTLE_ALGORITHM`` setting, default ``"sliding_log"``), so a refused request's
``wait()`` is the time until the oldest request of the window leaves it, as DRF computes it ("3/min": the
4th request at once waits 60 s). As in DRF, ``get_cache_key(request, view)`` may be overridden (its string
is the key; ``None``: not throttled), a class may set its own ``rate``, ``scope`` and ``THROTTLE_RATES``,
and requests without an address share one budget.

Each scope is a group of the limiter ([`ratekeeper.django.get_limiter`][ratekeeper.django.get_limiter]) named after it,
decided by name; when the settings change, or a class's ``rate``, the group's limits change with them and its keys keep
their history. The ``RateLimit`` / ``RateLimit-Policy`` fields go on the view's responses, refused or not.

DRF calls a throttle before the view and nothing after it, so a throttle holds no concurrency permits:
a group's concurrency limits need [`ratekeeper.django.RateLimitMiddleware`][ratekeeper.django.RateLimitMiddleware] or
``@limit``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._django_gate import UserKey, _Gate, _peer_of
from ratekeeper._django_settings import _Config, _config, _generation, _set_group, _spelled, _throttle_limits
from ratekeeper._errors import InvalidValue, Loc
from ratekeeper._stats import Algorithm
from ratekeeper.keys import KeyCallable, key_text

__all__ = ["AnonRateKeeperThrottle", "RateKeeperThrottle", "ScopedRateKeeperThrottle", "UserRateKeeperThrottle"]

_RATES = ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES")

# The default key of the throttles but the anonymous one: one object, so that its gate is made once.
_USER = UserKey(None)

# Routed by the limiter's own rules on the path: a throttle without a scope nor a rate.
_BY_PATH = ""

# What was built from the settings, for the generation of the settings it was built from: the group of each
# (owner, scope, rate, algorithm), the owner and limits of each group name, and the gate.
_built: dict[str, Any] = {"generation": -1, "groups": {}, "holders": {}, "gate": None}


def _fresh() -> dict[str, Any]:
    if _built["generation"] != _generation[0]:
        _built.update(generation=_generation[0], groups={}, holders={}, gate=None)
    return _built


def _group(config: _Config, owner: object, name: str, rate: object, algorithm: Algorithm, loc: Loc) -> str | None:
    """The group deciding ``rate`` for ``owner`` (the settings, or a class with a ``rate`` of its own): named
    ``name``, added to the limiter; ``None`` when the rate is ``None`` (DRF's "not throttled").

    Two owners of one name with different rates (two classes of one scope with their own rates) get a group
    each, the second named after its rate; one owner's new rate (the settings changed, a class's ``rate``
    was set anew) changes its group's limits, whose keys keep their history, as DRF's cache keeps it."""
    built = _fresh()
    groups: dict[tuple[object, ...], str | None] = built["groups"]
    wanted = (owner, name, repr(rate), algorithm)
    if wanted in groups:
        return groups[wanted]
    limits = _throttle_limits(rate, algorithm, loc)
    if limits is None:
        groups[wanted] = None
        return None
    holders: dict[str, tuple[object, list[Limit]]] = built["holders"]
    holder = holders.get(name)
    if holder is not None and holder[0] is not owner and holder[1] != limits:
        name = f"{name}@{_spelled(limits)}"
    _set_group(config.limiter, name, limits, loc)
    holders[name] = (owner, limits)
    groups[wanted] = name
    return name


class RateKeeperThrottle(BaseThrottle):  # type: ignore[misc]  # DRF has no type information
    """A DRF throttle deciding with ratekeeper.

    With neither ``scope`` nor ``rate`` set (the default) the limiter's own rules route
    ``request.path_info``, as the middleware does; a subclass that sets ``scope`` is limited by
    ``THROTTLE_RATES[scope]`` (DRF's ``DEFAULT_THROTTLE_RATES``, read when the settings change), or by its
    own ``rate`` when it sets one, in a group named after the scope (or the class, without a scope).

    The key is [`get_cache_key`][ratekeeper.django.RateKeeperThrottle.get_cache_key]'s: the ``KEY`` setting, else
    [`ratekeeper.django.user`][ratekeeper.django.user]: the authenticated user, else the client's IP behind
    ``TRUSTED_PROXIES`` (never DRF's ``NUM_PROXIES`` guess, which a client can spoof).

    Attributes:
        scope: the scope whose rate applies (DRF's).
        rate: a rate of the class's own, instead of the scope's (DRF's; a [`Limit`][ratekeeper.Limit] too).
        THROTTLE_RATES: the rates by scope; ``None`` (default): ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``.
        algorithm: the algorithm of rates given as strings; ``None`` (default): the ``THROTTLE_ALGORITHM``
            setting, ``"sliding_log"`` (DRF's).
        decision: the last [`Decision`][ratekeeper.Decision] (``None`` before one, or when not throttled).
    """

    scope: str | None = None
    THROTTLE_RATES: Mapping[str, Any] | None = None
    algorithm: Algorithm | None = None

    def __init__(self) -> None:
        self.decision: Decision | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own ``rate`` and ``THROTTLE_RATES`` are read when its class statement runs: a typo
        fails there, naming the class and the field, not at the first request the class throttles."""
        super().__init_subclass__(**kwargs)
        algorithm: Algorithm = cls.algorithm or "sliding_log"  # the setting's may differ: a rate reads alike
        own = cls.__dict__.get("rate")
        if isinstance(own, (str, list, tuple, Rate, Limit)):
            _throttle_limits(own, algorithm, (cls.__qualname__, "rate"))
        rates = cls.__dict__.get("THROTTLE_RATES")
        if isinstance(rates, Mapping):
            for scope, rate in rates.items():
                _throttle_limits(rate, algorithm, (cls.__qualname__, "THROTTLE_RATES", str(scope)))

    def get_scope(self, request: Any, view: Any) -> str | None:
        """The scope whose rate limits this request (``None``: the class's ``rate``, else the limiter's rules
        on its path)."""
        return self.scope

    def get_rate(self) -> object:
        """The rate of ``scope``: the class's own ``rate`` when set, else ``THROTTLE_RATES[scope]``.

        Raises:
            InvalidValue: no rate for the scope, named by ``loc`` (``REST_FRAMEWORK.DEFAULT_THROTTLE_RATES.x``).
        """
        own = getattr(self, "rate", None)
        if own:
            return own
        scope = self.scope
        if not scope:
            raise InvalidValue((type(self).__qualname__, "scope"), "set the throttle's scope or its rate")
        rates = self.THROTTLE_RATES if self.THROTTLE_RATES is not None else api_settings.DEFAULT_THROTTLE_RATES
        if scope not in rates:
            loc = (*self._rates_loc(), scope)
            raise InvalidValue(loc, f"no rate for the throttle scope {scope!r}; scopes: {sorted(rates)}")
        return rates[scope]

    def _rates_loc(self) -> Loc:
        return _RATES if self.THROTTLE_RATES is None else (type(self).__qualname__, "THROTTLE_RATES")

    def key_function(self, config: _Config) -> KeyCallable:
        """The key function of [`get_cache_key`][ratekeeper.django.RateKeeperThrottle.get_cache_key]: the ``KEY``
        setting, else the user, else the client's IP."""
        return config.key or _USER

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        """The key the request is counted under (DRF's contract: override it; ``None`` means "do not throttle
        this request"). A request whose key function finds no key (no ``REMOTE_ADDR``, a missing header)
        shares one budget with the others like it, under the ``ANONYMOUS_KEY`` setting, as DRF counts the
        requests whose ident is ``None`` together."""
        config = _config()
        peer = _peer_of(self.key_function(config), request)
        return peer if peer is not None else str(config.web.get("anonymous_key", "anonymous"))

    def _group_of(self, config: _Config, request: Any, view: Any) -> str | None:
        """The group deciding the request (``_BY_PATH``: the limiter's rules), ``None``: not throttled."""
        scope = self.get_scope(request, view)
        self.scope = scope
        own = getattr(self, "rate", None)
        if scope is None and not own:
            return _BY_PATH
        cls = type(self)
        owner: object = cls if own or self.THROTTLE_RATES is not None else "settings"
        name = scope if scope is not None else f"{cls.__module__}.{cls.__qualname__}"
        loc: Loc = (cls.__qualname__, "rate") if own else (*self._rates_loc(), name)
        algorithm = self.algorithm or config.throttle_algorithm
        return _group(config, owner, name, self.get_rate(), algorithm, loc)

    def allow_request(self, request: Any, view: Any) -> bool:
        self.decision = None
        config = _config()
        group = self._group_of(config, request, view)
        if group is None:
            return True
        peer = key_text(self.get_cache_key(request, view), "get_cache_key")
        if peer is None:
            return True
        built = _fresh()
        gate: _Gate | None = built["gate"]
        if gate is None:
            gate = built["gate"] = _Gate(config.options(config.limiter, None), None)
        cost = gate.cost(request) if gate.cost is not None else 1
        admission = gate.gatekeeper.admit(peer, request.path_info, group or None, cost)
        gate.gatekeeper.release(admission)  # nothing is called when the response ends: no permit is held
        self.decision = admission.decision
        headers = getattr(view, "headers", None)
        if isinstance(headers, dict):
            # APIView.finalize_response copies view.headers onto the response, DRF's 429 included; DRF sets
            # Retry-After itself, from the longest wait of the view's throttles.
            for name, value in admission.fields:
                if name == "Retry-After":
                    continue
                old = headers.get(name)
                headers[name] = value if old is None or not name.startswith("RateLimit") else f"{old}, {value}"
        return not admission.status

    def wait(self) -> float | None:
        """The seconds until the refused request would pass, exactly (``None`` when it never can): under a
        sliding log, until the oldest request of the window leaves it, as DRF's ``wait()``."""
        decision = self.decision
        if decision is None or decision.allowed or math.isinf(decision.retry_after):
            return None
        return decision.retry_after


class ScopedRateKeeperThrottle(RateKeeperThrottle):
    """DRF's ``ScopedRateThrottle`` with ratekeeper: a view with ``throttle_scope = "uploads"`` is limited by
    ``DEFAULT_THROTTLE_RATES["uploads"]``; a view without one is not throttled."""

    scope_attr = "throttle_scope"

    def get_scope(self, request: Any, view: Any) -> str | None:
        scope: str | None = getattr(view, self.scope_attr, None)
        return scope

    def allow_request(self, request: Any, view: Any) -> bool:
        if not getattr(view, self.scope_attr, None):
            self.decision = None
            return True
        return super().allow_request(request, view)


class AnonRateKeeperThrottle(RateKeeperThrottle):
    """DRF's ``AnonRateThrottle`` with ratekeeper: requests without an authenticated user, by client IP,
    at ``DEFAULT_THROTTLE_RATES["anon"]``."""

    scope = "anon"

    def key_function(self, config: _Config) -> KeyCallable:
        return config.key or config.client_ip

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return None  # only anonymous requests are throttled
        return super().get_cache_key(request, view)


class UserRateKeeperThrottle(RateKeeperThrottle):
    """DRF's ``UserRateThrottle`` with ratekeeper: by user, or by client IP when anonymous, at
    ``DEFAULT_THROTTLE_RATES["user"]``."""

    scope = "user"
