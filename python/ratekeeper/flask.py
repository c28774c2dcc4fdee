"""Rate limiting for Flask: an extension, ``RateLimit(app, limiter=...)`` or ``init_app``.

>>> rate_limit = RateLimit(app, limiter=lim, key=client_ip(trusted_proxies=["10.0.0.0/8"]))
>>> @app.post("/login")
... @rate_limit.limit("5/min")
... def login(): ...

A request is decided by a per-route limit when its view has one (a group of its own in the limiter,
decided by name, in ``before_request``), else by the limiter's rules on the path. While no view has a
mark, the path decides alone, so the decision is made around ``app.wsgi_app``, before Flask routes, and a
refusal costs less than serving the view. Refusals answer 429 with the JSON body and the IETF
``RateLimit`` fields of the ASGI middleware; allowed responses carry the fields too. Concurrency permits
are held while the view works: until the view returns, or for a streamed body until its iterator is
exhausted or closed (whichever comes first: before the server ends the response, or when the client
leaves), and given back when the view raises.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import flask
from werkzeug.wrappers import Response
from werkzeug.wsgi import get_path_info

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._errors import InvalidType, InvalidValue
from ratekeeper._http import Admission, Gatekeeper, WebOptions, WebSettings
from ratekeeper.keys import KeyFunction
from ratekeeper.limiter import Limiter

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RateLimit"]

View = TypeVar("View", bound=Callable[..., Any])

_ROUTE_GROUP = "_ratekeeper_group"
_EXEMPT = "_ratekeeper_exempt"
_ADMISSION = "ratekeeper.admission"  # the request's environ key for what was decided and is owed


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
        on_refused: Callable[[Decision], Response] | None = None,
        **options: Unpack[WebSettings],
    ) -> None:
        self.options = WebOptions(limiter, **options)
        self.limiter = limiter
        self.gatekeeper = Gatekeeper(self.options)
        self.on_refused = on_refused
        self._blueprints: dict[str, str | None] = {}  # blueprint -> group (None: exempt)
        # (app, endpoint) -> (exempt, group): the view's marks and blueprints, looked up once per endpoint.
        self._routes: dict[tuple[flask.Flask, str | None], tuple[bool, str | None]] = {}
        # Whether any view or blueprint has a mark (@limit, @exempt, limit_blueprint): until one does,
        # a request's decision does not depend on its view, so the WSGI gate can make it.
        self._marked = False
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Registers the extension on ``app`` (``app.extensions["ratekeeper"]``): its request hooks, and a
        gate around ``app.wsgi_app`` that refuses before Flask builds a request context when it can."""
        app.extensions["ratekeeper"] = self
        app.wsgi_app = _Gate(app.wsgi_app, self)  # type: ignore[method-assign]
        app.before_request(self._before)
        app.after_request(self._after)

    def limit(self, *limits: Limit | Rate | str, group: str | None = None) -> Callable[[View], View]:
        """A decorator: the view is limited by ``limits`` in a group of its own (its function's
        qualified name), or in the group ``group`` that several views share."""
        if not limits:
            raise InvalidValue("limits", "give at least one limit, e.g. limit('5/min')")

        def decorate(view: View) -> View:
            name = group if group is not None else f"{view.__module__}.{view.__qualname__}"
            self.limiter.add_group(name, list(limits))
            setattr(view, _ROUTE_GROUP, name)
            self._marked = True
            self._routes.clear()
            return view

        return decorate

    def exempt(self, view: View) -> View:
        """A decorator: the view is never limited."""
        setattr(view, _EXEMPT, True)
        self._marked = True
        self._routes.clear()
        return view

    def limit_blueprint(
        self, blueprint: flask.Blueprint, *limits: Limit | Rate | str, group: str | None = None
    ) -> None:
        """Every view of ``blueprint`` (and of the blueprints nested in it) shares ``limits``, unless a
        view has a limit of its own; with no limits the blueprint is exempt."""
        self._marked = True
        self._routes.clear()
        if not limits:
            self._blueprints[blueprint.name] = None
            return
        name = group if group is not None else f"blueprint:{blueprint.name}"
        self.limiter.add_group(name, list(limits))
        self._blueprints[blueprint.name] = name

    def _route(self, request: flask.Request) -> tuple[bool, str | None]:
        """(exempt, group) of the request's view; group ``None``: route by path."""
        app: flask.Flask = flask.current_app._get_current_object()  # type: ignore[attr-defined]
        endpoint = request.endpoint
        route = self._routes.get((app, endpoint))
        if route is None:
            route = self._routes[app, endpoint] = self._find_route(app, request)
        return route

    def _find_route(self, app: flask.Flask, request: flask.Request) -> tuple[bool, str | None]:
        view = app.view_functions.get(request.endpoint) if request.endpoint else None
        if view is not None:
            if getattr(view, _EXEMPT, False):
                return True, None
            own = getattr(view, _ROUTE_GROUP, None)
            if own is not None:
                return False, own
        for name in request.blueprints:  # innermost first
            if name in self._blueprints:
                group = self._blueprints[name]
                return group is None, group
        return False, None

    def _gate(self, environ: dict[str, Any]) -> Response | None:
        """The decision made from the WSGI environ, before Flask routes (see :class:`_Gate`): the refusal
        to answer, or ``None`` to go on (what was decided is left in the environ for the hooks)."""
        key = self.options.key_function
        if self._marked or self.options.cost is not None or not isinstance(key, KeyFunction):
            return None
        if not self.limiter.enabled:
            return None
        path = "/" + get_path_info(environ).lstrip("/")  # what flask.request.path is
        return self._admit(environ, path, None, key.from_environ(environ), 1)

    def _before(self) -> Response | None:
        # The request itself, not the context-local proxy: each attribute read through it costs a lookup.
        request: flask.Request = flask.request._get_current_object()  # type: ignore[attr-defined]
        if _ADMISSION in request.environ or not self.limiter.enabled:  # decided at the gate
            return None
        exempt, group = self._route(request)
        if exempt:
            return None
        key = self.options.key_function
        peer = key.from_environ(request.environ) if isinstance(key, KeyFunction) else key(request)
        cost = self.options.cost(request) if self.options.cost is not None else 1
        return self._admit(request.environ, request.path, group, peer, cost)

    def _admit(self, environ: dict[str, Any], path: str, group: str | None, peer: object, cost: int) -> Response | None:
        """Decides a request of ``peer`` (what the key function gave); the refusal to answer, or ``None``."""
        if peer is not None and not isinstance(peer, str):
            raise InvalidType("key", f"must return a str or None (Flask calls it synchronously), got {peer!r}")
        admission = environ[_ADMISSION] = self.gatekeeper.admit(peer, path, group, cost)
        if not admission.status:
            return None
        if admission.refused_by_limit and self.on_refused is not None:
            assert admission.decision is not None
            return self.on_refused(admission.decision)
        return Response(admission.body, status=admission.status, headers=admission.fields, mimetype="application/json")

    def _after(self, response: Response) -> Response:
        admission: Admission | None = flask.request.environ.get(_ADMISSION)
        if admission is None or not admission.permits:
            return response
        # An error page is built while the view's exception is being handled (and looks streamed).
        if response.is_streamed and sys.exc_info()[0] is None:
            # The view's work goes on while the body streams: held until the body's iterator is exhausted
            # (before the server ends the response) or closed (the client left), whichever comes first.
            # Not at the response's close: the server closes it after the client has the last byte, so a
            # client asking again at once would find the permit still taken.
            release = functools.partial(self.gatekeeper.release, admission)
            response.response = _ReleasingBody(response.response, release)
            response.call_on_close(release)  # a server that never iterates the body still closes it
        else:
            # The work is done; holding the permits while the server writes the body would refuse a
            # client that asks again as soon as it has read it.
            self.gatekeeper.release(admission)
        return response


