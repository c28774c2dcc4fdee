"""Per-route limits for FastAPI, declared at the route as a dependency.

>>> limits = RouteLimits(app, limiter=lim, key=header("X-API-Key"))
>>> @app.post("/login", dependencies=[Depends(limits.route("5/min"))])
... async def login(): ...

Each route gets a group of its own in the limiter (named after its method and path template, or
``group=`` to share one between routes), decided by name with ``check(key, group=...)``: no regex
routing, no second limiter. The dependency runs after FastAPI's routing, so the route template is known
(``/items/{id}``), and included routers are covered like any route. Refusals answer 429 with the same
JSON body and fields as the middleware (``RouteLimits`` installs the exception handler for it).

The key may come from another dependency, such as the one that authenticates the user:
``key=Depends(current_user)``. The route's dependency then declares it as a sub-dependency, so FastAPI
resolves it (once per request: a route that also asks for ``Depends(current_user)`` gets the cached
result) and its result is the key: a str, an int (its decimal text), or ``None`` for a request without
one, which ``on_missing_key`` decides. A dependency returning a user object is adapted by a one-line
dependency of its own: ``def user_key(user: User = Depends(current_user)) -> str: return user.id``.

A route's concurrency limits (``Limit(concurrency=...)``) hold their permits until the response has
been sent, streamed bodies included: the dependency gives them back in its exit code, which FastAPI
runs after the response (the default ``Depends(scope="request")``; with ``scope="function"`` they go
back when the route function returns).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal

from fastapi import FastAPI, Request, Response
from fastapi.params import Depends

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._errors import InvalidType, InvalidValue, RateLimited
from ratekeeper._http import Gatekeeper, HeaderOptions, WebOptions, refusal_body, response_headers
from ratekeeper.keys import KeyCallable, key_of
from ratekeeper.limiter import Limiter

__all__ = ["KeyMissing", "RouteKey", "RouteLimits"]

#: Who is asking at a route: a key function of the ``Request`` (sync or async), or ``Depends(dependency)``
#: whose result (a str, an int or ``None``) is the key.
RouteKey = KeyCallable | Depends

MissingKey = Literal["refuse", "anonymous"]


class KeyMissing(Exception):
    """A request whose key function or key dependency found no key, refused by ``on_missing_key="refuse"``;
    :class:`RouteLimits` answers it with ``status`` and the middleware's JSON ``body``."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"no rate limit key: answered {status}")
        self.status = status
        self.body = body


