"""What the Flask extension and the ASGI middleware add to a request, in process: no server, no sockets.

What is measured
    One app (``GET /`` answers ``ok``) called directly, the way a server calls it, with and without
    ratekeeper in front, keyed by the ``X-Account-ID`` header:

      Flask 3 (WSGI):  the app called with an environ from Werkzeug's ``EnvironBuilder`` (a fresh copy per
                       request) and a ``start_response`` that keeps nothing; the body is iterated and closed.
      Starlette (ASGI): the app awaited with a fresh copy of an HTTP scope, a ``receive`` giving an empty
                       body and a ``send`` that keeps nothing, all on one event loop.

    "allowed": a limit of 10^9/s, every response carries the IETF fields; "refused": 1/hour, every request
    after the first is answered 429. "marked view" (Flask only): the view has its own ``@limit``, so the
    decision is made in the view's wrapper, after Flask routes. Each case is timed over ``--requests``
    requests, ``--repeat`` times, interleaved; the best run is reported (the least disturbed by the rest of
    a shared machine), in µs per request and µs added to the bare app.

Targets (the 2-core development machine)
    Flask allowed adds at most 2 µs to a bare Flask request, Starlette allowed at most 3 µs to a bare
    Starlette request; a refusal (of an unmarked view: answered before the framework routes) costs at most
    1/1.2 of the bare request, as the HTTP bench asks refused req/s to be at least 1.2x the no-limiter
    app's. Printed as PASS / MISS; with ``--check`` a miss is exit status 1.

Usage
    python benches/web_inprocess.py                    # 5,000 requests, best of 7
    python benches/web_inprocess.py --requests 20000 --repeat 9 --check
    python benches/web_inprocess.py --quick            # smoke run: 500 requests, best of 2
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ratekeeper as rk
from machine import describe, write_results
from ratekeeper.keys import header

HEADER = "X-Account-ID"
ALLOWED = "1000000000/s"
REFUSED = "1/hour"
MICRO = "\N{MICRO SIGN}s"


def limiter(limit: str) -> rk.Limiter:
    return rk.Limiter(rate=limit)


# --- Flask -------------------------------------------------------------------------------------------------


def account_key(request: Any) -> str | None:
    """A Python key function, as an app writes one: the account's header, else the client's address."""
    account: str | None = request.headers.get(HEADER) or request.remote_addr
    return account


def flask_app(limit: str | None, *, marked: bool = False, key: Any = None) -> Any:
    import flask
    from ratekeeper.flask import RateLimit

    app = flask.Flask(__name__)
    key = key if key is not None else header(HEADER)
    rate_limit = RateLimit(app, limiter=limiter(limit), key=key) if limit is not None else None

    def root() -> str:
        return "ok"

    if marked:
        assert rate_limit is not None
        assert limit is not None
        root = rate_limit.limit(limit)(root)
    app.get("/")(root)
    return app


def flask_runner(app: Any) -> Callable[[int], float]:
    """Times ``n`` requests of ``app`` called as a WSGI server calls it; seconds."""
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(path="/", headers={HEADER: "bench"}).get_environ()
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        statuses.append(status)
        return statuses.append  # type: ignore[return-value]

    def run(n: int) -> float:
        statuses.clear()
        started = time.perf_counter()
        for _ in range(n):
            body = app(environ.copy(), start_response)
            for _chunk in body:
                pass
            close = getattr(body, "close", None)
            if close is not None:
                close()
        elapsed = time.perf_counter() - started
        del statuses[:]
        return elapsed

    return run


# --- Starlette ----------------------------------------------------------------------------------------------


def starlette_app(limit: str | None) -> Any:
    from ratekeeper.asgi import RateLimitMiddleware
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def root(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    middleware = []
    if limit is not None:
        middleware.append(Middleware(RateLimitMiddleware, limiter=limiter(limit), key=header(HEADER)))
    return Starlette(routes=[Route("/", root)], middleware=middleware)


def starlette_runner(app: Any) -> Callable[[int], float]:
    """Times ``n`` requests of ``app`` awaited as an ASGI server awaits it; seconds."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost"), (HEADER.lower().encode(), b"bench")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    request = {"type": "http.request", "body": b"", "more_body": False}

    async def receive() -> dict[str, Any]:
        return request

    async def send(message: dict[str, Any]) -> None:
        pass

    async def requests(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            await app(scope.copy(), receive, send)
        return time.perf_counter() - started

    loop = asyncio.new_event_loop()

    def run(n: int) -> float:
        return loop.run_until_complete(requests(n))

    return run


# --- the bench ----------------------------------------------------------------------------------------------


@dataclass
class Case:
    framework: str
    label: str
    run: Callable[[int], float]
    baseline: str | None = None  # the bare case it adds to
    seconds: list[float] = field(default_factory=list)

    def best_us(self, requests: int) -> float:
        return min(self.seconds) / requests * 1e6


def cases() -> list[Case]:
    return [
        Case("Flask", "bare", flask_runner(flask_app(None))),
        Case("Flask", "+ extension, allowed", flask_runner(flask_app(ALLOWED)), "bare"),
        Case("Flask", "+ extension, refused", flask_runner(flask_app(REFUSED)), "bare"),
        Case("Flask", "+ extension, marked view, allowed", flask_runner(flask_app(ALLOWED, marked=True)), "bare"),
        Case("Flask", "+ extension, marked view, refused", flask_runner(flask_app(REFUSED, marked=True)), "bare"),
        Case("Flask", "+ extension, key function, allowed", flask_runner(flask_app(ALLOWED, key=account_key)), "bare"),
        Case("Flask", "+ extension, key function, refused", flask_runner(flask_app(REFUSED, key=account_key)), "bare"),
        Case("Starlette", "bare", starlette_runner(starlette_app(None))),
        Case("Starlette", "+ middleware, allowed", starlette_runner(starlette_app(ALLOWED)), "bare"),
        Case("Starlette", "+ middleware, refused", starlette_runner(starlette_app(REFUSED)), "bare"),
    ]


# (framework, label) -> µs added at most.
ADDED_AT_MOST = {("Flask", "+ extension, allowed"): 2.0, ("Starlette", "+ middleware, allowed"): 3.0}
# Refusals answered before the framework routes: at least 1.2x the bare app's requests/s. A marked view's
# refusal comes after Flask has routed and built its request, so it is reported without a target.
REFUSED_FASTER = {("Flask", "+ extension, refused"), ("Starlette", "+ middleware, refused")}
REFUSED_SPEEDUP = 1.2


def verdicts(measured: list[Case], requests: int) -> list[tuple[bool, str]]:
    bare = {case.framework: case.best_us(requests) for case in measured if case.baseline is None}
    found = []
    for case in measured:
        if case.baseline is None:
            continue
        us, base = case.best_us(requests), bare[case.framework]
        bound = ADDED_AT_MOST.get((case.framework, case.label))
        if bound is not None:
            found.append(
                (us - base <= bound, f"{case.framework} {case.label}: adds {us - base:+.2f} {MICRO} (<= {bound})")
            )
        elif (case.framework, case.label) in REFUSED_FASTER:
            speedup = base / us
            found.append(
                (
                    speedup >= REFUSED_SPEEDUP,
                    f"{case.framework} {case.label}: {speedup:.2f}x the bare app's requests/s (>= {REFUSED_SPEEDUP})",
                )
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests per run (default 5,000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per case, interleaved; the best is kept")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--quick", action="store_true", help="smoke run: 500 requests per run, best of 2")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.repeat = 500, 2

    measured = cases()
    for case in measured:
        case.run(200)  # warm-up: first-request set-up, caches
    gc.collect()
    gc.disable()  # a collection landing in one case's run and not another's is noise, not cost
    try:
        for _ in range(args.repeat):
            for case in measured:
                case.seconds.append(case.run(args.requests))
    finally:
        gc.enable()

    print(f"{platform.platform()}, Python {platform.python_version()}, ratekeeper {rk.__version__}")
    print(f"{args.requests:,} requests per run, best of {args.repeat}, interleaved\n")
    print(f"| framework | case | {MICRO} per request | {MICRO} added |")
    print("|---|---|---:|---:|")
    bare = {case.framework: case.best_us(args.requests) for case in measured if case.baseline is None}
    for case in measured:
        us = case.best_us(args.requests)
        added = "—" if case.baseline is None else f"{us - bare[case.framework]:+.2f}"
        print(f"| {case.framework} | {case.label} | {us:.2f} | {added} |")
    print()
    found = verdicts(measured, args.requests)
    for passed, text in found:
        print(f"{'PASS' if passed else 'MISS'} {text}")
    rows = [{"framework": c.framework, "case": c.label, "us": c.best_us(args.requests)} for c in measured]
    data = {"rows": rows, "verdicts": [{"passed": passed, "text": text} for passed, text in found]}
    machine = describe(["flask", "werkzeug", "starlette"])
    write_results(args.json, "web_inprocess", data, machine, requests=args.requests, repeat=args.repeat)
    return 1 if args.check and not all(passed for passed, _ in found) else 0


if __name__ == "__main__":
    sys.exit(main())
