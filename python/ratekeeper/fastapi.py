"""Per-route limits for FastAPI, declared at the route as a dependency.

>>> limits = RouteLimits(app, limiter=lim, key=header("X-API-Key"))
>>> @app.post("/login", dependencies=[Depends(limits.route("5/min"))])
... async def login(): ...

Each route gets a group of its own in the limiter (named after its method and path template, or
``group=`` to share one between routes), decided by name with ``check(key, group=...)``: no regex
routing, no second limiter. The dependency runs after FastAPI's routing, so the route template is known
(``/items/{id}``), and included routers are covered like any route. Refusals answer 429 with the same
JSON body and fields as the middleware (``RouteLimits`` installs the exception handler for it).

A route's concurrency limits (``Limit(concurrency=...)``) hold their permits until the response has
been sent, streamed bodies included: the dependency gives them back in its exit code, which FastAPI
runs after the response (the default ``Depends(scope="request")``; with ``scope="function"`` they go
back when the route function returns).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal

from fastapi import FastAPI, Request, Response

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._errors import InvalidValue, RateLimited
from ratekeeper._http import Gatekeeper, HeaderOptions, WebOptions, refusal_body, response_headers
from ratekeeper.keys import KeyCallable, key_of
from ratekeeper.limiter import Limiter

__all__ = ["RouteLimits"]


class RouteLimits:
    """Route-level limits on ``limiter``; see the module's docstring.

    Args:
        app: the FastAPI app; gets the handler that turns a refusal into the 429 response.
        limiter: the :class:`~ratekeeper.Limiter` the route groups are added to.
        key: who is asking (default :func:`~ratekeeper.keys.client_ip`), or any callable of the
            ``Request``, sync or async; a route may give its own.
        mode: ``"refuse"``, or ``"delay"`` to wait for the slot up to ``max_delay`` seconds.
        headers: which rate-limit fields responses carry.
        anonymous_key: the key of requests whose key function gives ``None``.
    """

    def __init__(
        self,
        app: FastAPI,
        *,
        limiter: Limiter,
        key: KeyCallable | None = None,
        mode: Literal["refuse", "delay"] = "refuse",
        max_delay: float = 5.0,
        headers: HeaderOptions | None = None,
        anonymous_key: str = "anonymous",
    ) -> None:
        # A route's requests are decided by group name, so one without a key is decided as anonymous.
        options = WebOptions(
            limiter, key, mode, max_delay, headers=headers, on_missing_key="anonymous", anonymous_key=anonymous_key
        )
        self.limiter = limiter
        self.key = options.key_function
        self.headers = options.fields
        self.gatekeeper = Gatekeeper(options)
        app.add_exception_handler(RateLimited, self._refusal)

    async def _refusal(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, RateLimited)
        fields = dict(response_headers(error.decision, self.headers))
        return Response(refusal_body(error.decision), status_code=429, headers=fields, media_type="application/json")

    def route(
        self,
        *limits: Limit | Rate | str,
        group: str | None = None,
        key: KeyCallable | None = None,
        cost: Callable[[Request], int] | None = None,
    ) -> Callable[[Request, Response], AsyncIterator[Decision]]:
        """A dependency limiting its route by ``limits`` (combined by policy ``"all"``).

        Args:
            limits: e.g. ``"5/min"``, or several (``"10/s", "1000/hour"``), or :class:`~ratekeeper.Limit`.
            group: the group's name, to share it between routes; default ``"<METHOD> <path template>"``.
            key: this route's key function, instead of the one of :class:`RouteLimits`.
            cost: a callable of the request giving its cost.

        Returns:
            The dependency; it gives the :class:`~ratekeeper.Decision` to a route that declares it
            as a parameter, and the route's concurrency permits back once the response is sent.
        """
        if not limits:
            raise InvalidValue("limits", "give at least one limit, e.g. route('5/min')")
        wanted: Sequence[Limit | Rate | str] = limits
        key_function = key if key is not None else self.key
        added: set[str] = set()

        async def limit_route(request: Request, response: Response) -> AsyncIterator[Decision]:
            name = group if group is not None else _route_name(request)
            if name not in added:
                self.limiter.add_group(name, wanted)
                added.add(name)
            peer = await key_of(key_function, request.scope, lambda: request)
            units = cost(request) if cost is not None else 1
            admission = await self.gatekeeper.aadmit(peer, request.url.path, name, units)
            assert admission.decision is not None  # decided by group name, a missing key as anonymous
            if admission.status:
                raise RateLimited(admission.decision)
            for field, value in admission.fields:
                response.headers[field] = value
            try:
                yield admission.decision
            finally:
                await self.gatekeeper.arelease(admission)

        return limit_route


def _route_name(request: Request) -> str:
    route = request.scope.get("route")
    template = getattr(route, "path", None) or request.url.path
    return f"{request.method} {template}"