class _ReleasingBody:
    """A streamed body that calls ``release`` once its iterator is exhausted, raises, or is closed."""

    __slots__ = ("_body", "_iterator", "_release")

    def __init__(self, body: Iterable[str] | Iterable[bytes], release: Callable[[], None]) -> None:
        self._body = body
        self._iterator: Iterator[Any] | None = None  # made on first use, as the server would
        self._release = release

    def __iter__(self) -> _ReleasingBody:
        return self

    def __next__(self) -> Any:  # the chunks of Werkzeug's body: str or bytes
        if self._iterator is None:
            self._iterator = iter(self._body)
        try:
            return next(self._iterator)
        except BaseException:  # StopIteration included: the last chunk has been handed to the server
            self._release()
            raise

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._release()


class _Gate:
    """``app.wsgi_app`` behind the extension.

    While no view has a mark, a request's decision depends only on its path and key, so it is made here,
    and a refusal is answered without Flask building a request context, routing, or running the app's
    hooks (the cheapest 429). Whoever decided (here, or ``before_request`` for a marked view), the fields
    are added and ``refund_when`` is applied when the response starts, and permits still held when the
    app raises are given back.
    """

    def __init__(self, wsgi_app: Callable[[dict[str, Any], Any], Any], extension: RateLimit) -> None:
        self.wsgi_app = wsgi_app
        self.extension = extension

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        extension = self.extension
        refusal = extension._gate(environ)
        if refusal is not None:
            return refusal(environ, start_response)

        def start_with_fields(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            admission: Admission | None = environ.get(_ADMISSION)
            if admission is not None and not admission.status:  # a refusal's fields are set already
                headers.extend(admission.fields)
                extension.gatekeeper.settle(admission, int(status[:3]))
            return start_response(status, headers, exc_info)

        try:
            return self.wsgi_app(environ, start_with_fields)
        except BaseException:
            admission: Admission | None = environ.get(_ADMISSION)
            if admission is not None:  # the app raised through Flask (PROPAGATE_EXCEPTIONS)
                extension.gatekeeper.release(admission)
            raise
