"""The apps ``http_bench.py`` serves: one route ``GET /`` answering ``ok``, with each limiter in front of it.

The variant comes from the ``BENCH_VARIANT`` environment variable, so uvicorn (``--factory
web_apps:fastapi_app``) and gunicorn (``'web_apps:flask_app()'``, ``'web_apps:django_app()'``) load the
same module:

  none                  no limiter
  ratekeeper-allowed    ratekeeper, a limit of 10^9/s: every request is admitted
  ratekeeper-refused    ratekeeper, 1/hour: after the first request every request is refused
  ratekeeper-quiet-allowed  ratekeeper with the fields on 429s only (HeaderOptions(on_allowed=False)): the
                        header behaviour slowapi and flask-limiter have by default (headers_enabled=False)
  ratekeeper-shared-allowed  ratekeeper, 10^9/s, its states in the shared-memory region at the path in
                        ``BENCH_SHARED_PATH`` (``backend=rk.Shared(path=...)``): every worker of the server
                        (``uvicorn --workers 2``) decides on the same states
  fields-only-allowed   no limiter: a bare middleware (ASGI; WSGI around Flask's app; Django's own kind)
                        that adds the two IETF fields an allowed request gets (constants, no decision): what
                        the fields alone cost the server, the floor of any limiter that sends them
  slowapi-allowed       FastAPI only: slowapi's documented set-up, 10^9/second
  slowapi-refused       FastAPI only: slowapi, 1/hour
  flask-limiter-allowed Flask only: flask-limiter's documented set-up, 10^9/second, memory storage
  flask-limiter-refused Flask only: flask-limiter, 1/hour
  django-ratelimit-allowed  Django only: django-ratelimit's documented set-up (the @ratelimit decorator,
                        block=True, its middleware answering 429 through RATELIMIT_VIEW), 10^9/second,
                        Django's default cache (local memory)
  django-ratelimit-refused  Django only: django-ratelimit, 1/hour

Every limiter keys requests by the ``X-Account-ID`` header, which wrk sends.
"""

# No `from __future__ import annotations`: FastAPI must see the route's `Request` annotation as a class.
import os
from typing import Any

ALLOWED = "1000000000/second"
REFUSED = "1/hour"
HEADER = "X-Account-ID"
LIBRARIES = (
    "fields-only",
    "ratekeeper",
    "ratekeeper-quiet",
    "ratekeeper-shared",
    "slowapi",
    "flask-limiter",
    "django-ratelimit",
)
SHARED_PATH = "BENCH_SHARED_PATH"
TICKS_PATH = "BENCH_TICKS_PATH"  # web_instructions.py: a file that gets a byte at each tick of uvicorn's main loop


def variant() -> tuple[str, str | None]:
    """``(library, limit)`` of ``BENCH_VARIANT``: e.g. ``("slowapi", "1/hour")``; ``("none", None)``."""
    name = os.environ.get("BENCH_VARIANT", "none")
    if name == "none":
        return "none", None
    library, _, outcome = name.rpartition("-")
    if outcome not in ("allowed", "refused") or library not in LIBRARIES:
        raise ValueError(f"BENCH_VARIANT: unknown variant {name!r}")
    return library, ALLOWED if outcome == "allowed" else REFUSED


def ratekeeper_limiter(limit: str, library: str = "ratekeeper") -> Any:
    import ratekeeper as rk

    backend = rk.Shared(path=os.environ[SHARED_PATH]) if library == "ratekeeper-shared" else None
    return rk.Limiter(rate=limit.replace("second", "s"), backend=backend)


def ratekeeper_options(library: str) -> dict[str, Any]:
    """The integration's options for a ratekeeper variant: its defaults, or fields on 429s only."""
    from ratekeeper import HeaderOptions

    return {"headers": HeaderOptions(on_allowed=False)} if library == "ratekeeper-quiet" else {}


