"""Rate limiting for Flask: an extension, ``RateLimit(app, limiter=...)`` or ``init_app``.

>>> rate_limit = RateLimit(app, limiter=lim, key=client_ip(trusted_proxies=["10.0.0.0/8"]))
>>> @app.post("/login")
... @rate_limit.limit("5/min")
... def login(): ...

A request is decided by a per-view limit when its view has one (a group of its own in the limiter,
decided by name), else by the limiter's rules on the path. The extension registers no Flask hook: it wraps
``app.wsgi_app`` in a gate, and, when some request needs it, the app's view functions.

- While no view or blueprint has a mark, the key is one of :mod:`ratekeeper.keys` and there is no ``cost=``,
  a decision depends only on the path and the key: the gate makes it from the WSGI environ before Flask
  routes, answers a refusal itself (cheaper than serving the view), and adds the fields when the response
  starts. Nothing else runs.
- Otherwise the view functions are wrapped, once, on the next request (Flask takes no new routes after the
  first), and each wrapper decides its request in the request context, by its view's mark or by path. A
  request no wrapper saw (a 404, a redirect, an answer of the app's own ``before_request``) is decided when
  its response starts, by its view's marks if Flask found one, else by path; a refusal replaces it.

Refusals answer 429 with the JSON body and the IETF ``RateLimit`` fields of the ASGI middleware; allowed
responses carry the fields too. Concurrency permits are held while the view works: until the view returns,
or for a streamed body until its iterator is exhausted or closed (whichever comes first: before the server
ends the response, or when the client leaves), and given back when the view raises.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import flask
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wrappers import Response
from werkzeug.wsgi import get_path_info

from ratekeeper._core import Decision, Limit, Rate
from ratekeeper._errors import InvalidType, InvalidValue
from ratekeeper._http import _NOT_LIMITED, Admission, Gatekeeper, WebOptions, WebSettings
from ratekeeper.keys import KeyFunction
from ratekeeper.limiter import Limiter

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RateLimit"]

View = TypeVar("View", bound=Callable[..., Any])
StartResponse = Callable[..., Any]

_ROUTE_GROUP = "_ratekeeper_group"
_EXEMPT = "_ratekeeper_exempt"
_WRAPPED_BY = "_ratekeeper_gate"  # on a view wrapper: the gate that made it (its original is __wrapped__)
_ADMISSION = "ratekeeper.admission"  # the request's environ key for what was decided and is owed
_STREAMED = "ratekeeper.streamed"  # set when a streamed body holds the permits until it ends

#: (exempt, group) of a view: group ``None`` is decided by path.
Route = tuple[bool, "str | None"]
_BY_PATH: Route = (False, None)


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
        key = self.options.key_function
        # The key read from the environ, when a key function of ratekeeper.keys gives it without a request.
        self._environ_key = key if isinstance(key, KeyFunction) else None
        # Whether the gate decides every request from the environ: no marks, and neither the key nor the
        # cost needs flask.request. Else the view wrappers decide.
        self._at_gate = self._environ_key is not None and self.options.cost is None
        # The key, while the gate may take the gatekeeper's hot path (nothing is owed after an allowed
        # response but its fields); else None.
        quick = self._at_gate and self.gatekeeper.quick
        self._quick_key = self._environ_key if quick else None
        self._marks = 0  # bumped by every mark: each app's views are wrapped anew on its next request
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Registers the extension on ``app`` (``app.extensions["ratekeeper"]``) and wraps ``app.wsgi_app``
        in its gate; no request hook is registered."""
        app.extensions["ratekeeper"] = self
        app.wsgi_app = _Gate(app, app.wsgi_app, self).serve  # type: ignore[method-assign]

    def limit(self, *limits: Limit | Rate | str, group: str | None = None) -> Callable[[View], View]:
        """A decorator: the view is limited by ``limits`` in a group of its own (its function's
        qualified name), or in the group ``group`` that several views share."""
        if not limits:
            raise InvalidValue("limits", "give at least one limit, e.g. limit('5/min')")

        def decorate(view: View) -> View:
            name = group if group is not None else f"{view.__module__}.{view.__qualname__}"
            self.limiter.add_group(name, list(limits))
            setattr(view, _ROUTE_GROUP, name)
            self._mark()
            return view

        return decorate

    def exempt(self, view: View) -> View:
        """A decorator: the view is never limited."""
        setattr(view, _EXEMPT, True)
        self._mark()
        return view

    def limit_blueprint(
        self, blueprint: flask.Blueprint, *limits: Limit | Rate | str, group: str | None = None
    ) -> None:
        """Every view of ``blueprint`` (and of the blueprints nested in it) shares ``limits``, unless a
        view has a limit of its own; with no limits the blueprint is exempt."""
        if not limits:
            self._blueprints[blueprint.name] = None
        else:
            name = group if group is not None else f"blueprint:{blueprint.name}"
            self.limiter.add_group(name, list(limits))
            self._blueprints[blueprint.name] = name
        self._mark()

    def _mark(self) -> None:
        # A request's decision now may depend on its view, which only Flask's routing finds.
        self._at_gate = False
        self._quick_key = None
        self._marks += 1

    def _route_of(self, endpoint: str, *views: Callable[..., Any]) -> Route:
        """(exempt, group) of the view at ``endpoint``: its own mark (on the function Flask calls, or on the
        one it wraps), else its blueprints', else by path."""
        if any(getattr(view, _EXEMPT, False) for view in views):
            return True, None
        for view in views:
            own: str | None = getattr(view, _ROUTE_GROUP, None)
            if own is not None:
                return False, own
        blueprint = endpoint.rpartition(".")[0]
        while blueprint:  # innermost first, as flask.request.blueprints lists them
            if blueprint in self._blueprints:
                group = self._blueprints[blueprint]
                return group is None, group
            blueprint = blueprint.rpartition(".")[0]
        return _BY_PATH

    def _admission(self, request: flask.Request, route: Route) -> Admission:
        """What was decided for ``request`` (at the gate), or its decision now by ``route``; left in the
        environ for the gate."""
        environ = request.environ
        admission: Admission | None = environ.get(_ADMISSION)
        if admission is not None:
            return admission
        if self._at_gate:  # the gate's hot path decided it, and nothing is owed (it leaves no trace)
            return _NOT_LIMITED
        exempt, group = route
        if exempt or not self.limiter.enabled:
            admission = environ[_ADMISSION] = _NOT_LIMITED
            return admission
        key = self.options.key_function
        if isinstance(key, KeyFunction):
            peer = key.from_environ(environ)
        else:
            given = key(request)
            if given is not None and not isinstance(given, str):
                raise InvalidType("key", f"must return a str or None (Flask calls it synchronously), got {given!r}")
            peer = given
        cost = self.options.cost(request) if self.options.cost is not None else 1
        admission = environ[_ADMISSION] = self.gatekeeper.admit(peer, request.path, group, cost)
        return admission

    def _refusal(self, admission: Admission) -> Response:
        """The answer to a refused request: ``on_refused``'s, or the JSON 429 with the fields."""
        if admission.refused_by_limit and self.on_refused is not None:
            assert admission.decision is not None
            return self.on_refused(admission.decision)
        return Response(admission.body, status=admission.status, headers=admission.fields, mimetype="application/json")

    def _held(self, app: flask.Flask, request: flask.Request, admission: Admission, returned: Any) -> Response:
        """The view's response, once its permits are given back (the work is done), or handed to its
        streamed body (the work goes on while it streams)."""
        response = app.make_response(returned)  # what Flask would make of it next; a Response is kept
        if response.is_streamed:
            # Held until the body's iterator is exhausted (before the server ends the response) or closed
            # (the client left), whichever comes first. Not at the response's close: the server closes it
            # after the client has the last byte, so a client asking again at once would find it taken.
            release = functools.partial(self.gatekeeper.release, admission)
            response.response = _ReleasingBody(response.response, release)
            response.call_on_close(release)  # a server that never iterates the body still closes it
            request.environ[_STREAMED] = True
        else:
            # Holding the permits while the server writes the body would refuse a client that asks again
            # as soon as it has read it.
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
    """``app.wsgi_app`` behind the extension: decides at the gate when it can, else wraps the app's views
    (see the module's docstring); adds the fields and applies ``refund_when`` when the response starts, and
    gives back permits still held when the app raises or no view took them."""

    __slots__ = ("app", "extension", "routes", "wrapped_at", "wrapping", "wsgi_app")

    def __init__(self, app: flask.Flask, wsgi_app: Callable[[dict[str, Any], Any], Any], extension: RateLimit) -> None:
        self.app = app
        self.wsgi_app = wsgi_app
        self.extension = extension
        self.routes: dict[str, Route] = {}  # endpoint -> route, as the views were wrapped
        self.wrapped_at: tuple[int, int] | None = None  # (marks, number of views) then
        self.wrapping = threading.Lock()

    def serve(self, environ: dict[str, Any], start_response: StartResponse) -> Any:
        """The app behind the gate, as WSGI calls it (a bound method: a call costs less than an instance's)."""
        extension = self.extension
        key = extension._quick_key
        peer = key.from_environ(environ) if key is not None else None
        if peer is not None:
            raw = environ.get("PATH_INFO", "")
            # What flask.request.path is: Werkzeug's decoding and one leading slash (ASCII needs neither).
            path = raw if raw[:1] == "/" and raw[1:2] != "/" and raw.isascii() else _request_path(environ)
            gatekeeper = extension.gatekeeper
            admitted = gatekeeper.admit_quick(peer, path)
            if type(admitted) is tuple:  # the hot path: only the fields are owed (and nothing is left behind)
                if not admitted:
                    return self.wsgi_app(environ, start_response)

                def start_with_fields(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                    headers.extend(admitted)
                    return start_response(status, headers, exc_info)

                return self.wsgi_app(environ, start_with_fields)
            assert isinstance(admitted, Decision)
            admission = gatekeeper.admission(admitted, peer, path)
        elif not extension.limiter.enabled:
            return self.wsgi_app(environ, start_response)
        elif not extension._at_gate or extension._environ_key is None:
            self.wrap_views()
            return self.respond(environ, start_response)
        else:  # a missing key, delay mode, refund_when
            admission = extension.gatekeeper.admit(extension._environ_key.from_environ(environ), _request_path(environ))
        environ[_ADMISSION] = admission
        if admission.status:
            return self.refuse(admission, environ, start_response)
        if admission.permits:
            self.wrap_views()  # each view gives its permits back when it returns, or when its body ends
        return self.respond(environ, start_response)

    def respond(self, environ: dict[str, Any], start_response: StartResponse) -> Any:
        """Calls the app; the fields and ``refund_when`` when its response starts, for whoever decided (the
        gate, a view's wrapper, or this, for a request no wrapper saw)."""
        extension = self.extension
        late: list[Any] = []  # the refusal's body, when the decision made at the start refused
        started = False

        def start_with_fields(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            nonlocal started
            if started:  # again, for an error after the start: decided and settled already
                return start_response(status, headers, exc_info)
            started = True
            admission: Admission | None = environ.get(_ADMISSION)
            if admission is None:
                admission = self.decide_late(environ)
                if admission.status:
                    late.append(self.refuse(admission, environ, start_response))
                    return _discard
            if not admission.status:  # a refusal's fields are set already
                headers.extend(admission.fields)
                extension.gatekeeper.settle(admission, int(status[:3]))
                if admission.permits and _STREAMED not in environ:  # no view's body holds them
                    extension.gatekeeper.release(admission)
            return start_response(status, headers, exc_info)

        try:
            body = self.wsgi_app(environ, start_with_fields)
        except BaseException:
            admission: Admission | None = environ.get(_ADMISSION)
            if admission is not None:  # the app raised through Flask (PROPAGATE_EXCEPTIONS)
                extension.gatekeeper.release(admission)
            raise
        if late:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            return late[0]
        return body

    def refuse(self, admission: Admission, environ: dict[str, Any], start_response: StartResponse) -> Any:
        """Answers a refused request: ``on_refused``'s response, or the JSON 429 with the fields."""
        if admission.refused_by_limit and self.extension.on_refused is not None:
            return self.extension._refusal(admission)(environ, start_response)
        # The JSON answer as WSGI bytes: a Werkzeug Response costs more than the rest of a refusal.
        body = admission.body
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *admission.fields]
        start_response(f"{admission.status} {HTTP_STATUS_CODES[admission.status]}", headers)
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    def decide_late(self, environ: dict[str, Any]) -> Admission:
        """The decision for a request no view wrapper saw, made as its response starts: by the marks of
        the view Flask found for it (an app's ``before_request`` answered), else by path (a 404)."""
        extension = self.extension
        if flask.has_request_context():
            request: flask.Request = flask.request._get_current_object()  # type: ignore[attr-defined]
            endpoint = request.endpoint
            route = self.routes.get(endpoint, _BY_PATH) if endpoint is not None else _BY_PATH
            return extension._admission(request, route)
        key = extension._environ_key
        if key is None or extension.options.cost is not None:  # not made inside Flask's request context
            return _NOT_LIMITED
        admission: Admission = extension.gatekeeper.admit(key.from_environ(environ), _request_path(environ))
        environ[_ADMISSION] = admission
        return admission

    def wrap_views(self) -> None:
        """Wraps each of the app's view functions (again, after a new mark or view), so that each decides
        its requests by its route."""
        views = self.app.view_functions
        if self.wrapped_at == (self.extension._marks, len(views)):
            return
        with self.wrapping:  # other requests wait: a view not wrapped yet would not decide its request
            if self.wrapped_at != (self.extension._marks, len(views)):
                self.wrap_all(views)

    def wrap_all(self, views: dict[str, Any]) -> None:
        """Wraps every view anew from its original, by the marks as they are now."""
        marks = self.extension._marks  # read first: a mark made meanwhile has the views wrapped again
        routes: dict[str, Route] = {}
        for endpoint, current in list(views.items()):
            view: Callable[..., Any] = current
            if getattr(view, _WRAPPED_BY, None) is self:
                view = view.__wrapped__  # type: ignore[attr-defined]  # wrapped before: anew from the original
            # A mark may have been put on the wrapper (what app.view_functions holds) or on the original.
            routes[endpoint] = route = self.extension._route_of(endpoint, current, view)
            views[endpoint] = self.wrapped(view, route)
        self.routes = routes
        self.wrapped_at = (marks, len(views))

    def wrapped(self, view: Callable[..., Any], route: Route) -> Callable[..., Any]:
        """``view``, deciding its request by ``route`` unless the gate did, and giving back its permits."""
        extension, app = self.extension, self.app

        if inspect.iscoroutinefunction(view):  # Flask runs an async view through ensure_sync: keep it one

            @functools.wraps(view)
            async def limited_async(*args: Any, **kwargs: Any) -> Any:
                request: flask.Request = flask.request._get_current_object()  # type: ignore[attr-defined]
                admission = extension._admission(request, route)
                if admission.status:
                    return extension._refusal(admission)
                if not admission.permits:
                    return await view(*args, **kwargs)
                try:
                    returned = await view(*args, **kwargs)
                except BaseException:
                    extension.gatekeeper.release(admission)
                    raise
                return extension._held(app, request, admission, returned)

            setattr(limited_async, _WRAPPED_BY, self)
            return limited_async

        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            request: flask.Request = flask.request._get_current_object()  # type: ignore[attr-defined]
            admission = extension._admission(request, route)
            if admission.status:
                return extension._refusal(admission)
            if not admission.permits:
                return view(*args, **kwargs)
            try:
                returned = view(*args, **kwargs)
            except BaseException:
                extension.gatekeeper.release(admission)
                raise
            return extension._held(app, request, admission, returned)

        setattr(limited, _WRAPPED_BY, self)
        return limited


def _request_path(environ: dict[str, Any]) -> str:
    """What ``flask.request.path`` is for ``environ``: ``PATH_INFO`` decoded by Werkzeug, one leading slash."""
    return "/" + get_path_info(environ).lstrip("/")


def _discard(data: bytes) -> None:
    """The ``write`` handed to an app whose response was replaced by a refusal."""
