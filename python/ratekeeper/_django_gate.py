"""The Django side of the web lifecycle (``ratekeeper._gatekeeper``): a request's key (``user()`` among
them), and the lifecycle's fields, bodies and refusals written onto Django responses, for the middleware,
``@limit`` and the DRF throttles alike.

Imported by [`ratekeeper.django`][ratekeeper.django] (which re-exports ``user`` and ``UserKey``) and by
``ratekeeper._drf``; it imports neither.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.http.response import ResponseHeaders

from ratekeeper._core import Decision
from ratekeeper._django_settings import _config
from ratekeeper._errors import InvalidType
from ratekeeper._gatekeeper import Admission, Gatekeeper
from ratekeeper._http import WebOptions
from ratekeeper.keys import KeyCallable, KeyFunction, checked_key, key_text

if TYPE_CHECKING:
    from django.http.response import HttpResponseBase

__all__ = ["UserKey", "user"]


def user(fallback: KeyCallable | None = None) -> UserKey:
    """The authenticated user's primary key as the key (``"user:42"``); requests without an
    authenticated user are keyed by ``fallback`` (default: the client's IP, behind the
    ``TRUSTED_PROXIES`` setting).

    The middleware reads ``request.user``, so it goes after Django's ``AuthenticationMiddleware``; on ASGI
    it loads the user with ``request.auser()``. DRF's throttles see the user DRF authenticated.
    """
    if fallback is not None:
        fallback = checked_key(fallback, "fallback")
    return UserKey(fallback)


class UserKey:
    """The key function [`user`][ratekeeper.django.user] makes."""

    __slots__ = ("fallback",)

    def __init__(self, fallback: KeyCallable | None) -> None:
        self.fallback = fallback

    def __call__(self, request: Any) -> str | None:
        return _peer_of(self, request)

    def __repr__(self) -> str:
        return f"user(fallback={self.fallback!r})"


def _user_id(user: Any) -> str | None:
    return f"user:{user.pk}" if user is not None and user.is_authenticated else None


def _checked(peer: object) -> str | None:
    return key_text(peer)


def _peer_of(key: KeyCallable, request: Any) -> str | None:
    """The key of a request served synchronously (WSGI, or a sync DRF view)."""
    if isinstance(key, KeyFunction):
        # META is the WSGI environ, and ASGI Django fills it alike (REMOTE_ADDR, HTTP_*).
        return key.from_environ(request.META)
    if isinstance(key, UserKey):
        who = _user_id(getattr(request, "user", None))
        return who if who is not None else _peer_of(key.fallback or _config().client_ip, request)
    peer = key(request)
    if inspect.isawaitable(peer):
        if inspect.iscoroutine(peer):
            peer.close()  # never awaited: closed, so Python does not warn about it
        raise InvalidType("key", "returned an awaitable to a request served synchronously: give a sync key function")
    return _checked(peer)


async def _apeer_of(key: KeyCallable, request: Any) -> str | None:
    """The key of a request served on an event loop: the user is loaded without blocking it."""
    if isinstance(key, KeyFunction):
        return key.from_environ(request.META)
    if isinstance(key, UserKey):
        load = getattr(request, "auser", None)  # Django >= 5.0
        if load is not None:
            who = _user_id(await load())
        elif hasattr(request, "user"):
            who = await sync_to_async(lambda: _user_id(request.user))()
        else:
            who = None
        return who if who is not None else await _apeer_of(key.fallback or _config().client_ip, request)
    peer = key(request)
    if inspect.isawaitable(peer):
        peer = await peer
    return _checked(peer)


# --- deciding a request ---------------------------------------------------------------------------------------------


def _plain_store() -> bool:
    """Whether ``ResponseHeaders`` keeps its fields as ``_store[name.lower()] = (name, value)``, as it has
    since Django 3.2: the fields can then be written there directly (see ``_add_fields``)."""
    probe = ResponseHeaders({"RateLimit": "x"})
    store = getattr(probe, "_store", None)
    return isinstance(store, dict) and store == {"ratelimit": ("RateLimit", "x")}


_PLAIN_STORE = _plain_store()


def _add_fields(response: HttpResponseBase, fields: Sequence[tuple[str, str]]) -> None:
    """Adds the rate-limit fields to a response; a second limit's (a view's and the middleware's) joins the
    first's ``RateLimit`` and ``RateLimit-Policy`` lists, and the longer ``Retry-After`` stays."""
    headers = response.headers
    if _PLAIN_STORE and type(headers) is ResponseHeaders:
        # The fields are printable ASCII by construction: nothing for Django to check or encode, and each
        # read or write through the case-insensitive mapping costs about as much as the decision.
        store = headers._store
        for name, value in fields:
            lower = name.lower()
            if lower in store:
                _join_field(headers, name, value)
            else:
                store[lower] = (name, value)
        return
    for name, value in fields:
        _join_field(headers, name, value)


def _join_field(headers: ResponseHeaders, name: str, value: str) -> None:
    old = headers.get(name)
    if old is None:
        headers[name] = value
    elif name in ("RateLimit", "RateLimit-Policy"):
        headers[name] = f"{old}, {value}"
    elif name == "Retry-After":
        headers[name] = max(old, value, key=lambda seconds: int(seconds) if seconds.isdigit() else 0)
    else:
        headers[name] = value


def _refusal_response(gatekeeper: Gatekeeper, admission: Admission) -> HttpResponse:
    """The lifecycle's answer to a refusal (status, fields, JSON body), as a plain ``HttpResponse``."""
    status, _, body = gatekeeper.refusal(admission)
    response = HttpResponse(body, status=status, content_type="application/json")
    _add_fields(response, admission.fields)  # Django sets Content-Type and Content-Length itself
    return response


