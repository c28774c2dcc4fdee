"""What ratekeeper's Django middleware costs a request, in one process: the WSGI app called directly.

What is measured
    The Django app of ``benches/web_apps.py`` (``GET /`` answering ``ok``, keyed by ``X-Account-ID``) with
    no limiter, with ratekeeper's middleware admitting every request (10^9/s, the IETF fields on), and with
    it refusing every request after the first (1/hour). No server and no network: each request is a fresh
    WSGI environ handed to the app, its body read and closed as a server would (``close()`` sends Django's
    ``request_finished``). Each variant runs in a process of its own (Django is configured once per
    process); the variants are interleaved, round after round, so drift of a shared machine hits each alike,
    and each variant's best round is reported (the machine's noise only ever adds time).

Targets (the same as ``http_bench.py``'s, per request)
    allowed: at most 3 % below the no-limiter req/s, i.e. ``allowed <= none / 0.97`` µs;
    refused: at least the no-limiter req/s, i.e. ``refused <= none`` µs (a refusal costs less than the view).

Usage
    python benches/django_inprocess.py                    # 5 rounds of 5 x 20,000 requests per variant
    python benches/django_inprocess.py --rounds 9 --calls 50000
    python benches/django_inprocess.py --profile ratekeeper-refused   # cProfile of one variant
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VARIANTS = ("none", "ratekeeper-allowed", "ratekeeper-refused")
MICRO = "\N{MICRO SIGN}"

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


def app_for(variant: str) -> Callable[[dict[str, Any], Any], Any]:
    os.environ["BENCH_VARIANT"] = variant
    sys.path.insert(0, str(HERE))
    import web_apps

    app: Callable[[dict[str, Any], Any], Any] = web_apps.django_app()
    return app


def request(app: Callable[[dict[str, Any], Any], Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """One request as a WSGI server makes it: the status line, the headers and the body."""
    seen: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        seen[:] = [status, headers]

    environ = {**ENVIRON, "wsgi.input": io.BytesIO()}
    body = app(environ, start_response)
    try:
        content = b"".join(body)
    finally:
        body.close()
    return seen[0], seen[1], content


def checked(variant: str, app: Callable[[dict[str, Any], Any], Any]) -> None:
    """The app answers as the variant should: 200 (twice), or 200 then 429; the fields when limited."""
    statuses = [request(app) for _ in range(2)]
    codes = [int(status.split()[0]) for status, _, _ in statuses]
    expected = [200, 429] if variant.endswith("-refused") else [200, 200]
    if codes != expected:
        raise SystemExit(f"{variant}: statuses {codes}, expected {expected}")
    names = {name.lower() for name in dict(statuses[1][1])}
    if variant != "none" and not {"ratelimit", "ratelimit-policy"} <= names:
        raise SystemExit(f"{variant}: no IETF fields in {sorted(names)}")


def timed(app: Callable[[dict[str, Any], Any], Any], calls: int, repeats: int) -> float:
    """The best of ``repeats`` loops of ``calls`` requests, in µs per request."""

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        pass

    environ_of = ENVIRON.copy
    new_input = io.BytesIO
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter_ns()
        for _ in range(calls):
            environ = environ_of()
            environ["wsgi.input"] = new_input()
            body = app(environ, start_response)
            for _chunk in body:
                pass
            body.close()
        best = min(best, (time.perf_counter_ns() - start) / calls / 1000)
    return best


def worker(variant: str, calls: int, repeats: int) -> None:
    app = app_for(variant)
    checked(variant, app)
    timed(app, min(calls, 2000), 1)  # warm-up: caches, lazily built objects
    print(json.dumps({"variant": variant, "us": timed(app, calls, repeats)}))


def profile(variant: str, calls: int) -> None:
    app = app_for(variant)
    checked(variant, app)
    timed(app, 2000, 1)
    profiler = cProfile.Profile()
    profiler.runcall(timed, app, calls, 1)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def run_worker(variant: str, calls: int, repeats: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", variant, "--calls", str(calls), "--repeats", str(repeats)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{out.stdout}{out.stderr}")
    us: float = json.loads(out.stdout.strip().splitlines()[-1])["us"]
    return us


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each variant once per round (default 5)")
    parser.add_argument("--calls", type=int, default=20_000, help="requests per timed loop (default 20,000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed loops per round, the best kept (default 5)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--profile", choices=VARIANTS, help="print a cProfile of one variant instead")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.calls, args.repeats)
        return 0
    if args.profile:
        profile(args.profile, args.calls)
        return 0

    rounds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for number in range(1, args.rounds + 1):
        for variant in VARIANTS:
            rounds[variant].append(run_worker(variant, args.calls, args.repeats))
        line = ", ".join(f"{variant} {values[-1]:.1f}" for variant, values in rounds.items())
        print(f"  round {number}/{args.rounds}: {line} {MICRO}s", file=sys.stderr)
    best = {variant: min(values) for variant, values in rounds.items()}
    none = best["none"]
    print(
        f"Django {django_version()}, in process, best of {args.rounds} rounds x {args.repeats} loops "
        f"of {args.calls:,} requests\n"
    )
    print(f"| variant | {MICRO}s/request | added {MICRO}s | req/s vs none |")
    print("|---|---:|---:|---:|")
    for variant, us in best.items():
        added = "—" if variant == "none" else f"{us - none:+.1f}"
        print(f"| {variant} | {us:.1f} | {added} | {(none / us - 1) * 100:+.1f} % |")
    verdicts = [
        (best["ratekeeper-allowed"] <= none / 0.97, "allowed is at most 3 % below the no-limiter req/s"),
        (best["ratekeeper-refused"] <= none, "refused serves at least the no-limiter req/s"),
    ]
    print()
    for passed, text in verdicts:
        print(f"{'PASS' if passed else 'MISS'} {text}")
    return 1 if args.check and not all(passed for passed, _ in verdicts) else 0


def django_version() -> str:
    import django

    return django.get_version()


if __name__ == "__main__":
    sys.exit(main())