class RouteLimits:
    """Route-level limits on ``limiter``; see the module's docstring.

    Args:
        app: the FastAPI app; gets the handlers that turn a refusal into its response.
        limiter: the :class:`~ratekeeper.Limiter` the route groups are added to.
        key: who is asking (default :func:`~ratekeeper.keys.client_ip`): any callable of the ``Request``,
            sync or async, or ``Depends(dependency)`` whose result is the key (a str, an int, or ``None``
            for none); a route may give its own.
        mode: ``"refuse"``, or ``"delay"`` to wait for the slot up to ``max_delay`` seconds.
        headers: which rate-limit fields responses carry.
        on_missing_key: what a request without a key gets: ``"anonymous"`` (the default: decided under the
            shared ``anonymous_key``) or ``"refuse"`` (answered ``missing_key_status``); a route may give its own.
        missing_key_status: the status of a refused request without a key: 429 (default), 401 or 403.
        anonymous_key: the key shared by the requests without one, with ``on_missing_key="anonymous"``.

    Raises:
        InvalidValue, InvalidType: a bad argument, named by ``loc``.
    """

    def __init__(
        self,
        app: FastAPI,
        *,
        limiter: Limiter,
        key: RouteKey | None = None,
        mode: Literal["refuse", "delay"] = "refuse",
        max_delay: float = 5.0,
        headers: HeaderOptions | None = None,
        on_missing_key: MissingKey = "anonymous",
        missing_key_status: int = 429,
        anonymous_key: str = "anonymous",
    ) -> None:
        key_dependency = _key_dependency(key)
        options = WebOptions(
            limiter,
            None if key_dependency is not None or key is None else _key_function(key),
            mode,
            max_delay,
            headers=headers,
            on_missing_key=on_missing_key,
            missing_key_status=missing_key_status,
            anonymous_key=anonymous_key,
        )
        self.limiter = limiter
        self.options = options
        #: The key dependency, when ``key=Depends(...)``; else None and :attr:`key` is the key function.
        self.key_dependency = key_dependency
        self.key = options.key_function
        self.headers = options.fields
        self.gatekeeper = Gatekeeper(options)
        app.add_exception_handler(RateLimited, self._refusal)
        app.add_exception_handler(KeyMissing, _missing_key)

    async def _refusal(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, RateLimited)
        fields = dict(response_headers(error.decision, self.headers))
        return Response(refusal_body(error.decision), status_code=429, headers=fields, media_type="application/json")

    def route(
        self,
        *limits: Limit | Rate | str,
        group: str | None = None,
        key: RouteKey | None = None,
        cost: Callable[[Request], int] | None = None,
        on_missing_key: MissingKey | None = None,
        missing_key_status: int | None = None,
    ) -> Callable[..., AsyncIterator[Decision]]:
        """A dependency limiting its route by ``limits`` (combined by policy ``"all"``).

        Args:
            limits: e.g. ``"5/min"``, or several (``"10/s", "1000/hour"``), or :class:`~ratekeeper.Limit`.
            group: the group's name, to share it between routes; default ``"<METHOD> <path template>"``.
            key: this route's key, instead of the one of :class:`RouteLimits`: a key function of the
                request, or ``Depends(dependency)``.
            cost: a callable of the request giving its cost.
            on_missing_key: this route's ``on_missing_key``, instead of the one of :class:`RouteLimits`.
            missing_key_status: this route's ``missing_key_status``, instead of the one of :class:`RouteLimits`.

        Returns:
            The dependency; it gives the :class:`~ratekeeper.Decision` to a route that declares it
            as a parameter, and the route's concurrency permits back once the response is sent.

        Raises:
            InvalidValue, InvalidType: a bad argument, named by ``loc``.
        """
        if not limits:
            raise InvalidValue("limits", "give at least one limit, e.g. route('5/min')")
        if group is not None and not isinstance(group, str):
            raise InvalidType("group", f"must be a str, got {type(group).__name__}")
        if cost is not None and not callable(cost):
            raise InvalidType("cost", f"must be callable, got {type(cost).__name__}")
        wanted: Sequence[Limit | Rate | str] = limits
        if key is None:
            key_dependency, key_function = self.key_dependency, self.key
        else:
            key_dependency = _key_dependency(key)
            key_function = self.key if key_dependency is not None else _key_function(key)
        gatekeeper = self.gatekeeper
        if on_missing_key is not None or missing_key_status is not None:
            # Checked like the middleware's options, by WebOptions; a gatekeeper of the route's own.
            gatekeeper = Gatekeeper(
                dataclasses.replace(
                    self.options,
                    on_missing_key=on_missing_key if on_missing_key is not None else self.options.on_missing_key,
                    missing_key_status=(
                        missing_key_status if missing_key_status is not None else self.options.missing_key_status
                    ),
                )
            )
        added: set[str] = set()

        async def limit_route(
            request: Request, response: Response, dependency_key: object = None
        ) -> AsyncIterator[Decision]:
            name = group if group is not None else _route_name(request)
            if name not in added:
                self.limiter.add_group(name, wanted)
                added.add(name)
            if key_dependency is not None:
                peer = _dependency_key(dependency_key, key_dependency)
            else:
                peer = await key_of(key_function, request.scope, lambda: request)
            units = cost(request) if cost is not None else 1
            admission = await gatekeeper.aadmit(peer, request.url.path, name, units)
            if admission.decision is None:  # no key, and on_missing_key="refuse"
                raise KeyMissing(admission.status, admission.body)
            if admission.status:
                raise RateLimited(admission.decision)
            for field, value in admission.fields:
                response.headers[field] = value
            try:
                yield admission.decision
            finally:
                await gatekeeper.arelease(admission)

        # FastAPI reads a dependency's own dependencies from its signature: the key dependency is declared
        # as the default of a parameter, so FastAPI resolves it (cached per request) and passes its result.
        parameters = [
            inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
            inspect.Parameter("response", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Response),
        ]
        if key_dependency is not None:
            parameters.append(
                inspect.Parameter("dependency_key", inspect.Parameter.KEYWORD_ONLY, default=key_dependency)
            )
        limit_route.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        return limit_route


async def _missing_key(request: Request, error: Exception) -> Response:
    assert isinstance(error, KeyMissing)
    return Response(error.body, status_code=error.status, media_type="application/json")


def _key_dependency(key: object) -> Depends | None:
    """``key`` when it is ``Depends(dependency)`` (checked), else None."""
    if not isinstance(key, Depends):
        return None
    if key.dependency is None:
        raise InvalidValue("key", "Depends() needs the dependency giving the key, e.g. key=Depends(current_user)")
    if not callable(key.dependency):
        raise InvalidType("key", f"Depends() needs a callable, got {type(key.dependency).__name__}")
    return key


def _key_function(key: object) -> KeyCallable:
    """``key`` checked as a key function of the request."""
    if not callable(key):
        raise InvalidType("key", f"must be a callable of the request or Depends(dependency), got {key!r}")
    try:
        parameters = inspect.signature(key).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return key
    if any(isinstance(parameter.default, Depends) for parameter in parameters):
        # A dependency would be called with the request and none of what it depends on.
        name = getattr(key, "__name__", repr(key))
        raise InvalidType("key", f"{name} has FastAPI dependencies of its own: give key=Depends({name})")
    return key


def _dependency_key(value: object, dependency: Depends) -> str | None:
    """The key a key dependency gave: a str (empty: none), an int as its decimal text, or None."""
    if value is None or isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    name = getattr(dependency.dependency, "__name__", repr(dependency.dependency))
    raise InvalidType(
        "key",
        f"the key dependency {name} must return a str, an int or None, got {type(value).__name__}: "
        "give Depends() a dependency returning the user's id",
    )


def _route_name(request: Request) -> str:
    route = request.scope.get("route")
    template = getattr(route, "path", None) or request.url.path
    return f"{request.method} {template}"
