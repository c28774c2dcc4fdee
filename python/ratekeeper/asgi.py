"""Rate limiting for any ASGI app (FastAPI, Starlette, ...): pure ASGI middleware, no BaseHTTPMiddleware.

>>> app.add_middleware(RateLimitMiddleware, limiter=lim, key=client_ip(trusted_proxies=["10.0.0.0/8"]))

Every HTTP request and WebSocket connection is routed by the limiter's rules on its path (or on what
``path=`` makes of the scope) and decided before the app sees it. A refused request gets a 429 with a JSON
body and the IETF ``RateLimit`` fields; an allowed one gets the fields too (``headers=``). Concurrency
permits are held until the response body has been sent (streaming included), and given back on errors
and client disconnects as well. Lifespan and other scope types pass through.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ratekeeper._core import Decision
from ratekeeper._errors import InvalidArgument, InvalidType
from ratekeeper._gatekeeper import Admission, Gatekeeper, Refusal
from ratekeeper._http import WebOptions, WebSettings
from ratekeeper.keys import KeyFunction, key_of
from ratekeeper.limiter import Limiter

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["RateLimitMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _admit_in_python(
    key: KeyFunction, gatekeeper: Gatekeeper, scope: Scope
) -> tuple[tuple[bytes, bytes], ...] | Decision | None:
    """``Limiter._admit_scope`` for a key function the core does not read from the scope: the key read here,
    once, and decided by ``Gatekeeper.admit_quick`` (a Decision carries it back, as the core's does)."""
    if scope["type"] != "http":
        return None
    peer = key.from_scope(scope)
    return None if peer is None else gatekeeper.admit_quick(peer, scope.get("path", ""))


class RateLimitMiddleware:
    """Decides every request with ``limiter`` before the app sees it.

    Args:
        app: the ASGI app.
        limiter: the [`Limiter`][ratekeeper.Limiter]; its rules route on the request's path.
        key: who is asking: [`client_ip`][ratekeeper.keys.client_ip] (default, no trusted proxies),
            [`header`][ratekeeper.keys.header], or any callable of a Starlette ``Request``, sync or async,
            returning the key or ``None``.
        mode: ``"refuse"`` answers 429 at once; ``"delay"`` waits for the slot (``athrottle``) up to
            ``max_delay`` seconds, then answers 429.
        max_delay: the longest wait in delay mode, in seconds.
        shadow: decide, count and log what would have been refused, add the fields, refuse nothing.
        headers: which rate-limit fields responses carry ([`HeaderOptions`][ratekeeper.HeaderOptions]).
        on_missing_key: what a request without a key gets: ``"refuse"`` (``missing_key_status``, 401 or
            429) or ``"anonymous"`` (decided under the shared ``anonymous_key``).
        cost: a callable of the request giving its cost (an int >= 1); default 1.
        refund_when: a predicate on the response status; when true, the request is given back after the
            response (``lambda status: status < 400`` counts only failures, e.g. of logins).
        on_refused: an async callable ``(scope, receive, send, decision)`` that answers a refusal instead
            of the JSON 429 (it should send the ``decision``'s fields itself if it wants them).
        path: a callable of the scope giving what the rules route on; default ``scope["path"]``.
        concurrency_status: the status of a refusal by a concurrency or adaptive limit: 429 (default) or
            503, as a server shedding load answers. It carries ``Retry-After`` as every refusal does.

    Raises:
        InvalidValue, InvalidType: a bad argument, named by ``loc``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: Limiter,
        on_refused: Callable[[Scope, Receive, Send, Decision], Awaitable[None]] | None = None,
        path: Callable[[Scope], str] | None = None,
        **options: Unpack[WebSettings],
    ) -> None:
        self.app = app
        #: A bad option, kept when Starlette builds its middleware stack (see ``_refuse_to_start``).
        self.error: InvalidArgument | None = None
        #: The quick gate (see below): the fields of an allowed request that owes nothing else, a Decision
        #: (carrying its key) to serve through the lifecycle, or None to decide it on the full path.
        self._admit_scope: Callable[[Scope], tuple[tuple[bytes, bytes], ...] | Decision | None] | None = None
        try:
            self.options = WebOptions(limiter, **options)
            if path is not None and not callable(path):
                raise InvalidType("path", f"must be callable, got {type(path).__name__}")
        except InvalidArgument as error:
            # Starlette builds the middleware given to add_middleware in its lifespan: raised there, the
            # server would only log that the lifespan "appears unsupported", then answer 500s. Kept, it
            # fails the server's start-up with its message (and is raised at any request).
            if sys._getframe(1).f_code.co_name != "build_middleware_stack":
                raise
            self.error = error
            return
        self.limiter = limiter
        self.gatekeeper = Gatekeeper(self.options, raw=True)
        self.on_refused = on_refused
        self.path = path
        key = self.options.key_function
        # The hot path, one call into the core: a key the core reads from the scope (a header, or the
        # client's address with no proxies), cost 1, routed on the scope's path, decided at once in memory
        # (not in Redis: that is awaited), nothing owed after an allowed response but its fields.
        quick = path is None and self.gatekeeper.quick and not limiter._waits_on_io
        if quick and isinstance(key, KeyFunction) and (where := key._scope_key()) is not False:
            fields = self.options.fields
            self._admit_scope = functools.partial(
                limiter._admit_scope, fields.ietf and fields.on_allowed, fields.legacy and fields.on_allowed, where
            )
        elif quick and isinstance(key, KeyFunction):  # e.g. client_ip behind proxies: the key read in Python
            self._admit_scope = functools.partial(_admit_in_python, key, self.gatekeeper)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        admit = self._admit_scope
        if admit is not None:
            admitted = admit(scope)
            if type(admitted) is tuple:  # the hot path: only the fields are owed
                if not admitted:
                    await self.app(scope, receive, send)
                    return

                # Not a coroutine function: it hands back send's awaitable, one coroutine less a message.
                def send_with_fields(message: Message) -> Awaitable[None]:
                    if message["type"] == "http.response.start":
                        # A new message: the app may send the same one (and its headers) again.
                        message = {**message, "headers": [*message.get("headers", ()), *admitted]}
                    return send(message)

                await self.app(scope, receive, send_with_fields)
                return
            if admitted is not None:  # refused, or permits held: served through the lifecycle
                # The key was read once, and comes back with the Decision.
                assert isinstance(admitted, Decision)
                assert admitted._peer is not None
                admission = self.gatekeeper.admission(admitted, admitted._peer, scope.get("path", ""))
                await self._serve(scope, receive, send, admission)
                return
        if self.error is not None:  # no hot path then: checked here only
            await self._refuse_to_start(scope, receive, send, self.error)
            return
        kind = scope["type"]
        if kind not in ("http", "websocket") or not self.limiter.enabled:
            await self.app(scope, receive, send)
            return
        path = self.path(scope) if self.path is not None else scope.get("path", "")
        key_function = self.options.key_function
        if isinstance(key_function, KeyFunction):
            peer = key_function.from_scope(scope)
        else:
            peer = await self._peer(scope)
        cost = self._cost(scope) if self.options.cost is not None else 1
        await self._serve(scope, receive, send, await self.gatekeeper.aadmit(peer, path, None, cost))

    async def _refuse_to_start(self, scope: Scope, receive: Receive, send: Send, error: InvalidArgument) -> None:
        """A bad option: the server's start-up fails with its message (``lifespan.startup.failed``: uvicorn
        logs it and exits, "Application startup failed"); any request raises it (a server without the
        lifespan protocol answers 500 and logs it)."""
        if scope["type"] != "lifespan":
            raise error.at() from None  # a new one each time: the kept one gathers no tracebacks
        message = await receive()
        if message["type"] == "lifespan.startup":
            text = f"ratekeeper.asgi.RateLimitMiddleware: {error}"
            await send({"type": "lifespan.startup.failed", "message": text})

    async def _serve(self, scope: Scope, receive: Receive, send: Send, admission: Admission) -> None:
        """Answers a refusal, or calls the app, adding the fields and settling what is owed after."""
        kind = scope["type"]
        gatekeeper = self.gatekeeper
        if admission.status:
            if admission.refused_by_limit and self.on_refused is not None:
                assert admission.decision is not None
                await self.on_refused(scope, receive, send, admission.decision)
            else:
                await _write_refusal(scope, receive, send, gatekeeper.refusal(admission))
            return
        if not admission.fields and not admission.permits and self.options.refund_when is None:
            # Nothing to add to the response or do after it: no wrapper on the app's messages.
            await self.app(scope, receive, send)
            return
        extra = admission.fields
        status = 0

        async def send_with_fields(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                gatekeeper.observe(admission, status)
                if extra:
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
            elif admission.permits and message["type"] == "http.response.body" and not message.get("more_body", False):
                # Given back before the last chunk leaves: a client that sends its next request as soon
                # as this one ends never finds the permit still taken.
                await gatekeeper.arelease(admission)
            await send(message)

        try:
            await self.app(scope, receive, send_with_fields if kind == "http" else send)
        except BaseException as error:
            gatekeeper.failed(admission, error)
            raise
        finally:
            # The app raised or the client went away before the body ended: permits go back either
            # way, never leaked.
            await gatekeeper.arelease(admission)
            if status:
                await gatekeeper.asettle(admission, status)

    async def _peer(self, scope: Scope) -> str | None:
        def request() -> Any:
            from starlette.requests import HTTPConnection

            return HTTPConnection(scope)

        return await key_of(self.options.key_function, scope, request)

    def _cost(self, scope: Scope) -> int:
        from starlette.requests import HTTPConnection

        assert self.options.cost is not None
        return self.options.cost(HTTPConnection(scope))


async def _write_refusal(scope: Scope, receive: Receive, send: Send, refusal: Refusal) -> None:
    """Writes the lifecycle's answer to a refused request: an HTTP response, or a WebSocket handshake's."""
    status, headers, body = refusal
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    # A WebSocket handshake: refused before accept. With the denial-response extension the client
    # gets the real status; without it, a close before accept reaches it as 403 (code 1008 here).
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": "rate limited"})