def nodelay_on_inherited_sockets() -> None:
    """Sets TCP_NODELAY on connections accepted from a listening socket made with ``proto`` 0.

    ``uvicorn --workers N`` binds the socket in its supervisor with ``proto`` left at 0; accepted sockets
    inherit it, and asyncio sets TCP_NODELAY only when ``proto`` is ``IPPROTO_TCP``, so Nagle's algorithm
    meets wrk's delayed ACKs and every keep-alive request waits ~40 ms (uvicorn issue #3149; one worker
    is not affected: asyncio binds that socket itself). Without this, two workers serve ~1,100 req/s
    whatever the limiter. A no-op for sockets that already get TCP_NODELAY.
    """
    import asyncio.base_events
    import socket

    set_nodelay = asyncio.base_events._set_nodelay
    if getattr(set_nodelay, "bench_patched", False):
        return

    def nodelay(sock: socket.socket) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            set_nodelay(sock)

    nodelay.bench_patched = True  # type: ignore[attr-defined]
    asyncio.base_events._set_nodelay = nodelay  # type: ignore[attr-defined]


class FieldsOnly:
    """The ``fields-only`` variant: the fields of an allowed request added to every response, nothing decided."""

    FIELDS = ((b"ratelimit-policy", b'"default";q=1000000000;w=1'), (b"ratelimit", b'"default";r=999999999;t=1'))

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        def send_with_fields(message: Any) -> Any:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *self.FIELDS]}
            return send(message)

        await self.app(scope, receive, send_with_fields)


def fields_only_wsgi(app: Any) -> Any:
    """The ``fields-only`` variant for WSGI: the same fields, as str pairs, added in ``start_response``."""
    fields = [(name.decode(), value.decode()) for name, value in FieldsOnly.FIELDS]

    def with_fields(environ: Any, start_response: Any) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *fields], exc_info)

        return app(environ, start)

    return with_fields


