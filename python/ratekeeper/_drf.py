"""Django REST framework throttles that decide with ratekeeper; import them from :mod:`ratekeeper.django`.

A DRF project switches by naming them in ``DEFAULT_THROTTLE_CLASSES``; their rates stay in DRF's
``DEFAULT_THROTTLE_RATES``, by scope, and read as DRF's do (``"100/day"``, ``"5/m"``; ratekeeper's
``"3/60s"`` or a :class:`~ratekeeper.Limit` too). Each scope is a group of the limiter
(:func:`ratekeeper.django.get_limiter`) named after it, decided by name; ``wait()`` is the decision's exact
``retry_after``, which DRF rounds up into ``Retry-After``. The ``RateLimit`` / ``RateLimit-Policy`` fields
go on the view's responses, refused or not.

DRF calls a throttle before the view and nothing after it, so a throttle holds no concurrency permits:
a group's concurrency limits need :class:`ratekeeper.django.RateLimitMiddleware` or ``@limit``.
"""

from __future__ import annotations

import math
from typing import Any

from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue
from ratekeeper.django import UserKey, _Config, _config, _Gate, _generation, _peer_of
from ratekeeper.keys import KeyCallable

__all__ = ["AnonRateKeeperThrottle", "RateKeeperThrottle", "ScopedRateKeeperThrottle", "UserRateKeeperThrottle"]

_RATES = ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES")

# The default key of the throttles but the anonymous one: one object, so that its gate is made once.
_USER = UserKey(None)

# What was built from the settings, for the generation of the settings it was built from.
_built: dict[str, Any] = {"generation": -1, "scopes": {}, "gates": {}}


def _fresh() -> dict[str, Any]:
    if _built["generation"] != _generation[0]:
        _built.update(generation=_generation[0], scopes={}, gates={})
    return _built


def _scope_group(config: _Config, scope: str) -> str | None:
    """The group of ``scope``, added to the limiter with the scope's rate; ``None`` when its rate is
    ``None`` (DRF's way of saying "not throttled")."""
    scopes: dict[str, str | None] = _fresh()["scopes"]
    if scope in scopes:
        return scopes[scope]
    rates = api_settings.DEFAULT_THROTTLE_RATES
    if scope not in rates:
        raise InvalidValue((*_RATES, scope), f"no rate for the throttle scope {scope!r}; scopes: {sorted(rates)}")
    rate = rates[scope]
    if rate is None:
        scopes[scope] = None
        return None
    single = isinstance(rate, (str, Rate, Limit))
    if not single and not isinstance(rate, (list, tuple)):
        raise InvalidType(
            (*_RATES, scope), f"must be a rate, a Limit, a list of them or None, got {type(rate).__name__}"
        )
    try:
        config.limiter.add_group(scope, [rate] if single else list(rate))
    except InvalidArgument as error:
        # limits[0].rate of a single rate is the scope's own value; of a list, its item.
        raise error.at(*_RATES, scope, drop=2 if single and error.loc[:1] == ("limits",) else 1) from None
    scopes[scope] = scope
    return scope


class RateKeeperThrottle(BaseThrottle):  # type: ignore[misc]  # DRF has no type information
    """A DRF throttle deciding with ratekeeper.

    With ``scope`` unset (the default) the limiter's own rules route ``request.path_info``, as the
    middleware does; a subclass that sets ``scope`` is limited by ``DEFAULT_THROTTLE_RATES[scope]``, in a
    group of that name. The key is the ``KEY`` setting, else :func:`ratekeeper.django.user`: the
    authenticated user, else the client's IP behind ``TRUSTED_PROXIES`` (never DRF's ``NUM_PROXIES``
    guess, which a client can spoof).

    Attributes:
        decision: the last :class:`~ratekeeper.Decision` (``None`` before one, or when not throttled).
    """

    scope: str | None = None

    def __init__(self) -> None:
        self.decision: Decision | None = None

    def get_scope(self, request: Any, view: Any) -> str | None:
        """The scope whose rate limits this request (``None``: the limiter's rules on its path)."""
        return self.scope

    def key_function(self, config: _Config) -> KeyCallable:
        return config.key or _USER

    def allow_request(self, request: Any, view: Any) -> bool:
        config = _config()
        scope = self.get_scope(request, view)
        group = None if scope is None else _scope_group(config, scope)
        if scope is not None and group is None:
            return True
        key = self.key_function(config)
        gates: dict[int, _Gate] = _fresh()["gates"]
        gate = gates.get(id(key))
        if gate is None:
            gate = gates[id(key)] = _Gate(config.options(config.limiter, key), None)
        cost = gate.cost(request) if gate.cost is not None else 1
        admission = gate.gatekeeper.admit(_peer_of(key, request), request.path_info, group, cost)
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
        """The seconds until the refused request would pass, exactly (``None`` when it never can)."""
        decision = self.decision
        if decision is None or decision.allowed or math.isinf(decision.retry_after):
            return None
        return decision.retry_after


class ScopedRateKeeperThrottle(RateKeeperThrottle):
    """DRF's ``ScopedRateThrottle`` with ratekeeper: a view with ``throttle_scope = "uploads"`` is limited by
    ``DEFAULT_THROTTLE_RATES["uploads"]``; a view without one is not throttled."""

    def get_scope(self, request: Any, view: Any) -> str | None:
        scope: str | None = getattr(view, "throttle_scope", None)
        return scope

    def allow_request(self, request: Any, view: Any) -> bool:
        if getattr(view, "throttle_scope", None) is None:
            return True
        return super().allow_request(request, view)


class AnonRateKeeperThrottle(RateKeeperThrottle):
    """DRF's ``AnonRateThrottle`` with ratekeeper: requests without an authenticated user, by client IP,
    at ``DEFAULT_THROTTLE_RATES["anon"]``."""

    scope = "anon"

    def key_function(self, config: _Config) -> KeyCallable:
        return config.key or config.client_ip

    def allow_request(self, request: Any, view: Any) -> bool:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return True
        return super().allow_request(request, view)


class UserRateKeeperThrottle(RateKeeperThrottle):
    """DRF's ``UserRateThrottle`` with ratekeeper: by user, or by client IP when anonymous, at
    ``DEFAULT_THROTTLE_RATES["user"]``."""

    scope = "user"
