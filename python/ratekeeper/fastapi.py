"""Per-route limits for FastAPI, declared at the route as a dependency.

>>> limits = RouteLimits(app, limiter=lim, key=header("X-API-Key"))
>>> @app.post("/login", dependencies=[Depends(limits.route("5/min"))])
... async def login(): ...

Each ``route(...)`` gets a group of its own in the limiter (named after the route's method and path
template, or ``group=`` to share one between routes), decided by name with ``check(key, group=...)``: no
regex routing, no second limiter. Several ``route(...)`` on one route are independent limits, each
counting a request once (the second is named ``"GET /items #2"``). The dependency runs after FastAPI's
routing, so the route template is known (``/items/{id}``), and included routers are covered like any
route. Refusals answer 429 with the same JSON body and fields as the middleware (``RouteLimits`` installs
the exception handler for it).

``RouteLimits`` also adds a small ASGI middleware to the app: it puts the fields of the route limits on
every response the route gives, a ``Response`` object it returns included, and decides the limits that
are not declared at a route: ``application_limits`` (one budget per key across every route) and
``default_limits`` (each route without limits of its own gets them, counted per route). ``algorithm=``
makes every group the integration creates use one algorithm (``"fixed_window"`` decides like slowapi and
Flask-Limiter).

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
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.params import Depends
from starlette.routing import BaseRoute, Match

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, RateLimited
from ratekeeper._gatekeeper import Admission, Gatekeeper
from ratekeeper._http import HeaderOptions, Penalty, WebOptions, declaring, refusal_body
from ratekeeper._peer_rates import expand_limits
from ratekeeper._stats import Algorithm
from ratekeeper.keys import KeyCallable, checked_key, key_of
from ratekeeper.limiter import Limiter

__all__ = ["KeyMissing", "RouteKey", "RouteLimited", "RouteLimits", "RouteRate"]

#: Who is asking at a route: a key function of the ``Request`` (sync or async), or ``Depends(dependency)``
#: whose result (a str, an int or ``None``) is the key.
RouteKey = KeyCallable | Depends

#: A route's limit: a rate (``"5/min"``), a :class:`~ratekeeper.Limit`, or a callable of the ``Request``
#: (sync or async) giving one or several of them for that request.
RouteRate = Limit | Rate | str | Callable[[Request], Any]

MissingKey = Literal["refuse", "anonymous"]

_ALGORITHMS = ("gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log", "leaky_bucket")
# The scope entry where the route limits leave the fields of an allowed request, for the middleware that
# RouteLimits adds to put on the response: a route's own Response object never sees FastAPI's `response`.
_FIELDS = "ratekeeper.route_fields"
# The scope entry listing what the limits that admitted a request counted, given back if a later one
# refuses it: a refused request counts against none of its limits, whatever their order.
_COUNTED = "ratekeeper.route_counted"
# The most groups one route(...) with a rate computed per request makes: one per distinct rate it gives.
_MAX_COMPUTED_RATES = 64

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


class KeyMissing(Exception):
    """A request whose key function or key dependency found no key, refused by ``on_missing_key="refuse"``;
    [`RouteLimits`][ratekeeper.fastapi.RouteLimits] answers it with ``status`` and the middleware's JSON ``body``."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"no rate limit key: answered {status}")
        self.status = status
        self.body = body


class RouteLimited(RateLimited):
    """A route limit refused the request: a [`RateLimited`][ratekeeper.RateLimited] that also carries the
    route's ``message`` (``None``: the default text), the ``detail`` of the 429's JSON body, and the
    response's ``fields`` (lower-case bytes pairs)."""

    def __init__(
        self, decision: Decision, message: str | None = None, fields: Sequence[tuple[bytes, bytes]] = ()
    ) -> None:
        super().__init__(decision)
        self.message = message
        self.fields = fields

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.decision, self.message, self.fields))


@dataclasses.dataclass(frozen=True)
class _RouteSpec:
    """What the middleware needs to know of one ``route(...)`` dependency found on a route."""

    keep_defaults: bool


