"""What ratekeeper's Django middleware costs a request, in one process: the WSGI app called directly.

What is measured
    The Django app of ``benches/web_apps.py`` (its view, ``GET`` answering ``ok``; keyed by the
    ``X-Account-ID`` header; the IETF fields on) as three WSGI handlers in one process: no middleware
    (``none``), ratekeeper's middleware admitting every request (``allowed``: the catch-all 10^9/s of
    ``http_bench.py``'s allowed case), and refusing every request after the first (``refused``: a rule of
    1/hour on ``/refused``). No server and no network: each request is a fresh WSGI environ handed to the
    handler, its body read and closed as a server does (``close()`` sends Django's ``request_finished``).
    The variants take turns, a loop of ``--calls`` requests each, for ``--rounds`` rounds, so the drift of
    a shared machine hits each alike; each variant's best loop is reported (noise only ever adds time).

Targets (the same as ``http_bench.py``'s, per request)
    allowed: at most 3 % below the no-limiter req/s, i.e. ``allowed <= none / 0.97`` µs;
    refused: at least the no-limiter req/s, i.e. ``refused <= none`` µs (a refusal costs less than the view).

Usage
    python benches/django_inprocess.py                    # 30 rounds of 5,000 requests per variant
    python benches/django_inprocess.py --rounds 60 --calls 10000
    python benches/django_inprocess.py --profile refused  # cProfile of one variant
    python benches/django_inprocess.py --quick            # smoke run: 2 rounds of 500 requests
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VARIANTS = ("none", "allowed", "refused")
MICRO = "\N{MICRO SIGN}"
PATHS = {"none": "/", "allowed": "/", "refused": "/refused"}

# What gunicorn's sync worker gives Django for `GET /` from wrk, less the socket.
ENVIRON: dict[str, Any] = {
    "REQUEST_METHOD": "GET",
    "SCRIPT_NAME": "",
    "PATH_INFO": "/",
    "QUERY_STRING": "",
    "RAW_URI": "/",
    "SERVER_NAME": "127.0.0.1",
    "SERVER_PORT": "8000",
    "SERVER_PROTOCOL": "HTTP/1.1",
    "REMOTE_ADDR": "127.0.0.1",
    "REMOTE_PORT": "50000",
    "HTTP_HOST": "127.0.0.1:8000",
    "HTTP_X_ACCOUNT_ID": "bench",
    "wsgi.version": (1, 0),
    "wsgi.url_scheme": "http",
    "wsgi.errors": sys.stderr,
    "wsgi.multithread": False,
    "wsgi.multiprocess": True,
    "wsgi.run_once": False,
}

App = Callable[[dict[str, Any], Any], Any]


def apps() -> dict[str, App]:
    """The three handlers, on Django configured as ``web_apps.django_app`` configures it."""
    import django
    from django.conf import settings
    from django.urls import path

    sys.path.insert(0, str(HERE))
    import ratekeeper as rk
    import web_apps
    from ratekeeper.keys import header

    limiter = rk.Limiter(
        rate=web_apps.ALLOWED.replace("second", "s"),
        rules=[rk.Rule(r"^/refused$", "refused", web_apps.REFUSED)],
    )
    settings.configure(
        DEBUG=False,
        SECRET_KEY="bench",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF="web_apps",
        MIDDLEWARE=["ratekeeper.django.RateLimitMiddleware"],
        INSTALLED_APPS=[],
        USE_TZ=True,
        RATEKEEPER={"LIMITER": limiter, "KEY": header(web_apps.HEADER)},
    )
    django.setup()
    web_apps.urlpatterns += [path("", web_apps.django_root), path("refused", web_apps.django_root)]
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import override_settings

    limited = WSGIHandler()
    with override_settings(MIDDLEWARE=[]):
        plain = WSGIHandler()
    return {"none": plain, "allowed": limited, "refused": limited}


def request(app: App, path: str) -> tuple[str, list[tuple[str, str]], bytes]:
    """One request as a WSGI server makes it: the status line, the headers and the body."""
    seen: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        seen[:] = [status, headers]

    environ = {**ENVIRON, "PATH_INFO": path, "RAW_URI": path, "wsgi.input": io.BytesIO()}
    body = app(environ, start_response)
    try:
        content = b"".join(body)
    finally:
        body.close()
    return seen[0], seen[1], content


def checked(handlers: dict[str, App]) -> None:
    """Each variant answers as it should (200s, or 200 then 429s), with the fields when limited."""
    for variant, app in handlers.items():
        answers = [request(app, PATHS[variant]) for _ in range(3)]
        codes = [int(status.split()[0]) for status, _, _ in answers]
        expected = [200, 429, 429] if variant == "refused" else [200] * 3
        if codes != expected:
            raise SystemExit(f"{variant}: statuses {codes}, expected {expected}")
        names = {name.lower() for name, _ in answers[-1][1]}
        if variant != "none" and not {"ratelimit", "ratelimit-policy"} <= names:
            raise SystemExit(f"{variant}: no IETF fields in {sorted(names)}")


def timed(app: App, path: str, calls: int) -> float:
    """One loop of ``calls`` requests, in µs per request."""

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        pass

    template = {**ENVIRON, "PATH_INFO": path, "RAW_URI": path}
    environ_of = template.copy
    new_input = io.BytesIO
    start = time.perf_counter_ns()
    for _ in range(calls):
        environ = environ_of()
        environ["wsgi.input"] = new_input()
        body = app(environ, start_response)
        for _chunk in body:
            pass
        body.close()
    return (time.perf_counter_ns() - start) / calls / 1000


def profile(handlers: dict[str, App], variant: str, calls: int) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(timed, handlers[variant], PATHS[variant], calls)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds, each variant once per round (default 30)")
    parser.add_argument("--calls", type=int, default=5000, help="requests per loop (default 5,000)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--profile", choices=VARIANTS, help="print a cProfile of one variant instead")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 500 requests")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls = 2, 500
    handlers = apps()
    checked(handlers)
    for variant, app in handlers.items():  # warm-up: caches, lazily built objects
        timed(app, PATHS[variant], 2000)
    if args.profile:
        profile(handlers, args.profile, args.calls)
        return 0

    loops: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    gc.collect()
    for _ in range(args.rounds):
        for variant in VARIANTS:
            loops[variant].append(timed(handlers[variant], PATHS[variant], args.calls))
    best = {variant: min(values) for variant, values in loops.items()}
    none = best["none"]
    print(
        f"Django {django_version()}, Python {sys.version.split()[0]}, in process: the best of {args.rounds} "
        f"loops of {args.calls:,} requests per variant (median in brackets)\n"
    )
    print(f"| variant | {MICRO}s/request | added {MICRO}s | req/s vs none |")
    print("|---|---:|---:|---:|")
    for variant, us in best.items():
        added = "—" if variant == "none" else f"{us - none:+.1f}"
        median = statistics.median(loops[variant])
        print(f"| {variant} | {us:.1f} ({median:.1f}) | {added} | {(none / us - 1) * 100:+.1f} % |")
    verdicts = [
        (best["allowed"] <= none / 0.97, "allowed is at most 3 % below the no-limiter req/s"),
        (best["refused"] <= none, "refused serves at least the no-limiter req/s"),
    ]
    print()
    for passed, text in verdicts:
        print(f"{'PASS' if passed else 'MISS'} {text}")
    from machine import describe, write_results

    data = {
        "best_us": best,
        "median_us": {variant: statistics.median(values) for variant, values in loops.items()},
        "verdicts": [{"passed": passed, "text": text} for passed, text in verdicts],
    }
    write_results(args.json, "django_inprocess", data, describe(["django"]), rounds=args.rounds, calls=args.calls)
    return 1 if args.check and not all(passed for passed, _ in verdicts) else 0


def django_version() -> str:
    import django

    return django.get_version()


if __name__ == "__main__":
    sys.exit(main())
