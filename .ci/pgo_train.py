"""The workload the wheel's core is trained on before its profile-guided (PGO) build: `make wheel` installs
an instrumented build of the wheel into a venv of its own and runs this script with that venv's python; the
core counts its branches and calls as it runs, and the final build lays out and inlines the paths counted hot.

Each kind of call users make is made the same number of times (``CALLS``), whatever it costs: the compiler
judges a path hot by its count against the others', so a kind made 1,000 times less (an outgoing call takes
150 µs, a decision 0.1 µs) would be laid out as if nobody ran it. The kinds:

- decisions in memory and on an ``rk.Shared`` region, for every algorithm: a hot key admitted, a hot key
  refused, many keys, a routed path, ``throttle`` and ``athrottle`` admitted at once, concurrency permits;
- a request through the Flask extension, the ASGI middleware and Django's, allowed and refused;
- a call through each outgoing transport (httpx sync and async, requests, aiohttp) reading the GitHub,
  OpenAI and IETF fields, in memory and (httpx) on a region;
- when a ``redis-server`` is on the PATH (CI installs one), decisions in the Redis backend's lease mode, with
  and without a standing share: a hot key is decided here on a lease held, no round trip, and untrained
  that path was laid out as cold code (lease mode on a hot key measured 2.85x memory's time with the
  profile, 1.70x without).

The requests and calls are the benches' own, made in process with no network (``benches/web_inprocess.py``,
``benches/django_inprocess.py``, ``benches/outgoing_bench.py``). Paths none of them runs (exact and sync
mode's round trips, a wait's sleep) wait on the network or the clock, where the layout of their code does
not show.

Usage (what `make wheel` does): python .ci/pgo_train.py
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))

import ratekeeper as rk

CALLS = 3_000
ALGORITHMS = ("gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log", "leaky_bucket")


def decisions(backend: Callable[[], Any]) -> None:
    """Every algorithm's decisions, admitted and refused, hot and spread, routed; throttle, permits."""
    peers = [f"peer-{i}" for i in range(CALLS)]
    for algorithm in ALGORITHMS:
        # A sliding log keeps every stamp of its window: a rate a region's log holds, never reached here.
        open_rate = "50000/min" if algorithm == "sliding_log" else "1000000000/min"
        limiter = rk.Limiter(
            rules=[
                rk.Rule(r"^/api/v\d+/items", "items", open_rate, algorithm=algorithm),
                rk.Rule("^/login", "login", "5/hour", algorithm=algorithm),
                rk.Rule("", "default", open_rate, algorithm=algorithm),
            ],
            backend=backend(),
        )
        allow, check = limiter.allow, limiter.check
        for _ in range(CALLS):
            allow("hot", "/api/v1/items")
        for _ in range(CALLS):
            check("hot", "/login")
        for peer in peers:
            check(peer, "/other")
        for _ in range(CALLS):
            limiter.throttle("hot", "/api/v2/items", timeout=1.0)

        async def athrottled(limiter: rk.Limiter = limiter) -> None:
            for _ in range(CALLS):
                await limiter.athrottle("hot", "/api/v2/items", timeout=1.0)

        asyncio.run(athrottled())
        limiter.close()
    permits = rk.Limiter(rules=[rk.Rule("", "default", limits=[rk.Limit(concurrency=4)])], backend=backend())
    for _ in range(CALLS):
        with permits.concurrent("hot", "/"):
            pass
    permits.close()


def requests_in_process() -> None:
    import django_inprocess
    import web_inprocess

    for case in web_inprocess.cases():
        case.run(CALLS)
    for variant, app in django_inprocess.apps().items():
        django_inprocess.timed(app, django_inprocess.PATHS[variant], CALLS)


def outgoing_calls(regions: list[Path]) -> None:
    import outgoing_bench as bench

    clients = {
        "httpx": bench.httpx_client,
        "httpx async": bench.httpx_async_client,
        "requests": bench.requests_client,
        "aiohttp": bench.aiohttp_client,
    }
    for name, make in clients.items():
        for dialect in bench.DIALECTS:
            for store in ("memory", "shared") if name == "httpx" else ("memory",):
                made = make(f"http://api.example/{dialect}", store, True, regions)
                made.run(CALLS)
                made.close()


def server_words() -> None:
    """The readers of the dialects the outgoing bench's answers do not carry (Anthropic's, the bare
    ``X-RateLimit-*`` with resets as seconds and as epoch seconds, ``Retry-After`` as seconds and as a
    date), on the raw headers a transport hands the core."""
    from email.utils import formatdate

    from ratekeeper._server_words import read

    now = time.time()
    date = formatdate(now, usegmt=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 30))
    anthropic = [
        (f"anthropic-ratelimit-{budget}-{field}", value)
        for budget in ("requests", "tokens", "input-tokens", "output-tokens")
        for field, value in (("limit", "1000"), ("remaining", "999"), ("reset", stamp))
    ]
    replies = (
        (anthropic, 200),
        ([("x-ratelimit-limit", "100"), ("x-ratelimit-remaining", "99"), ("x-ratelimit-reset", "30")], 200),
        ([("X-RateLimit-Limit", "100"), ("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", f"{now + 30:.0f}")], 429),
        ([("retry-after", "7")], 429),
        ([("retry-after", formatdate(now + 7, usegmt=True))], 503),
    )
    for headers, status in replies:
        raw = [(name.encode(), value.encode()) for name, value in [("date", date), *headers]]
        for _ in range(CALLS):
            read(raw, status, now=now)


def lease_decisions() -> None:
    """Lease mode's decisions (every algorithm, as in memory), then a hot key on a standing share, on a
    ``redis-server`` of the Redis bench's own."""
    from redis_bench import Server

    server = Server()
    try:
        prefix = itertools.count()
        decisions(lambda: rk.Redis(server.url, mode="lease", prefix=f"pgo:{next(prefix)}:"))
        backend = rk.Redis(server.url, mode="lease", standing_shares=1, prefix="pgo:s:")
        standing = rk.Limiter("1000000000/min", backend=backend)
        deadline = time.monotonic() + 10
        while standing.stats()["standing_share"] is None and time.monotonic() < deadline:
            standing.sync_now()
            time.sleep(0.01)
        allow = standing.allow
        for _ in range(10 * CALLS):
            allow("hot")
        standing.close()
    finally:
        server.stop()


def main() -> int:
    print(f"pgo_train: ratekeeper from {rk.__file__}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rk-pgo-") as folder:
        regions: list[Path] = []  # the outgoing bench's regions, each in a folder of its own
        counter = itertools.count()
        steps: tuple[tuple[str, Callable[[], None]], ...] = (
            ("decisions in memory", lambda: decisions(lambda: None)),
            ("decisions on a region", lambda: decisions(lambda: rk.Shared(path=Path(folder) / f"r{next(counter)}"))),
            ("requests in process", requests_in_process),
            ("outgoing calls", lambda: outgoing_calls(regions)),
            ("the servers' words of other dialects", server_words),
        )
        if shutil.which("redis-server") is None:
            print("pgo_train: no redis-server on the PATH: lease mode is not trained", flush=True)
        else:
            steps = (*steps, ("lease mode on a local redis-server", lease_decisions))
        for label, step in steps:
            started = time.monotonic()
            step()
            print(f"pgo_train: {label}: {time.monotonic() - started:.1f} s", flush=True)
    for region in regions:
        shutil.rmtree(region.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