def stretch_ticks() -> None:
    """Under ``web_instructions.py`` (``BENCH_TICK_S`` set): uvicorn's main loop ticks every ``BENCH_TICK_S``
    seconds instead of every 0.1 s, and each tick appends a byte to the file at ``BENCH_TICKS_PATH``.

    uvicorn's server wakes every 0.1 s whatever it serves (``Server.main_loop``: refresh the Date header,
    check for shutdown). Serving thousands of requests a second, it ticks once every few hundred requests;
    under callgrind, where a request takes a hundred times longer, a counted request would carry a
    hundred times the ticks it carries in service (a few per cent of the request, more on a slower host).
    Stretched, no tick falls among the counted requests, and the file shows it.
    """
    seconds = os.environ.get("BENCH_TICK_S")
    if not seconds:
        return
    import asyncio

    from uvicorn.server import Server

    if getattr(Server.main_loop, "bench_stretched", False):
        return
    tick_s, fd = float(seconds), os.open(os.environ[TICKS_PATH], os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    async def main_loop(self: Server) -> None:  # uvicorn 0.30-0.54's main_loop, with tick_s for its 0.1 s
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            await asyncio.sleep(tick_s)
            os.write(fd, b".")
            should_exit = await self.on_tick(counter)

    main_loop.bench_stretched = True  # type: ignore[attr-defined]
    Server.main_loop = main_loop  # type: ignore[method-assign]


def fastapi_app() -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import PlainTextResponse

    nodelay_on_inherited_sockets()
    stretch_ticks()
    library, limit = variant()
    app = FastAPI()
    if library == "slowapi":
        # slowapi's README: a Limiter on app.state, its exception handler, a decorated route taking `request`.
        from slowapi import Limiter, _rate_limit_exceeded_handler
        from slowapi.errors import RateLimitExceeded

        limiter = Limiter(key_func=lambda request: request.headers.get(HEADER, ""))
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

        @app.get("/", response_class=PlainTextResponse)
        @limiter.limit(limit or ALLOWED)
        async def limited(request: Request) -> str:
            return "ok"

        return app
    if library == "fields-only":
        app.add_middleware(FieldsOnly)
    elif library.startswith("ratekeeper"):
        from ratekeeper.asgi import RateLimitMiddleware
        from ratekeeper.keys import header

        app.add_middleware(
            RateLimitMiddleware,
            limiter=ratekeeper_limiter(limit or ALLOWED, library),
            key=header(HEADER),
            **ratekeeper_options(library),
        )
    elif library != "none":
        raise ValueError(f"BENCH_VARIANT: {library} is not a FastAPI variant")

    @app.get("/", response_class=PlainTextResponse)
    async def root() -> str:
        return "ok"

    return app


def flask_app() -> Any:
    import flask

    library, limit = variant()
    app = flask.Flask(__name__)

    @app.get("/")
    def root() -> str:
        return "ok"

    if library == "fields-only":
        app.wsgi_app = fields_only_wsgi(app.wsgi_app)  # type: ignore[method-assign]
    elif library == "flask-limiter":
        # flask-limiter's documented set-up: Limiter(key_func, app=app, default_limits=..., storage_uri=...).
        from flask_limiter import Limiter

        Limiter(
            lambda: flask.request.headers.get(HEADER, ""),
            app=app,
            default_limits=[limit or ALLOWED],
            storage_uri="memory://",
        )
    elif library.startswith("ratekeeper"):
        from ratekeeper.flask import RateLimit
        from ratekeeper.keys import header

        limiter = ratekeeper_limiter(limit or ALLOWED, library)
        RateLimit(app, limiter=limiter, key=header(HEADER), **ratekeeper_options(library))
    elif library != "none":
        raise ValueError(f"BENCH_VARIANT: {library} is not a Flask variant")
    return app


def django_root(request: Any) -> Any:
    from django.http import HttpResponse

    return HttpResponse("ok", content_type="text/plain")


def django_refused(request: Any, exception: Exception) -> Any:
    """django-ratelimit's ``RATELIMIT_VIEW``: its refusals answer 429 (its default is a 403)."""
    from django.http import HttpResponse

    return HttpResponse("Too Many Requests", status=429, content_type="text/plain")


urlpatterns: list[Any] = []  # Django's ROOT_URLCONF is this module; django_app() fills it


class DjangoFieldsOnly:
    """The ``fields-only`` variant for Django: a bare middleware setting the same fields on every response."""

    FIELDS = tuple((name.decode(), value.decode()) for name, value in FieldsOnly.FIELDS)

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        response = self.get_response(request)
        for name, value in self.FIELDS:
            response.headers[name] = value
        return response


def django_app() -> Any:
    """Django as a WSGI app, configured here (no project): the middleware, or django-ratelimit's decorator."""
    import django
    from django.conf import settings
    from django.urls import path

    library, limit = variant()
    middleware: list[str] = []
    options: dict[str, Any] = {}
    view = django_root
    if library.startswith("ratekeeper"):
        from ratekeeper.keys import header

        middleware = ["ratekeeper.django.RateLimitMiddleware"]
        options["RATEKEEPER"] = {
            "LIMITER": ratekeeper_limiter(limit or ALLOWED, library),
            "KEY": header(HEADER),
            **{name.upper(): value for name, value in ratekeeper_options(library).items()},
        }
    elif library == "fields-only":
        middleware = [f"{__name__}.DjangoFieldsOnly"]
    elif library == "django-ratelimit":
        middleware = ["django_ratelimit.middleware.RatelimitMiddleware"]
        options["RATELIMIT_VIEW"] = f"{__name__}.django_refused"
    elif library != "none":
        raise ValueError(f"BENCH_VARIANT: {library} is not a Django variant")
    settings.configure(
        DEBUG=False,
        SECRET_KEY="bench",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        MIDDLEWARE=middleware,
        INSTALLED_APPS=[],
        USE_TZ=True,
        **options,
    )
    django.setup()
    if library == "django-ratelimit":
        from django_ratelimit.decorators import ratelimit

        view = ratelimit(key=f"header:{HEADER.lower()}", rate=limit or ALLOWED, block=True)(django_root)
    urlpatterns.append(path("", view))
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()
