"""Rate limiting for Flask: an extension, ``RateLimit(app, limiter=...)`` or ``init_app``.

>>> rate_limit = RateLimit(app, limiter=lim, key=client_ip(trusted_proxies=["10.0.0.0/8"]))
>>> @app.post("/login")
... @rate_limit.limit("5/min")
... def login(): ...

Every request is decided in ``before_request``: by a per-route limit when its view has one (a group of
its own in the limiter, decided by name), else by the limiter's rules on the path. Refusals answer 429
with the JSON body and the IETF ``RateLimit`` fields of the ASGI middleware; allowed responses carry the
fields too. Concurrency permits are held while the view works: until the view returns, or for a streamed
body until the response is closed (``call_on_close``), and given back when the view raises.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import flask
from werkzeug.wrappers import Response

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._errors import InvalidType, InvalidValue, RateLimited
from ratekeeper._http import HeaderOptions, WebOptions, missing_key_body, refusal_body, response_headers
from ratekeeper.limiter import Limiter

__all__ = ["RateLimit"]

View = TypeVar("View", bound=Callable[..., Any])
log = logging.getLogger("ratekeeper")

_ROUTE_GROUP = "_ratekeeper_group"
_EXEMPT = "_ratekeeper_exempt"


class _Held:
    """What a request took, to settle when it ends."""

    __slots__ = ("cost", "decision", "group", "path", "peer", "permits")

    def __init__(self, peer: str, path: str, group: str | None, cost: int, decision: Decision, permits: bool) -> None:
        self.peer, self.path, self.group, self.cost = peer, path, group, cost
        self.decision, self.permits = decision, permits


class RateLimit:
    """The Flask extension; the arguments are those of :class:`ratekeeper.asgi.RateLimitMiddleware`.

    Args:
        app: the app, or ``None`` to call :meth:`init_app` later.
        limiter: the :class:`~ratekeeper.Limiter`.
        key: who is asking: :func:`~ratekeeper.keys.client_ip` (default), :func:`~ratekeeper.keys.header`,
            or any callable of ``flask.request`` returning the key or ``None``.
        mode: ``"refuse"``, or ``"delay"`` (``throttle`` up to ``max_delay`` seconds, then 429).
        shadow: decide, count and log what would be refused; refuse nothing.
        headers: which rate-limit fields responses carry.
        on_missing_key: ``"refuse"`` (``missing_key_status``) or ``"anonymous"`` (``anonymous_key``).
        cost: a callable of the request giving its cost.
        refund_when: a predicate on the response status; when true the request is given back.
        on_refused: a callable of the refusing :class:`~ratekeeper.Decision` returning the response.
    """

    def __init__(
        self,
        app: flask.Flask | None = None,
        *,
        limiter: Limiter,
        key: Callable[[Any], str | None] | None = None,
        mode: Literal["refuse", "delay"] = "refuse",
        max_delay: float = 5.0,
        shadow: bool = False,
        headers: HeaderOptions | None = None,
        on_missing_key: Literal["refuse", "anonymous"] = "refuse",
        missing_key_status: int = 429,
        anonymous_key: str = "anonymous",
        cost: Callable[[Any], int] | None = None,
        refund_when: Callable[[int], bool] | None = None,
        on_refused: Callable[[Decision], Response] | None = None,
    ) -> None:
        self.options = WebOptions(
            limiter=limiter,
            key=key,
            mode=mode,
            max_delay=max_delay,
            shadow=shadow,
            headers=headers,
            on_missing_key=on_missing_key,
            missing_key_status=missing_key_status,
            anonymous_key=anonymous_key,
            cost=cost,
            refund_when=refund_when,
        )
        self.limiter = limiter
        self.on_refused = on_refused
        self._blueprints: dict[str, str | None] = {}  # blueprint -> group (None: exempt)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Registers the extension's request hooks on ``app`` (``app.extensions["ratekeeper"]``)."""
        app.extensions["ratekeeper"] = self
        app.before_request(self._before)
        app.after_request(self._after)
        app.teardown_request(self._teardown)

    def limit(self, *limits: Limit | Rate | str, group: str | None = None) -> Callable[[View], View]:
        """A decorator: the view is limited by ``limits`` in a group of its own (its function's
        qualified name), or in the group ``group`` that several views share."""
        if not limits:
            raise InvalidValue("limits", "give at least one limit, e.g. limit('5/min')")

        def decorate(view: View) -> View:
            name = group if group is not None else f"{view.__module__}.{view.__qualname__}"
            self.limiter.add_group(name, list(limits))
            setattr(view, _ROUTE_GROUP, name)
            return view

        return decorate

    def exempt(self, view: View) -> View:
        """A decorator: the view is never limited."""
        setattr(view, _EXEMPT, True)
        return view

    def limit_blueprint(
        self, blueprint: flask.Blueprint, *limits: Limit | Rate | str, group: str | None = None
    ) -> None:
        """Every view of ``blueprint`` (and of the blueprints nested in it) shares ``limits``, unless a
        view has a limit of its own; with no limits the blueprint is exempt."""
        if not limits:
            self._blueprints[blueprint.name] = None
            return
        name = group if group is not None else f"blueprint:{blueprint.name}"
        self.limiter.add_group(name, list(limits))
        self._blueprints[blueprint.name] = name

    def _route(self) -> tuple[bool, str | None]:
        """(exempt, group) of the current request's view; group ``None``: route by path."""
        request = flask.request
        view = flask.current_app.view_functions.get(request.endpoint) if request.endpoint else None
        if view is not None and getattr(view, _EXEMPT, False):
            return True, None
        own = getattr(view, _ROUTE_GROUP, None) if view is not None else None
        if own is not None:
            return False, own
        for name in request.blueprints:  # innermost first
            if name in self._blueprints:
                group = self._blueprints[name]
                return group is None, group
        return False, None

    def _before(self) -> Response | None:
        if not self.limiter.enabled:
            return None
        exempt, group = self._route()
        if exempt:
            return None
        request = flask.request
        path = request.path
        peer = self.options.key_function(request)
        if peer is not None and not isinstance(peer, str):
            raise InvalidType("key", f"must return a str or None (Flask calls it synchronously), got {peer!r}")
        if peer is None:
            if group is None and self.limiter.resolve(self.options.anonymous_key, path) is None:
                return None
            if self.options.on_missing_key == "refuse":
                body = missing_key_body(self.options.missing_key_status)
                return Response(body, status=self.options.missing_key_status, mimetype="application/json")
            peer = self.options.anonymous_key
        cost = self.options.cost(request) if self.options.cost is not None else 1
        route = (None, group) if group is not None else (path, None)
        decision = self._decide(peer, route, cost)
        held = _Held(peer, path, group, cost, decision, decision.allowed)
        flask.g._ratekeeper = held
        if decision.allowed:
            return None
        held.permits = False
        if self.options.shadow:
            log.info("ratekeeper shadow mode: would refuse %r on %s (group %r)", peer, path, decision.group)
            return None
        if self.on_refused is not None:
            return self.on_refused(decision)
        fields = response_headers(decision, self.options.fields)
        return Response(refusal_body(decision), status=429, headers=fields, mimetype="application/json")

    def _decide(self, peer: str, route: tuple[str | None, str | None], cost: int) -> Decision:
        path, group = route
        if self.options.mode == "delay":
            try:
                self.limiter.throttle(peer, path, cost=cost, timeout=self.options.max_delay, group=group)
            except RateLimited as refused:
                return refused.decision
            return self.limiter._acquire(peer, path, group, cost, False)
        return self.limiter._acquire(peer, path, group, cost, True)

    def _after(self, response: Response) -> Response:
        held: _Held | None = flask.g.pop("_ratekeeper", None)
        if held is None:
            return response
        decision = held.decision
        if not decision.allowed and not self.options.shadow:
            return response  # the refusal: its fields are set
        for name, value in response_headers(decision, self.options.fields):
            if name != "Retry-After":  # a shadow refusal is served: nothing to retry
                response.headers[name] = value
        if held.permits:
            held.permits = False
            # An error page is built while the view's exception is being handled (and looks streamed).
            if response.is_streamed and sys.exc_info()[0] is None:
                # The view's work goes on while the body streams: held until the response is closed.
                response.call_on_close(lambda: self._release(held))
            else:
                # The work is done; holding the permits while the server writes the body would refuse a
                # client that asks again as soon as it has read it.
                self._release(held)
        if self.options.refund_when is not None and decision.allowed and self.options.refund_when(response.status_code):
            self.limiter.reduce(held.peer, None if held.group else held.path, held.cost, group=held.group)
        return response

    def _teardown(self, error: BaseException | None) -> None:
        # The view raised before a response existed: give the permits back now.
        held: _Held | None = flask.g.pop("_ratekeeper", None)
        if held is not None and held.permits:
            held.permits = False
            self._release(held)

    def _release(self, held: _Held) -> None:
        self.limiter._release(held.peer, None if held.group else held.path, held.group, held.cost)