class _Gate:
    """The Django side of ``Gatekeeper``: reads the request, answers refusals, finishes responses.

    What the options fix is looked up once, here, not at every request."""

    __slots__ = (
        "cost",
        "from_environ",
        "gatekeeper",
        "key",
        "log_refusals",
        "on_refused",
        "options",
        "refunds",
    )

    def __init__(
        self,
        options: WebOptions,
        on_refused: Callable[[HttpRequest, Decision], HttpResponseBase] | None,
        log_refusals: bool = False,
    ) -> None:
        self.options = options
        self.gatekeeper = Gatekeeper(options)
        self.key = key = options.key_function
        # META is the WSGI environ, and ASGI Django fills it alike (REMOTE_ADDR, HTTP_*).
        self.from_environ = key.from_environ if isinstance(key, KeyFunction) else None
        self.cost = options.cost
        self.refunds = options.refund_when is not None
        self.on_refused = on_refused
        self.log_refusals = log_refusals

    def refusal(self, request: HttpRequest, admission: Admission) -> HttpResponseBase:
        if admission.refused_by_limit and self.on_refused is not None:
            assert admission.decision is not None
            response = self.on_refused(request, admission.decision)
        else:
            response = _refusal_response(self.gatekeeper, admission)
        if not self.log_refusals:
            # Django's handler logs a "django.request" warning for every 4xx unless the response says it
            # has been logged; the limiter counts its refusals itself (stats, metrics).
            response._has_been_logged = True
        return response

    def limited(self, request: HttpRequest, admission: Admission) -> bool:
        """``block=False``: a refusal by a limit is served with ``request.limited`` set and the rate-limit
        fields but ``Retry-After`` (the view answers); a missing key is refused still."""
        if not admission.refused_by_limit:
            return False
        request.limited = True
        admission.status = 0
        admission.fields = [field for field in admission.fields if field[0] != "Retry-After"]
        return True

    def run(
        self,
        request: HttpRequest,
        path: str,
        group: str | None,
        respond: Callable[[HttpRequest], HttpResponseBase],
        block: bool = True,
    ) -> HttpResponseBase:
        """Decides the request, then serves it with ``respond(request)`` or answers the refusal (with
        ``block`` False, serves it with ``request.limited`` set, for the view to decide)."""
        from_environ = self.from_environ
        peer = from_environ(request.META) if from_environ is not None else _peer_of(self.key, request)
        if self.gatekeeper.quick and group is None and peer is not None:
            # One core call decides it and, when it is allowed with no permits held, hands back only its
            # fields (no Decision, no Admission).
            admitted = self.gatekeeper.admit_quick(peer, path)
            if type(admitted) is tuple:  # allowed, nothing held: only the fields are owed
                response = respond(request)
                if admitted:
                    _add_fields(response, admitted)
                return response
            assert isinstance(admitted, Decision)
            admission = self.gatekeeper.admission(admitted, peer, path)
        else:
            cost = self.cost(request) if self.cost is not None else 1
            admission = self.gatekeeper.admit(peer, path, group, cost)
        if admission.status and (block or not self.limited(request, admission)):
            return self.refusal(request, admission)
        if admission.permits:
            try:
                response = respond(request)
            except BaseException as error:
                self.gatekeeper.failed(admission, error)
                self.gatekeeper.release(admission)
                raise
        else:  # nothing to give back if the view raises: no try block to enter
            response = respond(request)
        if admission.fields:
            _add_fields(response, admission.fields)
        if self.refunds:
            self.gatekeeper.settle(admission, response.status_code)
        if not admission.permits:
            return response
        self.gatekeeper.observe(admission, response.status_code)
        if response.streaming:
            _release_after_streaming(response, self.gatekeeper, admission)
        else:
            # The work is done: held while the server writes the body, a permit would refuse a client
            # that asks again as soon as it has read it.
            self.gatekeeper.release(admission)
        return response

    async def arun(
        self,
        request: HttpRequest,
        path: str,
        group: str | None,
        respond: Callable[[HttpRequest], Awaitable[HttpResponseBase]],
        block: bool = True,
    ) -> HttpResponseBase:
        """``run`` on an event loop: the key, the decision and what follows never block it."""
        from_environ = self.from_environ
        peer = from_environ(request.META) if from_environ is not None else await _apeer_of(self.key, request)
        cost = self.cost(request) if self.cost is not None else 1
        admission = await self.gatekeeper.aadmit(peer, path, group, cost)
        if admission.status and (block or not self.limited(request, admission)):
            return self.refusal(request, admission)
        try:
            response = await respond(request)
        except BaseException as error:
            self.gatekeeper.failed(admission, error)
            await self.gatekeeper.arelease(admission)
            raise
        if admission.fields:
            _add_fields(response, admission.fields)
        if self.refunds:
            await self.gatekeeper.asettle(admission, response.status_code)
        if admission.permits:
            self.gatekeeper.observe(admission, response.status_code)
            if response.streaming:
                _release_after_streaming(response, self.gatekeeper, admission)
            else:
                await self.gatekeeper.arelease(admission)
        return response


def _release_after_streaming(response: Any, gatekeeper: Gatekeeper, admission: Admission) -> None:
    """Holds a streamed response's permits until its body is exhausted, fails, or is closed (the client
    left), whichever comes first: the view's work goes on while the body streams. (A ``FileResponse``
    then streams through Python rather than ``wsgi.file_wrapper``.) Django registers the body's ``close``
    with the response's closers."""
    body = response.streaming_content
    if response.is_async:
        response.streaming_content = gatekeeper.abody(admission, body)
    else:
        response.streaming_content = gatekeeper.body(admission, body)