class RouteLimits:
    """Route-level limits on ``limiter``; see the module's docstring.

    Args:
        app: the FastAPI app; gets the handlers that turn a refusal into its response, and a middleware
            that adds the fields to every response and decides the application and default limits;
            so ``RouteLimits`` is made before the app serves its first request.
        limiter: the [`Limiter`][ratekeeper.Limiter] the route groups are added to.
        key: who is asking (default [`client_ip`][ratekeeper.keys.client_ip]): any callable of the ``Request``,
            sync or async, or ``Depends(dependency)`` whose result is the key (a str, an int, or ``None``
            for none); a route may give its own.
        mode: ``"refuse"``, or ``"delay"`` to wait for the slot up to ``max_delay`` seconds.
        headers: which rate-limit fields responses carry.
        on_missing_key: what a request without a key gets: ``"anonymous"`` (the default: decided under the
            shared ``anonymous_key``) or ``"refuse"`` (answered ``missing_key_status``); a route may give its own.
        missing_key_status: the status of a refused request without a key: 429 (default), 401 or 403.
        anonymous_key: the key shared by the requests without one, with ``on_missing_key="anonymous"``.
        algorithm: the algorithm of every rate given as a string or [`Rate`][ratekeeper.Rate] to this
            integration (routes, defaults, application limits); ``None`` (default): the core's, GCRA.
            A [`Limit`][ratekeeper.Limit] keeps its own.
        default_limits: limits for every route that declares none of its own (and those whose
            ``route(..., keep_defaults=True)``), counted per route: a group per method and path template.
        application_limits: limits every request to a route passes on top of its own: one budget per key
            across every route (group ``"application"``). Routes marked
            [`exempt`][ratekeeper.fastapi.RouteLimits.exempt] skip both.
        log_refusals: one ``logging`` record per refusal, on the ``"ratekeeper.refusals"`` logger (WARNING,
            with ``peer``, ``group``, ``path`` and ``retry_after`` in its ``extra``).
        penalty: a [`Penalty`][ratekeeper.Penalty]: a key refused ``breaches`` times within ``within`` seconds
            is refused for ``block`` seconds at every route, whatever its rates.

    Raises:
        InvalidValue, InvalidType: a bad argument, named by ``loc``; an app that has started (``loc`` ``app``).
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
        algorithm: Algorithm | None = None,
        default_limits: Sequence[Limit | Rate | str] = (),
        application_limits: Sequence[Limit | Rate | str] = (),
        log_refusals: bool = False,
        penalty: Penalty | None = None,
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
            log_refusals=log_refusals,
            penalty=penalty,
        )
        if algorithm is not None and algorithm not in _ALGORITHMS:
            expected = ", ".join(repr(name) for name in _ALGORITHMS)
            raise InvalidValue("algorithm", f"unknown algorithm {algorithm!r}; expected one of {expected}")
        self.limiter = limiter
        self.options = options
        self.algorithm = algorithm
        #: The key dependency, when ``key=Depends(...)``; else None and :attr:`key` is the key function.
        self.key_dependency = key_dependency
        self.key = options.key_function
        self.headers = options.fields
        # Raw (ASGI bytes) fields: the middleware adds them to the response's start message.
        self.gatekeeper = Gatekeeper(options, raw=True)
        self._fields_of = Gatekeeper(options).fields  # as str pairs, for a RateLimited the app raised
        self.default_limits = (
            _checked_limits(_sequence(default_limits, "default_limits"), algorithm, "default_limits") or []
        )
        self.application_limits = (
            _checked_limits(_sequence(application_limits, "application_limits"), algorithm, "application_limits") or []
        )
        if key_dependency is not None and (self.default_limits or self.application_limits):
            raise InvalidValue(
                "key",
                "default_limits and application_limits are decided before routing, where no dependency runs: "
                "give RouteLimits a key function of the request, and key=Depends(...) to the routes",
            )
        #: The group every request to a route passes, when ``application_limits`` are given.
        self.application_group: str | None = None
        if self.application_limits:
            self.application_group = "application"
            limiter.add_group(self.application_group, self.application_limits)
        self._exempt: set[Callable[..., Any]] = set()
        self._specs: dict[Callable[..., Any], _RouteSpec] = {}
        # Generated group name -> the route(...) (or the defaults) it was given to: a second route(...) on
        # the same route is given the next free name. Names are claimed at a route's first request, in the
        # order its dependencies run, which is the same in every worker.
        self._owners: dict[str, object] = {}
        # id(route) -> (route, its plan): what the middleware decides for it, worked out once.
        self._plans: dict[int, tuple[BaseRoute, _RoutePlan]] = {}
        self.app = app
        if app.middleware_stack is not None:
            # Starlette builds its handlers and middleware once, at the first request: any added later are
            # never called, and a refusal would be a 500.
            raise InvalidValue("app", "the app has started: create RouteLimits before it serves its first request")
        app.add_exception_handler(RateLimited, self._refusal)
        app.add_exception_handler(KeyMissing, _missing_key)
        app.add_middleware(_RouteLimitsMiddleware, route_limits=self)

    async def _refusal(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, RateLimited)
        body = refusal_body(error.decision)
        if isinstance(error, RouteLimited):
            fields = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in error.fields]
            if error.message is not None:
                body = _with_detail(body, error.message)
        else:  # raised by the app itself, e.g. from lim.check()
            fields = list(self._fields_of(error.decision))
        response = Response(body, status_code=429, media_type="application/json")
        for name, value in fields:
            response.headers.append(name, value)
        return response

    def exempt(self, endpoint: Endpoint) -> Endpoint:
        """Marks a route's function as exempt from ``default_limits`` and ``application_limits``
        (decorate it under ``@app.get(...)``); limits declared at the route still apply.

        Returns:
            ``endpoint`` itself, unwrapped: FastAPI reads its signature as written.

        Raises:
            InvalidType: ``endpoint`` is not callable.
        """
        if not callable(endpoint):
            raise InvalidType("endpoint", f"must be the route's function, got {type(endpoint).__name__}")
        self._exempt.add(endpoint)
        self._plans.clear()
        return endpoint

    @declaring  # its errors name the line: the route is not known yet (route(...) is an argument of it)
    def route(
        self,
        *limits: RouteRate,
        group: str | None = None,
        key: RouteKey | None = None,
        cost: int | Callable[[Request], int] | None = None,
        on_missing_key: MissingKey | None = None,
        missing_key_status: int | None = None,
        methods: Sequence[str] | None = None,
        per_method: bool | None = None,
        exempt_when: Callable[[Request], bool | Awaitable[bool]] | None = None,
        message: str | None = None,
        keep_defaults: bool = False,
        block: bool = True,
    ) -> Callable[..., AsyncIterator[Decision | None]]:
        """A dependency limiting its route by ``limits`` (combined by policy ``"all"``).

        Args:
            limits: e.g. ``"5/min"``, or several (``"10/s", "1000/hour"``), or [`Limit`][ratekeeper.Limit];
                or a callable of the ``Request`` (sync or async) giving the rate(s) of that request,
                e.g. ``lambda request: "100/min" if is_admin(request) else "10/min"`` (each distinct
                answer is a group of its own: a key whose rate changes starts afresh in it).
            group: the group's name, to share it between routes; default ``"<METHOD> <path template>"``
                (``"<METHOD> <path template> #2"`` for a second ``route(...)`` on the same route).
            key: this route's key, instead of the one of [`RouteLimits`][ratekeeper.fastapi.RouteLimits]: a key function
                of the request, or ``Depends(dependency)``.
            cost: what a request counts for: an int >= 1, or a callable of the request giving it.
            on_missing_key: this route's ``on_missing_key``, instead of the one of
                [`RouteLimits`][ratekeeper.fastapi.RouteLimits].
            missing_key_status: this route's ``missing_key_status``, instead of the one of
                [`RouteLimits`][ratekeeper.fastapi.RouteLimits].
            methods: the HTTP methods limited (e.g. ``["POST"]``); requests of other methods pass
                uncounted. Default: every method.
            per_method: a budget per HTTP method. Default: yes for a generated group name (it names the
                method), no for a ``group=`` (one budget for every method of the routes sharing it).
            exempt_when: a predicate of the request (sync or async); when true, the limit neither counts
                nor refuses the request.
            message: the ``detail`` of this limit's 429 body, instead of ``"Rate limit exceeded"``.
            keep_defaults: the ``default_limits`` of [`RouteLimits`][ratekeeper.fastapi.RouteLimits] apply to this route
                too (by default a route's own limits replace them).
            block: ``False`` serves a refused request too: the route reads the refusal from the
                dependency's [`Decision`][ratekeeper.Decision] (``decision.allowed``) or from
                ``request.state.limited``, and decides what to answer.

        Returns:
            The dependency; it gives the [`Decision`][ratekeeper.Decision] (``None`` for a request the limit
            does not apply to: another method, or exempt) to a route that declares it as a parameter,
            and the route's concurrency permits back once the response is sent.

        Raises:
            InvalidValue, InvalidType: a bad argument, named by ``loc``.
        """
        if not limits:
            raise InvalidValue("limits", "give at least one limit, e.g. route('5/min')")
        if group is not None and not isinstance(group, str):
            raise InvalidType("group", f"must be a str, got {type(group).__name__}")
        units = _checked_cost(cost)
        only = _checked_methods(methods)
        for name, flag in (("per_method", per_method), ("keep_defaults", keep_defaults), ("block", block)):
            if flag is not None and not isinstance(flag, bool):
                raise InvalidType(name, f"must be a bool, got {type(flag).__name__}")
        if exempt_when is not None and not callable(exempt_when):
            raise InvalidType("exempt_when", f"must be a callable of the request, got {type(exempt_when).__name__}")
        if message is not None and not isinstance(message, str):
            raise InvalidType("message", f"must be a str, got {type(message).__name__}")
        computed = any(callable(item) and not isinstance(item, (Limit, Rate, str)) for item in limits)
        # None: every limit given is None, the peers' "not limited" (the route's own limits all the same).
        fixed = None if computed else _checked_limits(limits, self.algorithm, "limits")
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
                ),
                raw=True,
            )
        by_method = per_method if per_method is not None else group is None
        owner = object()  # this route(...): what claims its generated names
        names: dict[str, str] = {}  # base name (or base name and computed rates) -> group name, added

        async def limit_route(
            request: Request, response: Response, dependency_key: object = None
        ) -> AsyncIterator[Decision | None]:
            if only is not None and request.method not in only:
                yield None
                return
            if (not computed and fixed is None) or (exempt_when is not None and await _called(exempt_when, request)):
                yield None
                return
            base = _base_name(request, group, by_method)
            if not computed:
                assert fixed is not None
                name = names.get(base) or self._add_group(
                    names, base, self._claim(base, owner) if group is None else base, fixed
                )
            else:
                try:
                    wanted = await self._computed_limits(limits, request)
                except InvalidArgument as error:  # a rate computed per request: the error names the route
                    route = f"{request.method} {getattr(request.scope.get('route'), 'path', request.url.path)}"
                    given = type(error)(error.loc, f"{error.msg} (the rate computed for the route {route})")
                    raise given from None
                if wanted is None:  # not limited, this request
                    yield None
                    return
                rates = "; ".join(_limit_text(limit) for limit in wanted)
                label = f"{base} [{rates}]"
                name = names.get(label) or self._computed_group(names, base, label, rates, wanted, owner, group)
            if key_dependency is not None:
                peer = _dependency_key(dependency_key, key_dependency)
            else:
                peer = await key_of(key_function, request.scope, lambda: request)
            count = _computed_cost(units, request) if callable(units) else units
            admission = await gatekeeper.aadmit(peer, request.url.path, name, count)
            if admission.decision is None:  # no key, and on_missing_key="refuse"
                raise KeyMissing(admission.status, admission.body)
            fields = admission.fields
            if admission.status:
                if block:
                    await _reduce_counted(request.scope)
                    raise RouteLimited(admission.decision, message, fields)
                # Served anyway: the fields say what was decided; no Retry-After, nothing to retry.
                fields = [field for field in fields if field[0] != b"retry-after"]
            if not block:
                request.state.limited = bool(admission.status) or getattr(request.state, "limited", False)
            else:
                _count(request.scope, gatekeeper, admission)
            _put_fields(request.scope, response, fields)
            try:
                yield admission.decision
            except BaseException as error:  # the endpoint raised: a drop, for adaptive limits
                gatekeeper.failed(admission, error)
                raise
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
        self._specs[limit_route] = _RouteSpec(keep_defaults=keep_defaults)
        self._plans.clear()
        return limit_route

    def _claim(self, base: str, owner: object) -> str:
        """``base``, or ``"base #2"``, ``"base #3"``... : the first of them no other owner holds."""
        name, number = base, 1
        while self._owners.setdefault(name, owner) is not owner:
            number += 1
            name = f"{base} #{number}"
        return name

    def _add_group(self, names: dict[str, str], label: str, name: str, limits: Sequence[Limit]) -> str:
        """Adds the group ``name`` to the limiter, remembered as the group of ``label``."""
        self.limiter.add_group(name, limits)
        names[label] = name
        return name

    def _computed_group(
        self,
        names: dict[str, str],
        base: str,
        label: str,
        rates: str,
        limits: Sequence[Limit],
        owner: object,
        group: str | None,
    ) -> str:
        """The group of a rate computed per request: the route's name and the rates, e.g. ``"GET /a [5/min]"``."""
        if len(names) >= _MAX_COMPUTED_RATES:
            raise InvalidValue(
                "limits",
                f"the rate callable gave more than {_MAX_COMPUTED_RATES} different rates at {base!r}, each a "
                f"group of its own; give one of a few rates (now {rates!r})",
            )
        stem = self._claim(base, owner) if group is None else base
        return self._add_group(names, label, f"{stem} [{rates}]", limits)

    async def _computed_limits(self, limits: Sequence[RouteRate], request: Request) -> list[Limit] | None:
        """The limits of ``request`` when some are computed per request; ``None``: not limited."""
        given: list[object] = []
        for item in limits:
            if isinstance(item, (Limit, Rate, str)) or not callable(item):
                given.append(item)
                continue
            answer = await _called(item, request)
            if isinstance(answer, (list, tuple)):
                given.extend(answer)
            else:
                given.append(answer)
        return _checked_limits(given, self.algorithm, "limits")

    def _plan(self, route: BaseRoute) -> _RoutePlan:
        """What the middleware decides for ``route`` (cached)."""
        known = self._plans.get(id(route))
        if known is not None and known[0] is route:
            return known[1]
        endpoint = getattr(route, "endpoint", None)
        exempt = endpoint is not None and endpoint in self._exempt
        specs = [self._specs[call] for call in _dependency_calls(route) if call in self._specs]
        defaults = bool(self.default_limits) and not exempt and all(spec.keep_defaults for spec in specs)
        plan = _RoutePlan(
            template=getattr(route, "path", ""),
            application=self.application_group is not None and not exempt,
            defaults=defaults,
            names={},
        )
        self._plans[id(route)] = (route, plan)
        return plan

    def _default_group(self, plan: _RoutePlan, method: str) -> str:
        name = plan.names.get(method)
        if name is None:
            name = self._claim(f"{method} {plan.template}", _DEFAULTS)
            self.limiter.add_group(name, self.default_limits)
            plan.names[method] = name
        return name


@dataclasses.dataclass
class _RoutePlan:
    """What the middleware decides for one route: its application and default limits."""

    template: str
    application: bool
    defaults: bool
    names: dict[str, str]  # method -> the route's default group


_DEFAULTS = object()  # the owner of the default limits' group names


class _RouteLimitsMiddleware:
    """Added by [`RouteLimits`][ratekeeper.fastapi.RouteLimits]: decides the application and default limits of a request
    to a route, and adds the fields of every limit that admitted it to the response, whatever the route returns."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, route_limits: RouteLimits) -> None:
        self.app = app
        self.owner = route_limits
        self.decides = bool(route_limits.application_limits or route_limits.default_limits)

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        fields: list[tuple[bytes, bytes]] = []
        scope[_FIELDS] = fields
        admissions: list[Admission] = []
        owner = self.owner
        gatekeeper = owner.gatekeeper
        try:
            if self.decides and owner.limiter.enabled:
                refusal = await self._decide(scope, admissions)
                if refusal is not None:
                    # Only the refusing limit's fields: the others gave back what they counted.
                    status, headers, body = gatekeeper.refusal(refusal)
                    await send({"type": "http.response.start", "status": status, "headers": headers})
                    await send({"type": "http.response.body", "body": body})
                    return
                for admission in admissions:
                    fields.extend(admission.fields)

            async def send_with_fields(message: MutableMapping[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    for admission in admissions:
                        gatekeeper.observe(admission, message["status"])
                    if fields:
                        # A new message: the app may send the same one (and its headers) again.
                        message = {**message, "headers": [*message.get("headers", ()), *fields]}
                await send(message)

            try:
                await self.app(scope, receive, send_with_fields)
            except BaseException as error:
                for admission in admissions:
                    gatekeeper.failed(admission, error)
                raise
        finally:
            for admission in admissions:
                await gatekeeper.arelease(admission)

    async def _decide(self, scope: MutableMapping[str, Any], admissions: list[Admission]) -> Admission | None:
        """Decides the application and default limits of the route ``scope`` goes to; the refusal, if any."""
        owner = self.owner
        route = _route_of(owner.app.router.routes, scope)
        if route is None:  # no route (404, 405) or a mounted app: its own limits, if any
            return None
        plan = owner._plan(route)
        if not plan.application and not plan.defaults:
            return None
        request = Request(scope)
        peer = await key_of(owner.key, scope, lambda: request)
        path = scope.get("path", "")
        groups = [owner.application_group] if plan.application else []
        if plan.defaults:
            groups.append(owner._default_group(plan, scope["method"]))
        for group in groups:
            admission = await owner.gatekeeper.aadmit(peer, path, group)
            admissions.append(admission)
            if admission.status:
                await _reduce_counted(scope)
                return admission
            _count(scope, owner.gatekeeper, admission)
        return None


def _route_of(routes: Sequence[BaseRoute], scope: MutableMapping[str, Any]) -> BaseRoute | None:
    """The route the router will send ``scope`` to, matched as the router matches it."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route if hasattr(route, "endpoint") else None
    return None


def _dependency_calls(route: BaseRoute) -> list[Callable[..., Any]]:
    """Every dependency of a FastAPI route, its sub-dependencies included."""
    calls: list[Callable[..., Any]] = []
    pending = [getattr(route, "dependant", None)]
    while pending:
        dependant = pending.pop()
        if dependant is None:
            continue
        if dependant.call is not None:
            calls.append(dependant.call)
        pending.extend(dependant.dependencies)
    return calls


def _count(scope: MutableMapping[str, Any], gatekeeper: Gatekeeper, admission: Admission) -> None:
    """Notes what an admitted request counted, to give it back if a later limit refuses the request."""
    if admission.counted and not admission.status:
        scope.setdefault(_COUNTED, []).append((gatekeeper, admission))


async def _reduce_counted(scope: MutableMapping[str, Any]) -> None:
    """Gives back what the limits that admitted the request counted, now that another refused it; the
    refusal's response carries that limit's fields only."""
    sink = scope.get(_FIELDS)
    if sink is not None:
        sink.clear()
    counted: list[tuple[Gatekeeper, Admission]] = scope.pop(_COUNTED, [])
    for gatekeeper, admission in counted:
        await gatekeeper.areduce(admission)


def _put_fields(scope: MutableMapping[str, Any], response: Response, fields: Sequence[tuple[bytes, bytes]]) -> None:
    """Leaves an allowed request's fields for the middleware, or on FastAPI's ``response`` without it."""
    sink = scope.get(_FIELDS)
    if sink is not None:
        sink.extend(fields)
        return
    for name, value in fields:
        response.headers.append(name.decode("latin-1"), value.decode("latin-1"))


def _base_name(request: Request, group: str | None, by_method: bool) -> str:
    if group is not None:
        return f"{request.method} {group}" if by_method else group
    route = request.scope.get("route")
    template = getattr(route, "path", None) or request.url.path
    return f"{request.method} {template}" if by_method else template


def _with_detail(body: bytes, detail: str) -> bytes:
    content = json.loads(body)
    content["detail"] = detail
    return json.dumps(content).encode()


async def _called(function: Callable[[Request], Any], request: Request) -> Any:
    answer = function(request)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


def _sequence(value: object, loc: str) -> Sequence[object]:
    if isinstance(value, (str, Limit, Rate)) or not isinstance(value, (list, tuple)):
        raise InvalidType(loc, f"must be a list of limits, e.g. {loc}=['100/min'], got {value!r}")
    return value


def _checked_limits(items: Sequence[object], algorithm: Algorithm | None, loc: str) -> list[Limit] | None:
    """``items`` as [`Limit`][ratekeeper.Limit] objects, a rate given the integration's ``algorithm``: the
    peers' spellings read (several limits in one string, ``"10 per minute"``); ``None`` when every item
    is ``None``, the peers' "not limited"."""
    expanded = expand_limits(items, loc)
    if expanded is None:
        return None
    checked = []
    for index, item in enumerate(expanded):
        try:
            checked.append(item if isinstance(item, Limit) else Limit(item, algorithm=algorithm or "gcra"))
        except InvalidArgument as error:
            raise error.at(loc, index) from None
    return checked


def _limit_text(limit: Limit) -> str:
    if limit.adaptive is not None:
        return f"adaptive {limit.adaptive}"
    return str(limit.rate) if limit.rate is not None else f"concurrency {limit.concurrency}"


def _checked_cost(cost: object) -> int | Callable[[Request], int]:
    if cost is None:
        return 1
    if callable(cost):
        return cost
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise InvalidType("cost", f"must be an int or a callable of the request, got {type(cost).__name__}")
    if cost < 1:
        raise InvalidValue("cost", f"must be >= 1, got {cost}")
    return cost


def _computed_cost(cost: Callable[[Request], int], request: Request) -> int:
    """What ``cost`` says ``request`` counts for, checked: a whole number of requests."""
    units = cost(request)
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        name = getattr(cost, "__name__", repr(cost))
        raise InvalidValue(
            "cost", f"{name} must return a whole number of requests >= 1, got {units!r}: round it, e.g. math.ceil"
        )
    return units


def _checked_methods(methods: object) -> frozenset[str] | None:
    if methods is None:
        return None
    if isinstance(methods, str) or not isinstance(methods, (list, tuple, set, frozenset)):
        raise InvalidType("methods", f"must be a list of HTTP methods, e.g. methods=['POST'], got {methods!r}")
    checked = set()
    for index, method in enumerate(methods):
        if not isinstance(method, str) or not method.isalpha():
            raise InvalidValue(("methods", index), f"must be an HTTP method such as 'POST', got {method!r}")
        checked.add(method.upper())
    return frozenset(checked)


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
    """``key`` checked as a key function of the request: a FastAPI dependency given as the function itself
    (its ``Header(...)``, ``Depends(...)`` parameters would never be filled) is told to be ``Depends(...)``."""
    return checked_key(key, or_else=" or Depends(dependency)", depends=True)


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
