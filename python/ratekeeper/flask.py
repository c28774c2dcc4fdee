"""Rate limiting for Flask: an extension, ``RateLimit(app, limiter=...)`` or ``init_app``.

>>> rate_limit = RateLimit(app, limiter=lim, key=client_ip(trusted_proxies=["10.0.0.0/8"]))
>>> @app.post("/login")
... @rate_limit.limit("5/min")
... def login(): ...

A request is decided by the limits of its view (each ``@limit`` a group of its own in the limiter, or a
named one several views share), else by its blueprint's, else by ``default_limits`` (one budget per view),
else by the limiter's rules on the path; ``application_limits`` (one budget across the app) on top. The
extension registers no Flask hook: it wraps ``app.wsgi_app`` in a gate, and, when some request needs it,
the app's view functions.

- While no view or blueprint has a mark, the key is one of [`ratekeeper.keys`][ratekeeper.keys], there is no ``cost=``
  and the app has no handler for 429, a decision depends only on the path and the key: the gate makes it
  from the WSGI environ before Flask routes, answers a refusal itself (cheaper than serving the view), and
  adds the fields when the response starts. Nothing else runs.
- Otherwise the view functions are wrapped, once, on the next request (Flask takes no new routes after the
  first), and each wrapper decides its request in the request context, once Flask has routed it; the gate then
  only adds the fields as the response starts (and the app calls that part of it as its ``wsgi_app``, when
  nothing has wrapped the gate since). The
  ``@limit`` wrappers Flask would call first are decided by the view's wrapper, which calls the function
  under them; one under another decorator decides its own limits when it is called, after that decorator
  (so a rate read from ``flask.g`` by a decorator above it is there), and a helper a view calls is limited
  too. In refuse mode with nothing to settle after, each of the view's limits (or the path's rules) takes one
  call of the limiter, and an allowed request leaves only its fields for the gate to add. A request whose
  view never ran (a 404, a redirect, or a response returned by a function the app registered with
  ``before_request``) is decided by the gate when its response starts, by its view's marks if Flask routed
  it to one, else by path; a refusal replaces it.

Refusals answer 429 with the JSON body and the IETF ``RateLimit`` fields of the ASGI middleware; allowed
responses carry the fields too. When the app has an error handler a 429 reaches, a refusal inside Flask is raised
as [`RateLimitExceeded`][ratekeeper.flask.RateLimitExceeded] (a ``TooManyRequests``) for it to answer; without one, a
view's wrapper returns the JSON 429 as the view's response (no exception goes through Flask's error handling; the gate
adds the fields as it starts), or, when nothing of the app's own would run after the view (``_quiet``, ``_untouched``),
raises it past Flask for the gate to write, as it writes its own refusals. Concurrency permits are held while the view
works: until the view returns, or for a streamed body until its iterator is exhausted or closed (whichever comes first:
before the server ends the response, or when the client leaves), and given back when the view raises.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import flask
from flask.sessions import NullSession, SecureCookieSession
from flask.signals import appcontext_tearing_down, request_finished, request_tearing_down
from werkzeug.exceptions import HTTPException, TooManyRequests
from werkzeug.wrappers import Response
from werkzeug.wsgi import get_path_info

from ratekeeper._core import Decision, Limit, Rate, Rule, _Take
from ratekeeper._errors import InvalidType, InvalidValue
from ratekeeper._gatekeeper import NOT_LIMITED, STATUS_LINES, Admission, Gatekeeper, ReleasingBody
from ratekeeper._http import WebOptions, WebSettings, declaring
from ratekeeper._peer_rates import expand_limits
from ratekeeper.keys import Header, KeyFunction, checked_key, key_text
from ratekeeper.limiter import Limiter

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ratekeeper._stats import Algorithm

__all__ = ["RateLimit", "RateLimitExceeded"]

View = TypeVar("View", bound=Callable[..., Any])
Target = TypeVar("Target")
StartResponse = Callable[..., Any]
LimitSpec = Limit | Rate | str
#: What ``limit()`` takes: limits, or one callable giving them per request.
Limits = LimitSpec | Callable[..., Any] | None

_LIMITS = "_ratekeeper_limits"  # on a function: its limits, a tuple of _RouteLimit in decoration order
_EXEMPT = "_ratekeeper_exempt"
_SELF_DECIDING = "_ratekeeper_self_deciding"  # on a wrapper made by limit(): the wrapper itself
_DECIDER = "_ratekeeper_decider"  # on a wrapper made by limit(): the extension whose limits it decides
_WRAPPED_BY = "_ratekeeper_gate"  # on a view wrapper: the gate that made it (its original is __wrapped__)
_ADMISSION = "ratekeeper.admission"  # the request's environ key for what was decided and is owed (or a _Quick[er])
_STREAMED = "ratekeeper.streamed"  # set when a streamed body holds the permits until it ends
_GATED = "ratekeeper.gate"  # the gate whose respond() serves the request (it catches _Answered)
_STARTED = "ratekeeper.started"  # the gates whose started() saw the response start (a set)
_LATE = "ratekeeper.late"  # gate -> the body of the refusal its started() answered with, for respond() to return
_CALLED = "ratekeeper.called"  # limits decided in this request without a view's verdict (a set)

log = logging.getLogger("ratekeeper")

try:  # Flask 3.0 and 3.1: the request context's variable, read without a LocalProxy (a tenth of the cost)
    from flask.globals import _cv_request

    #: The request context being served (in a request context: a view's wrapper); ``.request`` is the request.
    _request_context: Callable[[], Any] = _cv_request.get

    def _request_now() -> flask.Request | None:
        """The request being served, or ``None`` outside a request context."""
        context = _cv_request.get(None)
        return context.request if context is not None else None

except ImportError:  # pragma: no cover - a Flask without it

    def _request_context() -> Any:
        return flask.globals.request_ctx._get_current_object()  # type: ignore[attr-defined]

    def _request_now() -> flask.Request | None:
        """The request being served, or ``None`` outside a request context."""
        if not flask.has_request_context():
            return None
        request: flask.Request = flask.request._get_current_object()  # type: ignore[attr-defined]
        return request


def _current_request() -> flask.Request:
    """The request being served (in a request context: a view's wrapper)."""
    request: flask.Request = _request_context().request
    return request


class RateLimitExceeded(TooManyRequests):
    """A refusal inside Flask: the app's ``errorhandler(429)`` (or one for ``TooManyRequests``) answers it
    when the app has one; else its response is the JSON 429 with the rate-limit fields.

    Attributes:
        decision: the refusing [`Decision`][ratekeeper.Decision].
        description: the limit's ``error_message``, or ``"Rate limit exceeded"``.
    """

    def __init__(self, decision: Decision, admission: Admission, message: str | None = None) -> None:
        super().__init__(description=message or "Rate limit exceeded")
        self.decision = decision
        self._admission = admission
        self._message = message

    def get_response(self, environ: Any = None, scope: Any = None) -> Response:
        """The JSON 429 with the fields: what the refusal answers when the app has no handler for it."""
        return _refusal_response(self._admission, self._message)


def _refusal_response(admission: Admission, message: str | None) -> Response:
    """The JSON 429 with the fields for a refused ``admission``; ``message``, when given, is its ``detail``."""
    return Response(_refusal_body(admission, message), 429, list(admission.fields), mimetype="application/json")


def _refusal_body(admission: Admission, message: str | None) -> bytes:
    if message is None:
        return admission.body
    return json.dumps({**json.loads(admission.body), "detail": message}).encode()


def _of_request(function: Callable[..., Any], loc: str) -> Callable[[flask.Request], Any]:
    """``function`` as a callable of the request: ours take it, Flask-Limiter's take nothing and read
    ``flask.request``; both are accepted."""
    if not callable(function):
        raise InvalidType(loc, f"must be callable, got {type(function).__name__}")
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: given the request
        return function
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind in positional or p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return function
    return lambda _request: function()


class _RouteLimit:
    """One ``limit(...)`` (or a blueprint's, the defaults, the application's): its limits and options.

    Its requests are decided in the group ``name``, or, for a rate given per request, per method or per
    view, in a group per rate, method and view, made at its first request.
    """

    __slots__ = (
        "cost",
        "deduct_when",
        "error_message",
        "exempt_when",
        "extension",
        "groups",
        "key",
        "limits",
        "methods",
        "name",
        "on_breach",
        "per_method",
        "per_view",
        "rates",
        "shared",
    )

    def __init__(
        self,
        extension: RateLimit,
        name: str,
        limits: Sequence[Limits],
        *,
        shared: bool = False,
        per_view: bool = False,
        key: Callable[..., str | int | None] | None = None,
        cost: int | Callable[..., int] | None = None,
        methods: Iterable[str] | None = None,
        per_method: bool = False,
        exempt_when: Callable[..., bool] | None = None,
        deduct_when: Callable[[Response], bool] | None = None,
        on_breach: Callable[[Decision], Response | None] | None = None,
        error_message: str | Callable[..., str] | None = None,
        declare: bool = True,
    ) -> None:
        self.extension = extension
        self.name = name
        self.shared = shared
        self.per_view = per_view
        self.groups: dict[str, str | None] = {}  # the group's name with its rate, method and view -> group
        if len(limits) == 1 and callable(limits[0]) and not isinstance(limits[0], (Limit, Rate, str)):
            self.rates: Callable[[flask.Request], Any] | None = _of_request(limits[0], "limits")
            self.limits: list[LimitSpec] | None = None
        else:
            if any(callable(spec) and not isinstance(spec, (Limit, Rate, str)) for spec in limits):
                raise InvalidValue("limits", "a callable giving the limits per request comes alone: limit(rates)")
            self.rates = None
            self.limits = extension._expand(limits, "limits")
        self.key = _of_request(checked_key(key, "key", of_nothing=True), "key") if key is not None else None
        if cost is None or callable(cost):
            self.cost: int | Callable[[flask.Request], int] | None = (
                _of_request(cost, "cost") if cost is not None else None
            )
        elif isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise InvalidValue("cost", f"must be an int >= 1 or a callable, got {cost!r}")
        else:
            self.cost = cost
        if isinstance(methods, str):
            raise InvalidType("methods", f"must be a list of methods, e.g. ['POST'], got {methods!r}")
        self.methods = frozenset(method.upper() for method in methods) if methods is not None else None
        if not isinstance(per_method, bool):
            raise InvalidType("per_method", f"must be a bool, got {type(per_method).__name__}")
        self.per_method = per_method
        self.exempt_when = _of_request(exempt_when, "exempt_when") if exempt_when is not None else None
        if deduct_when is not None and not callable(deduct_when):
            raise InvalidType("deduct_when", f"must be callable, got {type(deduct_when).__name__}")
        self.deduct_when = deduct_when
        if on_breach is not None and not callable(on_breach):
            raise InvalidType("on_breach", f"must be callable, got {type(on_breach).__name__}")
        self.on_breach = on_breach
        if error_message is not None and not isinstance(error_message, str):
            error_message = _of_request(error_message, "error_message")
        self.error_message: str | Callable[[flask.Request], str] | None = error_message
        if self.limits is not None:  # bad limits raise here, at decoration
            if per_view or not declare:  # a group per view, made at its first request: only checked now
                Rule("^$", name, limits=self.limits)
            else:
                extension._declare(name, self.limits)

    def applies(self, request: flask.Request) -> bool:
        """Whether the request is limited by this: its method, and ``exempt_when``."""
        if self.methods is not None and request.method not in self.methods:
            return False
        return not (self.exempt_when is not None and self.exempt_when(request))

    def group(self, request: flask.Request, endpoint: str | None) -> str | None:
        """The group that decides ``request``; ``None`` when it gives no limit (a rate of ``None`` or ``""``)
        or a bad one (logged)."""
        name = self.name
        if self.per_view:
            name += f"@{endpoint}"
        value: Any = None
        if self.rates is not None:
            value = self.rates(request)
            name += f"[{value if isinstance(value, str) else repr(value)}]"
        if self.per_method:
            name += f":{request.method}"
        known = self.groups.get(name, "")
        if known != "":
            return known
        limits = self.limits
        try:
            if self.rates is not None:
                given = value if isinstance(value, (list, tuple)) else [value]
                limits = None if value in (None, "") else self.extension._expand(given, "limits")
            if limits is not None:
                self.extension._declare(name, limits)
        except (InvalidValue, InvalidType) as error:  # a rate given per request: never raised into the request
            log.error("ratekeeper: %s gave no usable limits, so it does not limit this request: %s", self.name, error)
            return None
        group = name if limits is not None else None
        self.groups[name] = group
        return group

    def message(self, request: flask.Request) -> str | None:
        return self.error_message(request) if callable(self.error_message) else self.error_message


def _sync_key(given: object) -> str | None:
    """What a key function gave, as the key: a str, an int (its decimal text) or None."""
    if inspect.isawaitable(given):
        if inspect.iscoroutine(given):
            given.close()  # never awaited: closed, so Python does not warn about it
        raise InvalidType("key", "returned an awaitable: Flask calls the key function synchronously, give a sync one")
    return key_text(given)


def _marks(function: Any) -> tuple[_RouteLimit, ...]:
    marks: tuple[_RouteLimit, ...] = getattr(function, _LIMITS, ())
    return marks


def _view_name(view: Callable[..., Any]) -> str:
    """The group name a view's limits start from: its qualified name, and its ``__name__`` when that was
    given after (``View.as_view`` names every view it makes ``view`` in its code)."""
    name = f"{view.__module__}.{view.__qualname__}"
    if view.__name__ != view.__qualname__.rpartition(".")[2]:
        name += f":{view.__name__}"
    return name


class _Verdict:
    """What was decided for a request inside Flask, part by part (a path's rules, each limit), and what is
    owed when its response ends. Quacks like an ``Admission`` for the gate."""

    __slots__ = ("called", "parts", "refusal", "status")

    def __init__(self, called: Iterable[_RouteLimit] = ()) -> None:
        self.status = 0
        self.parts: list[tuple[Admission, _RouteLimit | None]] = []
        self.refusal: tuple[Admission, _RouteLimit | None] | None = None
        self.called = set(called)  # the limits decided already: a limited function called later skips them

    @property
    def fields(self) -> Sequence[tuple[Any, Any]]:
        """The refusal's fields, or those of the allowed part the client most needs: a view's own limit
        before a shared one, the shortest window first (as Flask-Limiter picks its headers)."""
        if self.refusal is not None:
            return self.refusal[0].fields
        best: tuple[bool, float] | None = None
        fields: Sequence[tuple[Any, Any]] = ()
        for admission, limit in self.parts:
            if admission.decision is None or not admission.fields:
                continue
            rank = (limit is None or limit.shared, admission.decision.window or math.inf)
            if best is None or rank < best:
                best, fields = rank, admission.fields
        return fields

    @property
    def body(self) -> bytes:
        return self.refusal[0].body if self.refusal is not None else b""

    @property
    def decision(self) -> Decision | None:
        return self.refusal[0].decision if self.refusal is not None else None

    @property
    def refused_by_limit(self) -> bool:
        return self.refusal is not None and self.refusal[0].refused_by_limit

    @property
    def permits(self) -> bool:
        return any(admission.permits for admission, _ in self.parts)

    @property
    def owes(self) -> bool:
        """Whether the view's response is needed: permits to give back, or a ``deduct_when`` to ask."""
        return any(admission.permits or (limit is not None and limit.deduct_when) for admission, limit in self.parts)


Owed = Admission | _Verdict


class RateLimit:
    """The Flask extension; the arguments are those of
    [`ratekeeper.asgi.RateLimitMiddleware`][ratekeeper.asgi.RateLimitMiddleware], and:

    Args:
        app: the app, or ``None`` to call [`init_app`][ratekeeper.flask.RateLimit.init_app] later.
        limiter: the [`Limiter`][ratekeeper.Limiter].
        key: who is asking: [`client_ip`][ratekeeper.keys.client_ip] (default), [`header`][ratekeeper.keys.header],
            or any callable of ``flask.request`` returning the key or ``None``.
        mode: ``"refuse"``, or ``"delay"`` (``throttle`` up to ``max_delay`` seconds, then 429).
        shadow: decide, count and log what would be refused; refuse nothing.
        headers: which rate-limit fields responses carry.
        on_missing_key: ``"refuse"`` (``missing_key_status``) or ``"anonymous"`` (``anonymous_key``).
        cost: a callable of the request giving its cost.
        refund_when: a predicate on the response status; when true the request is given back.
        concurrency_status: the status of a refusal by a concurrency or adaptive limit: 429 (default) or 503.
        on_refused: a callable of the refusing [`Decision`][ratekeeper.Decision] returning the response.
        algorithm: the algorithm of every limit the extension makes from a rate (``@limit``, blueprints,
            ``default_limits``, ``application_limits``); ``"fixed_window"`` decides as Flask-Limiter's
            default strategy. Default: the limits' own (``"gcra"``). A [`Limit`][ratekeeper.Limit] keeps its.
        default_limits: the limits of every view that has none of its own nor its blueprint's, counted per
            view; without them such a view is decided by the limiter's rules on its path.
        application_limits: limits on top of all others, one budget per key across every view.
        exempt_static: static files (the ``static`` endpoints of the app and its blueprints) are not limited.

    Raises:
        InvalidValue, InvalidType: a bad option, named by ``loc``.
    """

    def __init__(
        self,
        app: flask.Flask | None = None,
        *,
        limiter: Limiter,
        on_refused: Callable[[Decision], Response] | None = None,
        algorithm: Algorithm | None = None,
        default_limits: Sequence[Limits] = (),
        application_limits: Sequence[Limits] = (),
        exempt_static: bool = True,
        **options: Unpack[WebSettings],
    ) -> None:
        self.options = WebOptions(limiter, **options)
        self.limiter = limiter
        self.gatekeeper = Gatekeeper(self.options)
        if on_refused is not None and not callable(on_refused):
            raise InvalidType("on_refused", f"must be callable, got {type(on_refused).__name__}")
        self.on_refused = on_refused
        if algorithm is not None:
            try:
                Limit("1/s", algorithm=algorithm)
            except (InvalidValue, InvalidType) as error:
                raise error.at("algorithm", drop=1) from None
        self.algorithm = algorithm
        if not isinstance(exempt_static, bool):
            raise InvalidType("exempt_static", f"must be a bool, got {type(exempt_static).__name__}")
        self.exempt_static = exempt_static
        self._blueprints: dict[flask.Blueprint, tuple[_RouteLimit, ...] | None] = {}  # None: exempt
        self._filters: list[Callable[[flask.Request], Any]] = []
        self._named: set[str] = set()  # the group names limit() gave
        self._declaring = threading.Lock()
        self._gates: weakref.WeakKeyDictionary[flask.Flask, _Gate] = weakref.WeakKeyDictionary()
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
        self.default_limits = self._shared("flask:default", default_limits, "default_limits", per_view=True)
        self.application_limits = self._shared("flask:application", application_limits, "application_limits")
        if self.default_limits is not None or self.application_limits is not None:
            self._mark()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Registers the extension on ``app`` (``app.extensions["ratekeeper"]``) and wraps ``app.wsgi_app``
        in its gate; no request hook is registered."""
        app.extensions["ratekeeper"] = self
        gate = self._gates[app] = _Gate(app, app.wsgi_app, self)
        app.wsgi_app = gate.serve  # type: ignore[method-assign]

    @declaring  # its errors name the line: the view is not known yet (limit(...) decorates it after)
    def limit(
        self,
        *limits: Limits,
        group: str | None = None,
        key: Callable[..., str | int | None] | None = None,
        cost: int | Callable[..., int] | None = None,
        methods: Iterable[str] | None = None,
        per_method: bool = False,
        exempt_when: Callable[..., bool] | None = None,
        deduct_when: Callable[[Response], bool] | None = None,
        on_breach: Callable[[Decision], Response | None] | None = None,
        error_message: str | Callable[..., str] | None = None,
    ) -> Callable[[Target], Target]:
        """A decorator: the view (or any function a view calls, or a blueprint) is limited by ``limits``.

        Each ``limit`` is a group of its own (named after the function), counted once per request; stacked
        ones are independent limits, all of which must admit. ``group`` names one several views share.
        A decorated function decides its limits when it is called, so a helper a view calls is limited
        too; a view's limits are decided once per request however many wrappers it has.

        Args:
            limits: limits (``"10/min"``, ``"10 per minute"``, ``"10/s; 100/min"``, a
                [`Rate`][ratekeeper.Rate] or [`Limit`][ratekeeper.Limit]), or one callable of the request
                (or of nothing) returning them per request; ``None`` or ``""`` from it means no limit.
            group: a group name shared by every view decorated with it.
            key: the key of this limit, a callable of the request (or of nothing); ``None`` from it means
                this limit does not apply to the request. Default: the extension's key.
            cost: what a request counts for: an int, or a callable of the request (or of nothing).
            methods: only requests of these methods are limited (e.g. ``["POST"]``).
            per_method: each method counted apart.
            exempt_when: a predicate of the request (or of nothing): when true, this limit does not apply.
            deduct_when: a predicate of the view's response: only responses for which it is true count.
            on_breach: called with the refusing [`Decision`][ratekeeper.Decision]; a response it returns
                answers the request.
            error_message: the refusal's ``detail`` (and the exception's ``description``): a str or a
                callable of the request (or of nothing).

        Raises:
            InvalidValue, InvalidType: no limits, a bad limit or option; ``loc`` names it.
        """
        if not limits:
            raise InvalidValue("limits", "give at least one limit, e.g. limit('5/min')")
        options: dict[str, Any] = {
            "key": key,
            "cost": cost,
            "methods": methods,
            "per_method": per_method,
            "exempt_when": exempt_when,
            "deduct_when": deduct_when,
            "on_breach": on_breach,
            "error_message": error_message,
        }
        _RouteLimit(self, group or "limit", limits, declare=False, **options)  # bad options raise here

        def decorate(target: Target) -> Target:
            if isinstance(target, flask.Blueprint):
                self.limit_blueprint(target, *limits, group=group, **options)
                return target
            if not callable(target):
                raise InvalidType("limit", f"decorates a view, a function or a blueprint, got {target!r}")
            marks = _marks(target)
            name = group if group is not None else _view_name(target) + (f"#{len(marks)}" if marks else "")
            new = name not in self._named
            self._named.add(name)
            route_limit = _RouteLimit(self, name, limits, shared=group is not None, **options)
            # Marked on the function too: registered with Flask before this decorator, it is what is called.
            setattr(target, _LIMITS, (*marks, route_limit))
            calling = target if getattr(target, _SELF_DECIDING, None) is target else self._deciding(target)
            setattr(calling, _LIMITS, (*marks, route_limit))
            if new:  # a function decorated anew at each call (a view's inner function) leaves the views be
                self._mark()
            return calling  # type: ignore[return-value]

        return decorate

    def exempt(self, target: Target) -> Target:
        """A decorator: the view (or every view of a blueprint, and of those nested in it) is never limited,
        by its own limits, the blueprint's, the defaults or the application's."""
        if isinstance(target, flask.Blueprint):
            self._blueprints[target] = None
        else:
            setattr(target, _EXEMPT, True)
        self._mark()
        return target

    def limit_blueprint(
        self, blueprint: flask.Blueprint, *limits: Limits, group: str | None = None, **options: Any
    ) -> None:
        """Every view of ``blueprint`` (and of the blueprints nested in it, unless they have their own)
        shares ``limits``, unless a view has limits of its own; with no limits the blueprint is exempt.
        ``options`` are those of [`limit`][ratekeeper.flask.RateLimit.limit]."""
        if not limits:
            self._blueprints[blueprint] = None
        else:
            marks = self._blueprints.get(blueprint) or ()
            name = group if group is not None else f"blueprint:{blueprint.name}" + (f"#{len(marks)}" if marks else "")
            self._blueprints[blueprint] = (*marks, _RouteLimit(self, name, limits, shared=True, **options))
        self._mark()

    def request_filter(self, predicate: Callable[..., Any]) -> Callable[..., Any]:
        """A decorator: a predicate of the request (or of nothing, reading ``flask.request``); a request for
        which one is true is not limited at all. Flask-Limiter's ``request_filter``."""
        self._filters.append(_of_request(predicate, "request_filter"))
        self._mark()
        return predicate

    # --- what the decorators make -------------------------------------------------------------------------

    def _shared(self, name: str, limits: Sequence[Limits], loc: str, *, per_view: bool = False) -> _RouteLimit | None:
        if isinstance(limits, (str, Limit, Rate)) or callable(limits):
            limits = [limits]
        if not limits:
            return None
        try:
            return _RouteLimit(self, name, list(limits), shared=True, per_view=per_view)
        except (InvalidValue, InvalidType) as error:
            raise error.at(loc, drop=1) from None

    def _expand(self, specs: Sequence[Any], loc: str) -> list[LimitSpec] | None:
        """The limits of ``specs`` as the limiter takes them, in the extension's algorithm; ``None`` for
        no limit."""
        items = expand_limits(specs, loc)
        if items is None:
            return None
        if self.algorithm is not None:
            items = [Limit(item, algorithm=self.algorithm) if isinstance(item, (str, Rate)) else item for item in items]
        return items

    def _declare(self, name: str, limits: Sequence[LimitSpec]) -> None:
        """Adds the group ``name`` to the limiter, once (adding groups is a read and a write of its rules)."""
        with self._declaring:
            self.limiter.add_group(name, list(limits))  # the same limits again do nothing; others raise

    def _deciding(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, deciding its limits when called in a request (unless decided for it already)."""
        extension = self

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def limited_async(*args: Any, **kwargs: Any) -> Any:
                held = extension._decide_call(limited_async)
                if not held:
                    return await function(*args, **kwargs)
                try:
                    result = await function(*args, **kwargs)
                except BaseException as error:
                    extension._release(held, error)
                    raise
                extension._release(held)
                return result

            calling: Callable[..., Any] = limited_async
        else:

            @functools.wraps(function)
            def limited(*args: Any, **kwargs: Any) -> Any:
                held = extension._decide_call(limited)
                if not held:
                    return function(*args, **kwargs)
                try:
                    result = function(*args, **kwargs)
                except BaseException as error:
                    extension._release(held, error)
                    raise
                extension._release(held)
                return result

            calling = limited
        setattr(calling, _SELF_DECIDING, calling)  # functools.wraps copies attributes, never this identity
        setattr(calling, _DECIDER, self)
        return calling

    def _mark(self) -> None:
        # A request's decision now may depend on its view, which only Flask's routing finds.
        self._at_gate = False
        self._quick_key = None
        self._marks += 1
        for gate in list(self._gates.values()):  # each app's views are wrapped anew on its next request
            gate.views_seen = -1

    # --- deciding ---------------------------------------------------------------------------------------

    def _filtered(self, request: flask.Request) -> bool:
        return any(predicate(request) for predicate in self._filters)

    def _peer(self, request: flask.Request) -> str | None:
        key = self.options.key_function
        if isinstance(key, KeyFunction):
            return key.from_environ(request.environ)
        return _sync_key(key(request))

    def _cost(self, request: flask.Request, limit: _RouteLimit | None) -> int:
        cost = limit.cost if limit is not None and limit.cost is not None else self.options.cost
        if cost is None:
            return 1
        return cost if isinstance(cost, int) else cost(request)

    def _decide(
        self, request: flask.Request, verdict: _Verdict, limits: Iterable[_RouteLimit], by_path: bool = False
    ) -> None:
        """Decides ``request`` by the path's rules (``by_path``) and by each of ``limits`` that applies, into
        ``verdict``. When one refuses, those allowed in this call are given back: a refusal counts nothing."""
        gatekeeper = self.gatekeeper
        endpoint = request.endpoint
        peer: str | None = None
        peer_read = False
        decided: list[tuple[Admission, _RouteLimit | None]] = []
        steps: list[_RouteLimit | None] = [None] if by_path else []
        steps.extend(limits)
        for limit in steps:
            if limit is None:
                group = None
            else:
                if not limit.applies(request):
                    continue
                group = limit.group(request, endpoint)
                if group is None:
                    continue
            if limit is not None and limit.key is not None:
                who = _sync_key(limit.key(request))
                if who is None:  # this limit's key says it does not apply (Flask-Limiter skips it too)
                    continue
            else:
                if not peer_read:
                    peer, peer_read = self._peer(request), True
                who = peer
            admission = gatekeeper.admit(who, request.path, group, self._cost(request, limit))
            if admission.status:
                for given, _ in decided:
                    self.gatekeeper.give_back(given)
                verdict.status = admission.status
                verdict.refusal = (admission, limit)
                return
            if admission.decision is not None:
                decided.append((admission, limit))
        verdict.parts.extend(decided)

    def _release(
        self, owed: Owed | Sequence[tuple[Admission, _RouteLimit | None]], error: BaseException | None = None
    ) -> None:
        """Gives back what ``owed`` holds; ``error``: the app raised it (a drop, for adaptive limits)."""
        parts = owed.parts if isinstance(owed, _Verdict) else owed if not isinstance(owed, Admission) else None
        if parts is None:
            if error is not None:
                self.gatekeeper.failed(owed, error)  # type: ignore[arg-type]
            self.gatekeeper.release(owed)  # type: ignore[arg-type]
            return
        for admission, _ in parts:
            if error is not None:
                self.gatekeeper.failed(admission, error)
            self.gatekeeper.release(admission)

    def _settle(self, owed: Owed, status: int) -> None:
        if isinstance(owed, Admission):
            self.gatekeeper.settle(owed, status)
        else:
            for admission, _ in owed.parts:
                self.gatekeeper.settle(admission, status)

    def _deduct(self, verdict: _Verdict, response: Response) -> None:
        """Gives back each allowed part whose limit's ``deduct_when`` says the response does not count."""
        for admission, limit in verdict.parts:
            if limit is not None and limit.deduct_when is not None and not limit.deduct_when(response):
                self.gatekeeper.reduce(admission)

    def _answer(
        self,
        request: flask.Request,
        refusal: tuple[Admission, _RouteLimit | None],
        response_class: type[Response] | None = None,
    ) -> Response:
        """The answer to a refusal inside Flask: the limit's ``on_breach`` response, ``on_refused``'s, or
        [`RateLimitExceeded`][ratekeeper.flask.RateLimitExceeded] raised for the app's 429 handler (its own response
        when there is none). With a ``response_class`` (a view's wrapper, in an app no handler of which a 429
        reaches), the JSON 429 that exception answers with is returned as one, not raised through Flask's error
        handling, and without the fields: the gate adds them as the response starts, for less than Werkzeug's
        ``Headers`` take to check them."""
        admission, limit = refusal
        if not admission.refused_by_limit:  # no key: the missing key's answer
            return Response(
                admission.body, status=admission.status, headers=admission.fields, mimetype="application/json"
            )
        decision = admission.decision
        assert decision is not None
        if limit is not None and limit.on_breach is not None:
            given = limit.on_breach(decision)
            if given is not None:
                return given
        if self.on_refused is not None:
            return self.on_refused(decision)
        message = limit.message(request) if limit is not None else None
        if response_class is not None:
            return response_class(_refusal_body(admission, message), 429, content_type="application/json")
        raise RateLimitExceeded(decision, admission, message)

    def _decide_call(self, calling: Callable[..., Any]) -> list[tuple[Admission, _RouteLimit | None]]:
        """Decides the limits of a ``limit``-decorated function as it is called: those not decided for this
        request yet. Returns the parts its caller gives back when the function returns (none when the view's
        verdict owes them); a refusal is raised."""
        request = _request_now()
        if request is None or not self.limiter.enabled:
            return []
        environ = request.environ
        verdict = _owed(environ)
        owner = verdict if isinstance(verdict, _Verdict) else None
        called: set[_RouteLimit] = owner.called if owner is not None else environ.setdefault(_CALLED, set())
        due = [limit for limit in _marks(calling) if limit not in called]
        called.update(due)
        if not due or getattr(calling, _EXEMPT, False) or self._filtered(request):
            return []
        decided = _Verdict()
        self._decide(request, decided, due)
        if decided.refusal is not None:
            if owner is not None:  # the gate adds the refusal's fields to whatever answers it
                owner.status, owner.refusal = decided.status, decided.refusal
                for admission, _ in owner.parts:  # a refused request counts nothing, in any of its limits
                    self.gatekeeper.give_back(admission)
                owner.parts.clear()
            answer = self._answer(request, decided.refusal)  # raises RateLimitExceeded
            _raise_response(answer)
        if owner is not None:
            owner.parts.extend(decided.parts)
            return []
        return decided.parts


class _Answered(BaseException):
    """Raised by a view's wrapper through Flask for the gate to answer a refusal itself (see ``_Gate.quiet``):
    not an ``Exception``, so Flask's error handling lets it by, and its request context is torn down on the
    way (with it as the error, which nothing of the app's sees)."""

    def __init__(self, admission: Admission, body: bytes) -> None:
        super().__init__()
        self.admission, self.body = admission, body


def _raise_response(response: Response) -> NoReturn:
    """Answers the request with ``response`` from inside a function (as ``flask.abort(response)``)."""
    raise HTTPException(response=response)


class _Route:
    """How a view's requests are decided, found when the views are wrapped."""

    __slots__ = ("by_path", "exempt", "fallback", "gate_decides", "own", "target")

    def __init__(
        self,
        exempt: bool = False,
        own: tuple[_RouteLimit, ...] = (),
        gate_decides: tuple[_RouteLimit, ...] = (),
        fallback: tuple[_RouteLimit, ...] = (),
        by_path: bool = True,
        target: Callable[..., Any] | None = None,
    ) -> None:
        self.exempt = exempt
        self.own = own  # every limit of the view
        # Those the view's wrapper decides: all but a limit()-made wrapper's under another decorator of the
        # view, which it decides as it is called (after that decorator).
        self.gate_decides = gate_decides
        # What the view's wrapper calls: the function under the limit()-made wrappers Flask would call first,
        # whose limits it decided (None: the view itself).
        self.target = target
        # When none of the view's own limits applies to the request's method (or it has none): the
        # blueprint's limits or the defaults, else (by_path) the limiter's rules on the path.
        self.fallback = fallback
        self.by_path = by_path

    def own_applies(self, request: flask.Request) -> bool:
        """Whether one of the view's own limits is for the request's method: then the blueprint's limits,
        the defaults and the path's rules do not apply (as in Flask-Limiter, a route's limits override
        the defaults only for the methods they limit)."""
        method = request.method
        return any(limit.methods is None or method in limit.methods for limit in self.own)


_EXEMPT_ROUTE = _Route(exempt=True, by_path=False)
_BY_PATH = _Route()


class _Gate:
    """``app.wsgi_app`` behind the extension: decides at the gate when it can, else wraps the app's views
    (see the module's docstring); adds the fields and applies ``refund_when`` when the response starts, and
    gives back permits still held when the app raises or no view took them."""

    __slots__ = (
        "app",
        "extension",
        "own_refusals",
        "prepared",
        "quiet",
        "routes",
        "static",
        "views",
        "views_decide",
        "views_seen",
        "wrapped_at",
        "wrapping",
        "wsgi_app",
    )

    def __init__(self, app: flask.Flask, wsgi_app: Callable[[dict[str, Any], Any], Any], extension: RateLimit) -> None:
        self.app = app
        self.wsgi_app = wsgi_app
        self.extension = extension
        self.routes: dict[str, _Route] = {}  # endpoint -> route, as the views were wrapped
        self.wrapped_at: tuple[int, int] | None = None  # (marks, number of views) then
        self.views = app.view_functions  # Flask keeps this dict for good, adding to it and replacing in it
        # The number of views when they were wrapped, for a request to compare cheaply; -1 after a new mark.
        self.views_seen = -1
        self.wrapping = threading.Lock()
        self.prepared = False
        self.own_refusals = True  # whether the gate may answer refusals itself (the app has no 429 handler)
        # Whether nothing of the app's runs after a view but Flask's own (see _quiet): a view's refusal may
        # then be answered by the gate, as a refusal it decided.
        self.quiet = False
        self.static: tuple[str, ...] = ()  # the URL prefixes of static files, when they are exempt
        # Whether the views decide every request (the gate never can again: a mark, a key or cost= that needs
        # flask.request, or the app's 429 handler); then a request goes straight to respond().
        self.views_decide = False

    def prepare(self) -> None:
        """At the first request, when the app is set up (Flask takes no routes or handlers after it): the
        static files' prefixes and whether the app answers 429s itself."""
        app = self.app
        if self.extension.exempt_static:
            prefixes = []
            for rule in app.url_map.iter_rules():
                if _is_static(rule.endpoint):
                    prefixes.append(rule.rule.partition("<")[0])
            self.static = tuple(prefixes)
        self.own_refusals = not _handles_429(app)
        self.quiet = self.own_refusals and _quiet(app, self.wsgi_app)
        self.prepared = True

    def serve(self, environ: dict[str, Any], start_response: StartResponse) -> Any:
        """The app behind the gate, as WSGI calls it (a bound method: a call costs less than an instance's)."""
        if self.views_decide:  # (a limiter turned off is for the views to see: they decide nothing)
            return self.respond(environ, start_response)
        extension = self.extension
        if not self.prepared:
            self.prepare()
        key = extension._quick_key if self.own_refusals else None
        peer = key.from_environ(environ) if key is not None else None
        if peer is not None:
            raw = environ.get("PATH_INFO", "")
            # What flask.request.path is: Werkzeug's decoding and one leading slash (ASCII needs neither).
            path = raw if raw[:1] == "/" and raw[1:2] != "/" and raw.isascii() else _request_path(environ)
            if self.static and path.startswith(self.static):
                return self.wsgi_app(environ, start_response)
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
        elif not self.at_gate:  # for good: marks are never taken back, and the app is set up
            self.views_decide = True
            self.wrap_views()
            if self.app.wsgi_app == self.serve:  # nothing has wrapped the gate: the app calls respond() itself
                self.app.wsgi_app = self.respond  # type: ignore[method-assign]
            return self.respond(environ, start_response)
        else:  # a missing key, delay mode, refund_when
            path = _request_path(environ)
            if self.static and path.startswith(self.static):
                return self.wsgi_app(environ, start_response)
            assert extension._environ_key is not None
            admission = extension.gatekeeper.admit(extension._environ_key.from_environ(environ), path)
        environ[_ADMISSION] = admission
        if admission.status:
            return self.refuse(admission, environ, start_response)
        if admission.permits:
            self.wrap_views()  # each view gives its permits back when it returns, or when its body ends
        return self.respond(environ, start_response)

    @property
    def at_gate(self) -> bool:
        """Whether the gate decides every request of this app (see ``RateLimit._at_gate``)."""
        extension = self.extension
        return extension._at_gate and extension._environ_key is not None and self.own_refusals

    def respond(self, environ: dict[str, Any], start_response: StartResponse) -> Any:
        """Calls the app; the fields and ``refund_when`` when its response starts, for whoever decided (the
        gate, a view's wrapper, or this, for a request no wrapper saw). Once the views decide every request, the
        app calls it as its ``wsgi_app`` (see ``serve``), and it wraps the views again after a new mark or view."""
        if self.views_seen != len(self.views) and self.views_decide:  # (a mark sets views_seen to -1)
            self.wrap_views()

        def start_with_fields(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            quick = environ.get(_ADMISSION)
            if type(quick) is tuple:  # a view's wrapper decided it allowed, and only its fields are owed (a
                # response started again for an error after the start carries them too)
                headers.extend(quick[0])
                return start_response(status, headers, exc_info)
            return self.started(environ, start_response, status, headers, exc_info)

        environ[_GATED] = self  # a view's wrapper may raise _Answered for this to answer
        try:
            body = self.wsgi_app(environ, start_with_fields)
        except _Answered as answered:  # a refusal, the request context torn down: answered as the gate's are
            status, headers, content = self.extension.gatekeeper.refusal(answered.admission, answered.body)
            start_response(STATUS_LINES[status], headers)
            return [] if environ.get("REQUEST_METHOD") == "HEAD" else [content]
        except BaseException as error:
            owed = _owed(environ)
            if owed is not None:  # the app raised through Flask (PROPAGATE_EXCEPTIONS)
                self.extension._release(owed, error)
            raise
        if _LATE in environ:  # the decision made as the response started refused it: the refusal is the body
            late = environ[_LATE].pop(self, None)
            if late is not None:
                close = getattr(body, "close", None)
                if close is not None:
                    close()
                return late
        return body

    def started(
        self,
        environ: dict[str, Any],
        start_response: StartResponse,
        status: str,
        headers: list[tuple[str, str]],
        exc_info: Any = None,
    ) -> Any:
        """``start_response`` of a request ``respond`` serves, unless only the fields a view's wrapper left are
        owed: the fields and ``refund_when`` for whoever decided, or the decision now for a request no wrapper
        saw (its refusal left in the environ for ``respond`` to answer with)."""
        started: set[_Gate] = environ.setdefault(_STARTED, set())
        if self in started:  # again, for an error after the start: decided and settled already
            return start_response(status, headers, exc_info)
        started.add(self)
        extension = self.extension
        owed = _owed(environ)
        if owed is None:
            owed = self.decide_late(environ)
            if owed.status:
                environ.setdefault(_LATE, {})[self] = self.refuse(owed, environ, start_response)
                return _discard
        if owed.status:  # refused inside Flask, and answered there (ours, on_breach's, the app's 429)
            present = {name.lower() for name, _ in headers}
            headers.extend(field for field in owed.fields if field[0].lower() not in present)
        else:
            headers.extend(owed.fields)
            extension._settle(owed, int(status[:3]))
            if owed.permits and _STREAMED not in environ:  # no view's body holds them
                extension._release(owed)
        return start_response(status, headers, exc_info)

    def refuse(self, owed: Owed, environ: dict[str, Any], start_response: StartResponse) -> Any:
        """Answers a refused request: ``on_refused``'s response, or the JSON 429 with the fields."""
        extension = self.extension
        decision = owed.decision
        if owed.refused_by_limit and extension.on_refused is not None and decision is not None:
            return extension.on_refused(decision)(environ, start_response)
        # Written as WSGI bytes: a Werkzeug Response costs more than the rest of a refusal.
        status, headers, body = extension.gatekeeper.refusal(owed if type(owed) is Admission else _refusal(owed)[0])
        start_response(STATUS_LINES[status], headers)
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    def decide(self, request: flask.Request, route: _Route, *, late: bool = False) -> Owed:
        """What was decided for ``request`` (at the gate), or its decision now by ``route``; left in the
        environ for the gate. ``late``: the view will not run, so its own wrappers decide nothing."""
        environ = request.environ
        owed = _owed(environ)
        if owed is not None:
            return owed
        if self.at_gate:  # the gate's hot path decided it, and nothing is owed (it leaves no trace)
            return NOT_LIMITED
        extension = self.extension
        gate_decides = route.own if late else route.gate_decides
        verdict = environ[_ADMISSION] = _Verdict(gate_decides)
        if route.exempt or not extension.limiter.enabled or extension._filtered(request):
            verdict.called.update(route.own)  # not limited: nor by the view's own wrappers
            return verdict
        own = route.own_applies(request)
        limits = list(gate_decides if own else route.fallback)
        if extension.application_limits is not None:
            limits.append(extension.application_limits)
        extension._decide(request, verdict, limits, by_path=route.by_path and not own)
        return verdict

    def decide_late(self, environ: dict[str, Any]) -> Owed:
        """The decision for a request whose view wrapper never ran, made as its response starts: by the marks
        of the view Flask routed it to (when a function the app registered with ``before_request`` answered
        it), else by path (a 404, a redirect)."""
        extension = self.extension
        request = _request_now()
        if request is not None:
            endpoint = request.endpoint
            route = self.routes.get(endpoint, _BY_PATH) if endpoint is not None else _BY_PATH
            if endpoint is not None and extension.exempt_static and _is_static(endpoint):
                route = _EXEMPT_ROUTE
            return self.decide(request, route, late=True)
        key = extension._environ_key
        if key is None or extension.options.cost is not None:  # not made inside Flask's request context
            return NOT_LIMITED
        admission: Admission = extension.gatekeeper.admit(key.from_environ(environ), _request_path(environ))
        environ[_ADMISSION] = admission
        return admission

    def route_of(self, endpoint: str, *views: Callable[..., Any]) -> _Route:
        """How the view at ``endpoint`` is decided: exempt (static, its mark or its blueprint's), by its own
        limits (on the function Flask calls, or on the one it wraps), its blueprint's, the defaults, or by
        path; the application's limits on top."""
        extension = self.extension
        if extension.exempt_static and _is_static(endpoint):
            return _EXEMPT_ROUTE
        if any(getattr(view, _EXEMPT, False) for view in views):
            return _EXEMPT_ROUTE
        own: dict[_RouteLimit, None] = {}
        for view in views:
            own.update(dict.fromkeys(_marks(view)))
        # The limit()-made wrappers Flask calls first, one in another (stacked @limit), would decide their
        # limits as they are called, with nothing between: the view's wrapper decides them with the rest and
        # calls the function under them. One under another decorator decides its own when it is called.
        target: Any = views[0]
        while _decides(target, extension):
            target = target.__wrapped__
        self_deciding: set[_RouteLimit] = set()
        function: Any = target
        while function is not None:
            if getattr(function, _SELF_DECIDING, None) is function:
                self_deciding.update(_marks(function))
            function = getattr(function, "__wrapped__", None)
        gate_decides = tuple(limit for limit in own if limit not in self_deciding)
        fallback: tuple[_RouteLimit, ...] | None = None
        blueprint = endpoint.rpartition(".")[0]
        while blueprint:  # innermost first, as flask.request.blueprints lists them, by their dotted names
            found = self.app.blueprints.get(blueprint)
            if found is not None and found in extension._blueprints:
                fallback = extension._blueprints[found]
                if fallback is None:
                    return _EXEMPT_ROUTE
                break
            blueprint = blueprint.rpartition(".")[0]
        if fallback is None and extension.default_limits is not None:
            fallback = (extension.default_limits,)
        if not own and fallback is None:
            return _BY_PATH
        return _Route(
            own=tuple(own),
            gate_decides=gate_decides,
            fallback=fallback or (),
            by_path=fallback is None,
            target=target if target is not views[0] else None,
        )

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
        routes: dict[str, _Route] = {}
        for endpoint, current in list(views.items()):
            view: Callable[..., Any] = current
            if getattr(view, _WRAPPED_BY, None) is self:
                view = view.__wrapped__  # type: ignore[attr-defined]  # wrapped before: anew from the original
            # A mark may have been put on the wrapper (what app.view_functions holds) or on the original.
            routes[endpoint] = route = self.route_of(endpoint, view, current)
            views[endpoint] = self.wrapped(view, route, endpoint)
        self.routes = routes
        self.wrapped_at = (marks, len(views))
        self.views_seen = len(views)
        if self.extension._marks != marks:  # a mark made meanwhile (which set views_seen first): again
            self.views_seen = -1

    def held(self, request: flask.Request, owed: Owed, returned: Any) -> Response:
        """The view's response, its ``deduct_when`` asked, once its permits are given back (the work is
        done), or handed to its streamed body (the work goes on while it streams)."""
        extension = self.extension
        response = self.app.make_response(returned)  # what Flask would make of it next; a Response is kept
        if isinstance(owed, _Verdict):
            extension._deduct(owed, response)
        if not owed.permits:
            return response
        if response.is_streamed:
            # Held until the body's iterator is exhausted (before the server ends the response) or closed
            # (the client left), whichever comes first. Not at the response's close: the server closes it
            # after the client has the last byte, so a client asking again at once would find it taken.
            release = functools.partial(extension._release, owed)
            response.response = ReleasingBody(response.response, release)
            response.call_on_close(release)  # a server that never iterates the body still closes it
            request.environ[_STREAMED] = True
        else:
            # Holding the permits while the server writes the body would refuse a client that asks again
            # as soon as it has read it.
            extension._release(owed)
        return response

    def finished(self, owed: Owed, error: BaseException) -> Any:
        """What a view that raised ``error`` leaves: an HTTP error answered as Flask would (so that
        ``deduct_when`` sees its response), else its permits given back and the error raised on."""
        if isinstance(owed, _Verdict) and isinstance(error, HTTPException) and owed.owes:
            return self.app.handle_user_exception(error)
        self.extension._release(owed)
        raise error

    def refused(self, request: flask.Request, owed: Owed, *, sync: bool = True) -> Response:
        """The answer to a request its view's wrapper refused: ``on_breach``'s, ``on_refused``'s, or the JSON 429
        returned as the view's response (as cheap as serving a view), unless a handler of the app answers 429s
        or the app traps HTTP errors: then ``RateLimitExceeded`` is raised for them. In a quiet app (nothing of
        its own runs after a sync view, see ``_quiet``), the JSON 429 is raised as ``_Answered`` for the gate to
        write, as it writes the refusals it decides: Flask makes no response, runs no hook and calls no signal."""
        app = self.app
        extension = self.extension
        if not self.own_refusals or app.config.get("TRAP_HTTP_EXCEPTIONS"):
            return extension._answer(request, _refusal(owed))  # raises RateLimitExceeded for the app
        admission, limit = refusal = _refusal(owed)
        by_limit = admission.refused_by_limit
        if (
            sync
            and self.quiet
            and request.environ.get(_GATED) is self
            and not (by_limit and (extension.on_refused is not None or (limit is not None and limit.on_breach)))
            and _untouched(_request_context())
        ):
            raise _Answered(admission, _refusal_body(admission, limit.message(request) if limit and by_limit else None))
        return extension._answer(request, refusal, app.response_class)

    def quick(
        self, view: Callable[..., Any], call: Callable[..., Any], route: _Route, endpoint: str
    ) -> Callable[..., Any] | None:
        """The wrapper of a sync ``view`` decided by one plain limit (or the path's rules), in refuse mode with
        nothing to settle after (``Gatekeeper.quick``), in an app that filters no requests: it decides in one
        call of the limiter, and a request allowed owing nothing but its fields leaves them in the environ as a
        ``_Quicker`` (no Admission or _Verdict), for the gate to add. ``None`` for any other view."""
        extension = self.extension
        gatekeeper = extension.gatekeeper
        if extension._filters or not gatekeeper.quick or inspect.iscoroutinefunction(view):
            return None
        by_path = route.by_path and not route.own
        steps = list(route.gate_decides if route.own else route.fallback)
        if extension.application_limits is not None:
            steps.append(extension.application_limits)
        if route.exempt or len(steps) + by_path != 1 or not all(_plain(limit) for limit in (*route.own, *steps)):
            return self.stepped(view, call, route, endpoint)
        limit = steps[0] if steps else None
        called = route.gate_decides  # as decide's verdict: a limited function called later skips them
        limiter = extension.limiter
        own_key = limit.key if limit is not None else None
        environ_key = extension._environ_key if own_key is None else None
        # The environ name of a keys.header() key (its from_environ not overridden), read in place.
        header = environ_key._environ_name if type(environ_key) is Header else None
        key = own_key or extension.options.key_function
        cost = limit.cost if limit is not None else None
        fixed = 1 if cost is None else cost if type(cost) is int else 0  # the cost, unless a callable gives it
        # What a _Quick of this view holds for every request: (group, limit, called); the group is made at the
        # limit's first request (in slow()), and with it the call of the limiter deciding in it.
        spec: tuple[str | None, _RouteLimit | None, tuple[_RouteLimit, ...]] | None = (
            (None, None, called) if limit is None else None
        )
        admit = gatekeeper.view_admitter(None)  # (cost, peer, path); in the limit's group: (cost, peer)
        gate = self

        def slow(request: flask.Request, peer: str | None) -> Owed:
            """A request without a key, or the limit's first (its group made), or a limit giving none, or any
            while the limiter is off."""
            nonlocal spec, admit
            environ = request.environ
            if not limiter.enabled:  # a limiter turned off decides nothing, nor do the view's own wrappers
                return gate.decide(request, route)
            group = None
            if limit is not None:
                group = spec[0] if spec is not None else limit.group(request, endpoint)
                if group is None:  # no limit for this request (logged): asked again at the next
                    return gate.verdict(environ, called, NOT_LIMITED, limit)
                if spec is None:
                    spec, admit = (group, limit, called), gatekeeper.view_admitter(group)
            if peer is None and own_key is not None:
                return gate.verdict(environ, called, NOT_LIMITED, limit)  # the limit's key says it does not apply
            n = fixed or cost(request)  # type: ignore[misc,operator]
            # Without a key (the extension's on_missing_key), or at the limit's first request.
            return gate.verdict(environ, called, gatekeeper.admit(peer, request.path, group, n), limit)

        # Each request reads only what its view needs: the environ for keys.header(), the request otherwise
        # (its path and method are attributes Werkzeug set when it made it), and its verdict is left as one
        # flat tuple. The limiter answers None while it is off: the request is decided as any other then.
        if limit is None:  # the path's rules

            @functools.wraps(view)
            def limited(*args: Any, **kwargs: Any) -> Any:
                request: flask.Request = _request_context().request
                environ = request.environ
                if _ADMISSION not in environ:
                    if header is not None:  # keys.header(), read as its from_environ reads it
                        peer = environ.get(header)
                        if peer is not None:
                            peer = peer.strip() or None
                    elif environ_key is not None:
                        peer = environ_key.from_environ(environ)
                    else:
                        peer = key(request)
                        if type(peer) is not str:
                            peer = _sync_key(peer)
                    if peer is None:
                        return gate.served(request, slow(request, peer), call, args, kwargs)
                    path = request.path
                    admitted = admit(1, peer, path)
                    if type(admitted) is tuple:  # allowed without permits: its fields, and no Decision made
                        environ[_ADMISSION] = (admitted, limiter, peer, path, 1, spec)
                        return call(*args, **kwargs) if kwargs else call(*args)  # (no copy of an empty kwargs)
                    if isinstance(admitted, Decision):
                        owed = gate.verdict(environ, called, gatekeeper.admission(admitted, peer, path), None)
                        return gate.served(request, owed, call, args, kwargs)
                return gate.served(request, gate.decide(request, route), call, args, kwargs)

            return limited

        @functools.wraps(view)
        def limited_by(*args: Any, **kwargs: Any) -> Any:
            request: flask.Request = _request_context().request
            environ = request.environ
            if _ADMISSION not in environ:
                if header is not None:  # keys.header(), read as its from_environ reads it
                    peer = environ.get(header)
                    if peer is not None:
                        peer = peer.strip() or None
                elif environ_key is not None:
                    peer = environ_key.from_environ(environ)
                else:
                    peer = key(request)
                    if type(peer) is not str:
                        peer = _sync_key(peer)
                if peer is None or spec is None:
                    return gate.served(request, slow(request, peer), call, args, kwargs)
                n = fixed or cost(request)  # type: ignore[misc,operator]
                admitted = admit(n, peer)
                if type(admitted) is tuple:  # nothing owed but the fields, which the gate adds
                    environ[_ADMISSION] = (admitted, limiter, peer, None, n, spec)
                    return call(*args, **kwargs) if kwargs else call(*args)  # (no copy of an empty kwargs)
                if isinstance(admitted, Decision):
                    receipt = (peer, None, spec[0], n)
                    owed = gate.verdict(environ, called, gatekeeper._admission(admitted, receipt), limit)
                    return gate.served(request, owed, call, args, kwargs)
            return gate.served(request, gate.decide(request, route), call, args, kwargs)

        return limited_by

    def stepped(
        self, view: Callable[..., Any], call: Callable[..., Any], route: _Route, endpoint: str
    ) -> Callable[..., Any]:
        """The wrapper of a sync ``view`` that ``quick`` does not take (exempt; several limits; limits for some
        methods, ``exempt_when``, ``per_method``, rates given per request, ``deduct_when``), in refuse mode with
        nothing to settle after and no request filter: ``decide`` and ``_decide`` made for it, the route's steps
        found once, each limit's group made at its first request (at each, for rates per request or method), a
        decision by the limiter itself; a request allowed owing nothing but its fields leaves a ``_Quick``."""
        extension = self.extension
        gatekeeper = extension.gatekeeper
        limiter = extension.limiter
        acquire = limiter._acquire
        both = _Take.BOTH
        fields = extension.options.fields
        ietf, legacy, on_allowed = fields.ietf, fields.legacy, fields.on_allowed
        environ_key = extension._environ_key
        key = extension.options.key_function
        application = (extension.application_limits,) if extension.application_limits is not None else ()
        # As decide() finds them: the view's own limits when one of them is for the request's method, else the
        # blueprint's or the defaults, else the path's rules; the application's on top.
        own_steps: tuple[_RouteLimit | None, ...] = (*route.gate_decides, *application)
        fallback_steps: tuple[_RouteLimit | None, ...] = (
            *((None,) if route.by_path else ()),
            *route.fallback,
            *application,
        )
        own = bool(route.own)
        by_method = any(limit.methods is not None for limit in route.own)
        exempt = route.exempt
        nothing: _Quick = ((), (), route.own)  # an exempt view's: its limits are decided by no one
        called = route.gate_decides
        groups: dict[_RouteLimit, str | None] = {}  # a limit's group, when the same for every request
        gate = self

        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            request: flask.Request = _request_context().request
            environ = request.environ
            if _ADMISSION in environ or not limiter.enabled:
                return gate.served(request, gate.decide(request, route), call, args, kwargs)
            if exempt:
                environ[_ADMISSION] = nothing
                return call(*args, **kwargs)
            steps = own_steps if own and (not by_method or route.own_applies(request)) else fallback_steps
            peer: Any = _UNREAD
            parts: list[tuple[Decision, tuple[str, str | None, str | None, int], _RouteLimit | None, Any]] = []
            heavy: list[tuple[Admission, _RouteLimit | None]] | None = None  # once a part needs an Admission
            for limit in steps:
                n = 1
                if limit is None:  # the path's rules
                    group = None
                else:
                    if (limit.methods is not None or limit.exempt_when is not None) and not limit.applies(request):
                        continue
                    if limit.rates is not None or limit.per_method:
                        group = limit.group(request, endpoint)
                    else:
                        group = groups.get(limit, _UNREAD)
                        if group is _UNREAD:
                            group = groups[limit] = limit.group(request, endpoint)
                    if group is None:
                        continue
                    cost = limit.cost
                    if cost is not None:
                        n = cost if type(cost) is int else cost(request)  # type: ignore[operator]
                if limit is not None and limit.key is not None:
                    who = _sync_key(limit.key(request))
                    if who is None:  # this limit's key says it does not apply
                        continue
                else:
                    if peer is _UNREAD:
                        peer = environ_key.from_environ(environ) if environ_key is not None else _sync_key(key(request))
                    who = peer
                if who is None:  # the extension's key found none: on_missing_key
                    admission = gatekeeper.admit(None, request.path, group, n)
                else:
                    path = request.path if group is None else None
                    receipt = (who, path, group, n)
                    decision = acquire(who, path, group=group, cost=n, take=both)
                    if decision.allowed and not decision.permits_held:
                        given = decision._fields(ietf, legacy) if on_allowed else ()
                        if heavy is None:
                            parts.append((decision, receipt, limit, given))
                        else:
                            heavy.append((Admission(0, given, decision=decision, route=receipt), limit))
                        continue
                    admission = gatekeeper._admission(decision, receipt)
                if heavy is None:
                    heavy = [(Admission(0, f, decision=d, route=r), lim) for d, r, lim, f in parts]
                if admission.status:  # refused: what this request counted is given back
                    for counted, _ in heavy:
                        gatekeeper.give_back(counted)
                    verdict = environ[_ADMISSION] = _Verdict(called)
                    verdict.status, verdict.refusal = admission.status, (admission, limit)
                    return gate.served(request, verdict, call, args, kwargs)
                if admission.decision is not None:
                    heavy.append((admission, limit))
            if heavy is None and not any(lim is not None and lim.deduct_when is not None for _, _, lim, _ in parts):
                environ[_ADMISSION] = (_best_fields(parts), tuple(parts), called)
                return call(*args, **kwargs)
            verdict = environ[_ADMISSION] = _Verdict(called)
            verdict.parts = (
                heavy if heavy is not None else [(Admission(0, f, decision=d, route=r), lim) for d, r, lim, f in parts]
            )
            return gate.served(request, verdict, call, args, kwargs)

        return limited

    @staticmethod
    def verdict(
        environ: dict[str, Any], called: Iterable[_RouteLimit], admission: Admission, limit: _RouteLimit | None
    ) -> _Verdict:
        """The verdict of a request its view's wrapper decided by one ``admission`` (as ``decide`` leaves it)."""
        verdict = environ[_ADMISSION] = _Verdict(called)
        if admission.status:
            verdict.status, verdict.refusal = admission.status, (admission, limit)
        elif admission.decision is not None:
            verdict.parts.append((admission, limit))
        return verdict

    def served(
        self, request: flask.Request, owed: Owed, call: Callable[..., Any], args: Any, kwargs: dict[str, Any]
    ) -> Any:
        """What a sync view's wrapper answers once ``owed`` is decided: the refusal, or ``call``'s response, its
        permits given back when it returns (or when its streamed body ends)."""
        if owed.status:
            return self.refused(request, owed)
        if owed is NOT_LIMITED:
            return call(*args, **kwargs)
        try:
            returned = call(*args, **kwargs)
        except BaseException as error:
            returned = self.finished(owed, error)
        return self.held(request, owed, returned) if owed.permits or _owes(owed) else returned

    def wrapped(self, view: Callable[..., Any], route: _Route, endpoint: str) -> Callable[..., Any]:
        """``view``, deciding its request by ``route`` unless the gate did, and giving back its permits."""
        gate = self
        call = route.target if route.target is not None else view
        # In an app the gate decides (its views wrapped for permits a path holds), a view decides nothing: the
        # generic wrapper sees that (decide()), where quick()'s would count the request again.
        quick = self.quick(view, call, route, endpoint) if not self.at_gate else None
        if quick is not None:
            setattr(quick, _WRAPPED_BY, self)
            return quick

        if inspect.iscoroutinefunction(view):  # Flask runs an async view through ensure_sync: keep it one

            @functools.wraps(view)
            async def limited_async(*args: Any, **kwargs: Any) -> Any:
                request = _current_request()
                owed = gate.decide(request, route)
                if owed.status:
                    return gate.refused(request, owed, sync=False)
                if owed is NOT_LIMITED:
                    return await call(*args, **kwargs)
                try:
                    returned = await call(*args, **kwargs)
                except BaseException as error:
                    returned = gate.finished(owed, error)
                return gate.held(request, owed, returned) if owed.permits or _owes(owed) else returned

            setattr(limited_async, _WRAPPED_BY, self)
            return limited_async

        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            request = _current_request()
            return gate.served(request, gate.decide(request, route), call, args, kwargs)

        setattr(limited, _WRAPPED_BY, self)
        return limited


#: What a view's wrapper leaves in the environ for a request allowed owing nothing but its fields (no Admission
#: or _Verdict is made): the fields the response carries, each decision's part (the decision, its receipt: key,
#: path, group, cost; the limit, None for the path's rules; its fields) and the limits decided (a _Verdict's
#: ``called``). ``_owed`` makes the _Verdict it stands for when one is asked.
_Part = tuple[
    Decision | Limiter, tuple[str, str | None, str | None, int], _RouteLimit | None, Sequence[tuple[str, str]]
]
_Quick = tuple[Sequence[tuple[str, str]], tuple[_Part, ...], tuple[_RouteLimit, ...]]
#: What ``_Gate.quick``'s wrappers leave instead, one part flat (a tuple fewer to build at each request): the fields,
#: the decision (or the limiter), the key, the path (None: decided in a group), the cost, and what the view's wrapper
#: holds for every request: its group, its limit and the limits decided.
_Quicker = tuple[
    Sequence[tuple[str, str]],
    Decision | Limiter,
    str,
    str | None,
    int,
    tuple[str | None, _RouteLimit | None, tuple[_RouteLimit, ...]],
]
_UNREAD: Any = object()  # a key not read yet


def _owed(environ: dict[str, Any]) -> Owed | None:
    """What was decided for the request of ``environ`` and is owed (``None``: nothing yet), a _Quick made the
    _Verdict it stands for."""
    owed: Owed | _Quick | _Quicker | None = environ.get(_ADMISSION)
    if not isinstance(owed, tuple):
        return owed
    if len(owed) == 6:  # a _Quicker: one part
        fields, decided, peer, path, cost, (group, limit, called) = owed
        parts: tuple[_Part, ...] = ((decided, (peer, path, group, cost), limit, fields),)
    else:
        _, parts, called = owed
    verdict = environ[_ADMISSION] = _Verdict(called)
    verdict.parts = [(_admitted(d, r, f), limit) for d, r, limit, f in parts]
    return verdict


def _admitted(
    decision: Decision | Limiter, receipt: tuple[str, str | None, str | None, int], fields: Sequence[tuple[str, str]]
) -> Admission:
    """The Admission of a request allowed without permits: by ``decision``, or, when the limiter's hot path
    made none (``Gatekeeper.view_admitter``: the part holds the limiter), by what it decided on the receipt's
    path or in its group, read back (``peek``) for its group and window, and counted there."""
    if isinstance(decision, Decision):
        return Admission(0, fields, decision=decision, route=receipt)
    peer, path, group = receipt[0], receipt[1], receipt[2]
    looked = decision.peek(peer, path, group=group)
    if looked.group is None:  # exempt or unrouted: nothing was counted
        return Admission(0, fields, route=receipt)
    return _Counted(0, fields, decision=looked, route=receipt)


class _Counted(Admission):
    """An Admission counted in its group though its ``decision`` is a look after the fact (``_admitted``)."""

    __slots__ = ()
    counted = True


def _best_fields(parts: Sequence[_Part]) -> Sequence[tuple[str, str]]:
    """The fields of the part the client most needs, as ``_Verdict.fields`` picks them: a view's own limit
    before a shared one or the path's rules, then the shortest window."""
    if len(parts) == 1:
        return parts[0][3]
    best: tuple[bool, float] | None = None
    fields: Sequence[tuple[str, str]] = ()
    for decision, _, limit, given in parts:
        if given and isinstance(decision, Decision):  # (stepped() makes parts of Decisions only)
            rank = (limit is None or limit.shared, decision.window or math.inf)
            if best is None or rank < best:
                best, fields = rank, given
    return fields


def _plain(limit: _RouteLimit) -> bool:
    """Whether ``limit`` applies to every request and decides it in one group, counting whatever the
    response: no ``methods``, ``exempt_when``, rates given per request, ``per_method`` or ``deduct_when``."""
    return (
        limit.methods is None
        and limit.exempt_when is None
        and limit.rates is None
        and not limit.per_method
        and limit.deduct_when is None
    )


def _decides(function: Any, extension: RateLimit) -> bool:
    """Whether ``function`` is a wrapper ``extension.limit()`` made (it decides its limits when called)."""
    return getattr(function, _SELF_DECIDING, None) is function and getattr(function, _DECIDER, None) is extension


def _refusal(owed: Owed) -> tuple[Admission, _RouteLimit | None]:
    if isinstance(owed, Admission):
        return owed, None
    assert owed.refusal is not None
    return owed.refusal


def _owes(owed: Owed) -> bool:
    return isinstance(owed, _Verdict) and owed.owes


def _is_static(endpoint: str) -> bool:
    """Whether ``endpoint`` serves static files: the app's ``static`` or a blueprint's ``<name>.static``."""
    return endpoint == "static" or endpoint.endswith(".static")


def _handles_429(app: flask.Flask) -> bool:
    """Whether the app (or one of its blueprints) has an error handler a 429 reaches: for 429, for
    ``TooManyRequests`` or one of its bases (``HTTPException``, ``Exception``)."""
    for handlers in app.error_handler_spec.values():
        for code, by_class in handlers.items():
            if code == 429 and by_class:
                return True
            if code is None and any(issubclass(RateLimitExceeded, cls) for cls in by_class):
                return True
    return False


def _quiet(app: flask.Flask, wsgi_app: Any) -> bool:
    """Whether nothing of ``app``'s own runs after a view but Flask's: the gate calls Flask's ``wsgi_app`` itself
    (no middleware between to see an exception go by), the app has no ``after_request`` or teardown function
    (Flask takes none after its first request), makes its responses with Flask's class, and overrides none of
    Flask's methods that run then. A view's refusal may then skip them: see ``_untouched`` for the request's
    own part (``after_this_request``, the session, signal receivers)."""
    cls = type(app)
    return (
        getattr(wsgi_app, "__func__", None) is flask.Flask.wsgi_app
        and getattr(wsgi_app, "__self__", None) is app
        and app.response_class is flask.Response
        and not any(app.after_request_funcs.values())
        and not any(app.teardown_request_funcs.values())
        and not app.teardown_appcontext_funcs
        and all(
            getattr(cls, name) is getattr(flask.Flask, name)
            for name in (
                "full_dispatch_request",
                "finalize_request",
                "make_response",
                "process_response",
                "do_teardown_request",
                "do_teardown_appcontext",
                "should_ignore_error",
            )
        )
    )


def _untouched(context: Any) -> bool:
    """Whether the request of ``context`` (a request context) leaves Flask nothing to do after its view: no
    ``after_this_request`` function, a session no one has read or changed (Flask would save it or add ``Vary:
    Cookie``), and no receiver of the signals sent as a response is finished or a context torn down."""
    if getattr(context, "_after_request_functions", True):
        return False
    session = getattr(context, "session", None)
    if not (
        session is None
        or isinstance(session, NullSession)
        or (
            type(session) is SecureCookieSession
            and not session.accessed
            and not session.modified
            and "_permanent" not in session  # (read without marking it accessed)
        )
    ):
        return False
    return not (request_finished.receivers or request_tearing_down.receivers or appcontext_tearing_down.receivers)


def _request_path(environ: dict[str, Any]) -> str:
    """What ``flask.request.path`` is for ``environ``: ``PATH_INFO`` decoded by Werkzeug, one leading slash."""
    return "/" + get_path_info(environ).lstrip("/")


def _discard(data: bytes) -> None:
    """The ``write`` handed to an app whose response was replaced by a refusal."""
