"""What ratekeeper's outgoing-call transports add to a call: each client bare against the same client through
ratekeeper, side by side.

What is measured
    The four clients (httpx, httpx's ``AsyncClient``, requests, aiohttp), each calling ``GET /<dialect>``
    bare and through ratekeeper's transport (``ratekeeper.httpx.Transport`` / ``AsyncTransport``,
    ``ratekeeper.requests.Adapter``, ``ratekeeper.aiohttp.Middleware``) on a ``Limiter(rules=[])`` in memory,
    and for httpx also on ``rk.Shared``. The answer is a tiny 200 carrying one dialect's rate-limit fields,
    with a limit no run comes near, so no call ever waits: what is left is the transport's own cost (reading
    the request, the admission, reading the server's word, capping its group).

      GitHub: x-ratelimit-limit / -remaining / -used / -reset (epoch) / -resource, with the Date the reset
              is taken against;
      OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}, resets as Go durations;
      IETF:   RateLimit / RateLimit-Policy (structured fields, which the core reads with the sfv crate).

    Two setups:

      loopback:   a server in a separate process (uvicorn, one worker, ``--http httptools --loop asyncio``,
                  named so that no other parser is picked unseen) answering on 127.0.0.1 over keep-alive.
                  ``--rounds`` rounds of ``--calls`` calls of every case, interleaved (the order reversed every
                  other round); the median µs per call, and the median of each round's difference with the
                  bare client. Socket noise is tens of µs here: these figures show the order of things.
      no network: the same answers made in process, the cheapest way each client has (an httpx transport
                  returning a ``Response`` of headers made once; a requests adapter whose ``send`` makes the
                  ``Response``, on a session with ``trust_env`` off, so that no proxy is looked up in the
                  environment on every call; an innermost aiohttp client middleware returning a
                  ``ClientResponse`` without connecting), so what differs is the transport's own cost.

    With no network each client and dialect is measured as four (httpx: five) clients of that kind, side by
    side: bare; bare again (the A/A run); bare with a no-op hook at the extension point ratekeeper uses (a
    transport, an adapter or a middleware that only passes the call on); and through ratekeeper. In each of
    ``--blocks`` rounds every one of them makes one block of ``--block`` calls, the order turning from round to
    round, with the garbage collector frozen and off while timing; the clients and dialects take turns, ten
    rounds each, all through the run. A round's blocks are neighbours in time, so a shared machine's drift hits
    them alike, and a burst of load lands on every client and dialect alike, not on the few measured at the
    time: each figure is the median of the rounds' paired differences (per call), with its 95 % confidence
    interval (order statistics) and interquartile range:

      added:          through ratekeeper, minus bare;
      no-op hook:     what the client's extension point costs by itself (minus bare);
      above the hook: through ratekeeper, minus the no-op hook: ratekeeper's own cost;
      A/A:            bare again, minus bare: the noise floor is the larger end of its 95 % interval, the
                      smallest difference this run can tell from nothing.

    Each transport's counters are checked afterwards: every call sent once, none waited, none refused, no 429.
    ``ratekeeper._server_words.read`` alone is timed per dialect on the same headers (the core's reader, called
    from Python with the headers as str pairs and making the ``ServerWord``; the transports call the core
    straight from their engine with the client's raw headers).

Target (issue 37)
    The transport adds at most a few µs to a call: at most 5 µs with no network, each client and dialect,
    on the 2-core development machine. A verdict per client judges "added", or, for a client whose no-op
    hook alone costs more than 1 µs (its own price for being hooked at all), what ratekeeper adds above that
    hook; it says which. PASS when every dialect's 95 % interval ends within the target, MISS when one lies
    wholly past it, "cannot tell" otherwise, and always when the noise floor is wider than the target. With
    ``--check`` anything but PASS, or a call that waited, is exit status 1.

Usage
    python benches/outgoing_bench.py                   # loopback: 9 rounds of 300 calls; no network: 1,000 rounds
    python benches/outgoing_bench.py --profile         # and where one call's µs go (the core's two calls timed
                                                       # alone, in context; cProfile; httpx, no network)
    python benches/outgoing_bench.py --no-loopback     # the no-network figures only (writes no results)
    python benches/outgoing_bench.py --no-loopback --clients httpx,aiohttp --dialects openai --blocks 300
    python benches/outgoing_bench.py --quick           # smoke run: 3 rounds of 20 calls, 60 rounds of 5
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import math
import os
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# A limit no run comes near: nothing waits, and the figures are the transport's own cost.
LIMIT = 1_000_000_000
TOKENS = 4_000_000_000  # under 2**32, the most a server's remaining is read as
DIALECTS = ("github", "openai", "ietf")
DIALECT_NAMES = {"github": "GitHub", "openai": "OpenAI", "ietf": "IETF"}
BODY = b'{"ok":true}'
MICRO = "\N{MICRO SIGN}s"
ADDED_AT_MOST_US = 5.0  # issue 37: "at most a few µs", with no network


def fields(dialect: str, remaining: int) -> list[tuple[str, str]]:
    """The rate-limit fields of ``dialect``'s answer with ``remaining`` calls left."""
    if dialect == "github":
        reset = int(time.time()) // 3600 * 3600 + 3600
        return [
            ("x-ratelimit-limit", str(LIMIT)),
            ("x-ratelimit-remaining", str(remaining)),
            ("x-ratelimit-reset", str(reset)),
            ("x-ratelimit-used", str(LIMIT - remaining)),
            ("x-ratelimit-resource", "core"),
        ]
    if dialect == "openai":
        return [
            ("x-ratelimit-limit-requests", str(LIMIT)),
            ("x-ratelimit-limit-tokens", str(TOKENS)),
            ("x-ratelimit-remaining-requests", str(remaining)),
            ("x-ratelimit-remaining-tokens", str(TOKENS - (LIMIT - remaining))),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-reset-tokens", "1ms"),
        ]
    if dialect == "ietf":
        return [
            ("ratelimit-policy", f'"default";q={LIMIT};w=3600'),
            ("ratelimit", f'"default";r={remaining};t=3600'),
        ]
    raise ValueError(f"no dialect {dialect!r}")


def answer_headers(dialect: str, remaining: int = LIMIT - 1) -> list[tuple[str, str]]:
    """A whole answer's headers as the no-network setup serves them: what uvicorn adds, then the fields."""
    return [
        ("date", formatdate(usegmt=True)),
        ("server", "uvicorn"),
        ("content-type", "application/json"),
        ("content-length", str(len(BODY))),
        *fields(dialect, remaining),
    ]


# --- the loopback server: a separate process --------------------------------------------------------------


class Api:
    """The ASGI app uvicorn serves: ``GET /<dialect>`` answers 200 with that dialect's fields, counting down."""

    def __init__(self) -> None:
        self.served = dict.fromkeys(DIALECTS, 0)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        dialect = scope["path"].strip("/")
        self.served[dialect] += 1
        raw = [(b"content-type", b"application/json")]
        raw += [(k.encode(), v.encode()) for k, v in fields(dialect, LIMIT - self.served[dialect])]
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        await send({"type": "http.response.body", "body": BODY})


app = Api()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


SERVER_OPTIONS = ("--http", "httptools", "--loop", "asyncio", "--log-level", "warning", "--no-access-log")


@contextmanager
def server() -> Iterator[str]:
    """uvicorn serving ``app`` on a free loopback port; its base URL."""
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--app-dir", str(HERE), "outgoing_bench:app"]
    command += ["--host", "127.0.0.1", "--port", str(port), *SERVER_OPTIONS]
    process = subprocess.Popen(command)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{base}/github").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {' '.join(command)}")
            time.sleep(0.05)
        yield base
    finally:
        process.terminate()
        process.wait(10)


# --- the clients ------------------------------------------------------------------------------------------
#
# A client is made as one of these kinds: bare, bare with a no-op hook at the extension point ratekeeper uses
# (a transport, an adapter, a middleware that only passes the call on), or through ratekeeper's transport on
# one of the stores.

BARE = "bare"
HOOK = "no-op hook"
STORES = {"httpx": ("memory", "rk.Shared")}  # the others: memory only

Runner = Callable[[int], float]  # times n calls; seconds


@dataclass
class Made:
    """A client, ready: ``run`` times calls, ``engine`` is ratekeeper's (None: none), ``close`` ends it."""

    run: Runner
    engine: Any = None
    close: Callable[[], None] = lambda: None


def limiter(store: str, regions: list[Path]) -> Any:
    import ratekeeper as rk

    if store == "memory":
        return rk.Limiter(rules=[], max_keys=1_000)
    path = Path(tempfile.mkdtemp(prefix="rk-outgoing-")) / "region"
    regions.append(path)
    return rk.Limiter(rules=[], max_keys=1_000, backend=rk.Shared(path=path))


def httpx_answers(dialect: str) -> Any:
    """The cheapest in-process answer httpx has: a transport (sync and async) that makes a ``Response`` of
    headers made once (``Response`` copies an ``httpx.Headers``' list as it is, without normalising it)."""
    import httpx

    class Canned(httpx.BaseTransport, httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.headers = httpx.Headers(answer_headers(dialect))

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers=self.headers, content=BODY)

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers=self.headers, content=BODY)

    return Canned()


def transport_of(
    kind: str, inner: Any, hook: Callable[[Any], Any], paced: Callable[..., Any], regions: list[Path]
) -> Any:
    """The transport of a case: the client's own (``inner``), the no-op ``hook`` around it, or ratekeeper's
    (``paced``) around it."""
    if kind == BARE:
        return inner
    if kind == HOOK:
        return hook(inner)
    return paced(limiter(kind, regions), inner=inner)


def httpx_client(url: str, kind: str, mock: bool, regions: list[Path]) -> Made:
    import httpx
    from ratekeeper.httpx import Transport

    class Passing(httpx.BaseTransport):
        """The no-op hook: a transport that hands every request to the one inside."""

        def __init__(self, inner: httpx.BaseTransport) -> None:
            self.inner = inner

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return self.inner.handle_request(request)

    inner = httpx_answers(url.rsplit("/", 1)[1]) if mock else httpx.HTTPTransport()
    transport: httpx.BaseTransport = transport_of(kind, inner, Passing, Transport, regions)
    client = httpx.Client(transport=transport)

    def run(n: int) -> float:
        get = client.get
        started = time.perf_counter()
        for _ in range(n):
            get(url)
        return time.perf_counter() - started

    return Made(run, getattr(transport, "outgoing", None), client.close)


def looped(make: Callable[[], Any], call: Callable[[Any], Any]) -> tuple[Runner, Any, Callable[[], None]]:
    """A runner of ``await call(client)`` on an event loop of its own; ``make()`` builds the client in it. The
    calls are timed inside the loop: starting it is not the client's cost."""
    loop = asyncio.new_event_loop()

    async def build() -> Any:
        return make()

    client = loop.run_until_complete(build())

    async def calls(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            await call(client)
        return time.perf_counter() - started

    def close() -> None:
        closing = getattr(client, "aclose", None) or client.close
        loop.run_until_complete(closing())
        loop.close()

    return (lambda n: loop.run_until_complete(calls(n))), client, close


def httpx_async_client(url: str, kind: str, mock: bool, regions: list[Path]) -> Made:
    import httpx
    from ratekeeper.httpx import AsyncTransport

    class Passing(httpx.AsyncBaseTransport):
        """The no-op hook: a transport that hands every request to the one inside."""

        def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
            self.inner = inner

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return await self.inner.handle_async_request(request)

    transports: list[Any] = []

    def make() -> httpx.AsyncClient:
        inner = httpx_answers(url.rsplit("/", 1)[1]) if mock else httpx.AsyncHTTPTransport()
        transport: httpx.AsyncBaseTransport = transport_of(kind, inner, Passing, AsyncTransport, regions)
        transports.append(transport)
        return httpx.AsyncClient(transport=transport)

    async def call(client: httpx.AsyncClient) -> None:
        await client.get(url)

    run, _, close = looped(make, call)
    return Made(run, getattr(transports[0], "outgoing", None), close)


def requests_client(url: str, kind: str, mock: bool, regions: list[Path]) -> Made:
    import requests
    from ratekeeper.requests import Adapter
    from requests.adapters import HTTPAdapter
    from requests.structures import CaseInsensitiveDict

    headers = CaseInsensitiveDict(answer_headers(url.rsplit("/", 1)[1]))

    class Canned(HTTPAdapter):
        """The cheapest in-process answer requests has: an adapter whose ``send`` makes the ``Response`` as
        ``HTTPAdapter.build_response`` would without a socket, its headers made once (read, never changed)."""

        def send(self, request: Any, *args: Any, **kwargs: Any) -> requests.Response:
            response = requests.Response()
            response.status_code, response.reason = 200, "OK"
            response.headers = headers
            response._content = BODY
            response.url, response.request, response.encoding = request.url, request, "utf-8"
            response.connection = self
            return response

    class Passing(Canned):
        """The no-op hook: an adapter whose ``send`` only calls its parent's (with ``HTTPAdapter.send``'s
        parameters, as requests passes them: by name)."""

        def send(
            self,
            request: Any,
            stream: bool = False,
            timeout: Any = None,
            verify: Any = True,
            cert: Any = None,
            proxies: Any = None,
        ) -> requests.Response:
            return super().send(request, stream, timeout, verify, cert, proxies)

    class PacedCanned(Adapter, Canned):
        """ratekeeper's adapter whose inner send (``super(Adapter, self).send``) is ``Canned``'s."""

    session = requests.Session()
    adapter: HTTPAdapter
    if not mock:
        adapter = HTTPAdapter() if kind == BARE else Adapter(limiter(kind, regions))
    else:
        # No proxies to look up in the environment on every call: the cheapest call requests makes.
        session.trust_env = False
        adapter = {BARE: Canned, HOOK: Passing}[kind]() if kind in (BARE, HOOK) else PacedCanned(limiter(kind, regions))
    session.mount("http://", adapter)

    def run(n: int) -> float:
        get = session.get
        started = time.perf_counter()
        for _ in range(n):
            get(url).content  # noqa: B018 - the body, read as the other clients read it
        return time.perf_counter() - started

    return Made(run, getattr(adapter, "outgoing", None), session.close)


def aiohttp_client(url: str, kind: str, mock: bool, regions: list[Path]) -> Made:
    import aiohttp
    from aiohttp.helpers import TimerNoop
    from multidict import CIMultiDict, CIMultiDictProxy
    from ratekeeper.aiohttp import Middleware

    answer = answer_headers(url.rsplit("/", 1)[1])
    headers = CIMultiDictProxy(CIMultiDict(answer))
    raw_headers = tuple((name.encode(), value.encode()) for name, value in answer)

    class Written:
        output_size = 0

    async def canned(request: aiohttp.ClientRequest, handler: Any) -> aiohttp.ClientResponse:
        """The cheapest in-process answer aiohttp has: the innermost middleware makes the answer, without
        connecting, its headers made once (read, never changed)."""
        response = aiohttp.ClientResponse(
            request.method,
            request.url,
            writer=None,
            continue100=None,
            timer=TimerNoop(),
            request_info=request.request_info,
            traces=[],
            loop=asyncio.get_running_loop(),
            session=request._session,
            stream_writer=Written(),  # type: ignore[arg-type]
        )
        response.status, response.reason = 200, "OK"
        response._headers = headers
        response._raw_headers = raw_headers
        response._body = BODY
        return response

    async def passing(request: aiohttp.ClientRequest, handler: Any) -> aiohttp.ClientResponse:
        """The no-op hook: a middleware that hands the request on."""
        return await handler(request)  # type: ignore[no-any-return]

    middlewares: list[Any] = []
    pace = None if kind in (BARE, HOOK) else Middleware(limiter(kind, regions))
    if pace is not None:
        middlewares.append(pace)
    elif kind == HOOK:
        middlewares.append(passing)
    if mock:
        middlewares.append(canned)

    def make() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(middlewares=tuple(middlewares))

    async def call(session: aiohttp.ClientSession) -> None:
        async with session.get(url) as response:
            await response.read()

    run, _, close = looped(make, call)
    return Made(run, None if pace is None else pace.outgoing, close)


CLIENTS: dict[str, Callable[[str, str, bool, list[Path]], Made]] = {
    "httpx": httpx_client,
    "httpx async": httpx_async_client,
    "requests": requests_client,
    "aiohttp": aiohttp_client,
}
HOOKS = {"httpx": "transport", "httpx async": "transport", "requests": "adapter", "aiohttp": "middleware"}


# --- over loopback: interleaved rounds ------------------------------------------------------------------------


@dataclass
class Case:
    client: str
    dialect: str
    kind: str  # BARE or a store
    made: Made
    seconds: list[float] = field(default_factory=list)


def loopback_cases(base: str, regions: list[Path]) -> list[Case]:
    found = []
    for client, maker in CLIENTS.items():
        for dialect in DIALECTS:
            for kind in (BARE, *STORES.get(client, ("memory",))):
                found.append(Case(client, dialect, kind, maker(f"{base}/{dialect}", kind, False, regions)))
    return found


def measure_loopback(cases: list[Case], rounds: int, calls: int) -> None:
    for case in cases:
        case.made.run(max(calls // 5, 20))  # warm-up: connections, the server's first word, the auto-groups
    for index in range(rounds):
        gc.collect()
        gc.disable()  # a collection landing in one case's run and not another's is noise, not cost
        try:
            for case in cases if index % 2 == 0 else reversed(cases):
                case.seconds.append(case.made.run(calls))
        finally:
            gc.enable()


def loopback_rows(cases: list[Case], calls: int) -> list[dict[str, Any]]:
    bare = {(c.client, c.dialect): c for c in cases if c.kind == BARE}
    rows = []
    for case in cases:
        if case.kind == BARE:
            continue
        base = bare[(case.client, case.dialect)]
        us = [s / calls * 1e6 for s in case.seconds]
        base_us = [s / calls * 1e6 for s in base.seconds]
        added = [mine - theirs for mine, theirs in zip(us, base_us, strict=True)]
        rows.append(
            {
                "setup": "loopback",
                "client": case.client,
                "store": case.kind,
                "dialect": case.dialect,
                "bare_us": statistics.median(base_us),
                "with_us": statistics.median(us),
                "added_us": statistics.median(added),
                "ratio": statistics.median(mine / theirs for mine, theirs in zip(us, base_us, strict=True)),
                "added_spread_us": [min(added), max(added)],
            }
        )
    return rows


# --- with no network: paired blocks ---------------------------------------------------------------------------

AGAIN = "bare again"  # the A/A run: a second bare client, measured as the others are


@dataclass
class Paired:
    """One client and dialect with no network: each kind's client, and the µs per call of each of its blocks
    (one block per round, so the kinds' blocks of a round are neighbours in time)."""

    client: str
    dialect: str
    made: dict[str, Made]
    us: dict[str, list[float]] = field(default_factory=dict)


def paired_sets(regions: list[Path], clients: list[str], dialects: list[str]) -> list[Paired]:
    found = []
    for client in clients:
        maker = CLIENTS[client]
        for dialect in dialects:
            url = f"http://api.example/{dialect}"
            kinds = (BARE, AGAIN, HOOK, *STORES.get(client, ("memory",)))
            made = {kind: maker(url, BARE if kind == AGAIN else kind, True, regions) for kind in kinds}
            found.append(Paired(client, dialect, made))
    return found


#: Rounds a set runs in a row before the next set's: its clients stay warm as in a run of calls, and every set
#: still has rounds all through the run.
ROUNDS_IN_A_ROW = 10


def measure_paired(sets: list[Paired], blocks: int, block: int) -> None:
    """``blocks`` rounds per set; in each, every kind of the set runs one block of ``block`` calls, side by
    side, in an order that turns each round (and runs backwards every other turn), so no kind is always first,
    or always after the same one. Drift (another process, the CPU's clock) hits a round's blocks alike, and the
    differences of a round's blocks keep little of it. The sets take turns, ``ROUNDS_IN_A_ROW`` rounds each, so
    that a burst of load on a shared machine lands on every set alike instead of on the few measured at the
    time (the medians over rounds keep out what lands on fewer than half of them). The collector is frozen and
    off while timing: a collection in one block and not in its neighbour is noise, not cost; the garbage is
    collected every 50 rounds, between blocks."""
    for paired in sets:
        for made in paired.made.values():
            made.run(200)  # warm-up: the server's first word, the auto-groups, the code paths
        paired.us = {kind: [] for kind in paired.made}
    gc.collect()
    gc.freeze()
    gc.disable()
    done = 0
    try:
        for start in range(0, blocks, ROUNDS_IN_A_ROW):
            turn_of_sets = sets if (start // ROUNDS_IN_A_ROW) % 2 == 0 else sets[::-1]
            for paired in turn_of_sets:
                kinds = list(paired.made)
                for index in range(start, min(start + ROUNDS_IN_A_ROW, blocks)):
                    turn = index % len(kinds)
                    order = kinds[turn:] + kinds[:turn]
                    for kind in order if (index // len(kinds)) % 2 == 0 else reversed(order):
                        paired.us[kind].append(paired.made[kind].run(block) / block * 1e6)
                    done += 1
                    if done % 50 == 0:
                        gc.collect()
    finally:
        gc.enable()
        gc.unfreeze()


def median_ci(values: list[float]) -> tuple[float, float, float]:
    """The median of ``values`` and its 95 % confidence interval, from order statistics (no assumption about
    the distribution): the ranks n/2 -+ 1.96 sqrt(n)/2."""
    ordered = sorted(values)
    n = len(ordered)
    half = 1.959964 * math.sqrt(n) / 2
    low = ordered[max(math.floor(n / 2 - half), 0)]
    high = ordered[min(math.ceil(n / 2 + half), n - 1)]
    return statistics.median(ordered), low, high


def differences(mine: list[float], theirs: list[float]) -> dict[str, Any]:
    """The paired differences of two kinds' blocks: median, 95 % CI of the median, interquartile range."""
    diffs = [a - b for a, b in zip(mine, theirs, strict=True)]
    median, low, high = median_ci(diffs)
    quartiles = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [diffs[0]] * 3
    return {"us": median, "ci_us": [low, high], "iqr_us": [quartiles[0], quartiles[2]]}


def paired_rows(sets: list[Paired], block: int) -> list[dict[str, Any]]:
    rows = []
    for paired in sets:
        bare, again, hook = paired.us[BARE], paired.us[AGAIN], paired.us[HOOK]
        aa = differences(again, bare)
        noise = max(abs(aa["ci_us"][0]), abs(aa["ci_us"][1]))
        hooked = differences(hook, bare)
        for store in STORES.get(paired.client, ("memory",)):
            mine = paired.us[store]
            added, above = differences(mine, bare), differences(mine, hook)
            rows.append(
                {
                    "setup": "no network",
                    "client": paired.client,
                    "store": store,
                    "dialect": paired.dialect,
                    "bare_us": statistics.median(bare),
                    "with_us": statistics.median(mine),
                    "added_us": added["us"],
                    "added_ci_us": added["ci_us"],
                    "added_iqr_us": added["iqr_us"],
                    "hook_us": hooked["us"],
                    "hook_ci_us": hooked["ci_us"],
                    "above_hook_us": above["us"],
                    "above_hook_ci_us": above["ci_us"],
                    "aa_us": aa["us"],
                    "aa_ci_us": aa["ci_us"],
                    "noise_us": noise,
                    "blocks": len(bare),
                    "block_calls": block,
                }
            )
    return rows


def checked(engines: list[tuple[str, Any]]) -> list[str]:
    """What went wrong in the transports' counters: every call sent once, none waited, refused or throttled."""
    problems = []
    for name, engine in engines:
        for key, stats in engine.stats().items():
            bad = {what: stats[what] for what in ("waits", "refused", "throttled", "retries") if stats[what]}
            if bad or not stats["dialect"]:
                problems.append(f"{name} {key}: {bad or 'no word read'}")
    return problems


def time_reads(rounds: int, calls: int) -> list[dict[str, Any]]:
    """``read`` alone per dialect, on the headers of the no-network answers; median µs of ``rounds``."""
    from ratekeeper._server_words import read

    found = []
    for dialect in DIALECTS:
        headers = answer_headers(dialect)
        assert read(headers, 200, now=time.time()).dialect == dialect
        samples = []
        for _ in range(rounds):
            now = time.time()
            started = time.perf_counter()
            for _ in range(calls):
                read(headers, 200, now=now)
            samples.append((time.perf_counter() - started) / calls * 1e6)
        found.append({"dialect": dialect, "us": statistics.median(samples), "min_us": min(samples)})
    return found


def steps(calls: int) -> None:
    """Where a call's µs go, step by step: the two calls into the core an httpx call through the transport makes
    (the admission, from the URL's parts; the reply's, from the raw headers), each timed alone after a bare
    httpx call, so that the caches are as cold as in a real call; and, as a floor, the limiter's own check and
    cap of each budget's group (``Limiter.check`` / ``Limiter.cap``, which those two calls make in the store);
    medians."""
    import httpx
    from ratekeeper.httpx import Transport

    print(f"\n--- the core's two calls of an httpx call, in context ({MICRO}, median of {calls:,}; a bare call first)")
    print(f"| dialect | budgets | admission {MICRO} | reply {MICRO} | the store's check and cap alone {MICRO} |")
    print("|---|---:|---:|---:|---:|")
    clock = time.perf_counter_ns
    for dialect in DIALECTS:
        url = f"http://api.example/{dialect}"
        inner = httpx_answers(dialect)
        transport = Transport(limiter("memory", []), inner=inner)
        with httpx.Client(transport=transport) as paced, httpx.Client(transport=inner) as bare:
            for _ in range(200):
                paced.get(url)
            outgoing = transport.outgoing
            admit, settle, store = outgoing._admit_parts, outgoing._core_settle, outgoing.limiter
            groups = [group for group in store.groups if group.startswith("api.example ")]
            request = httpx.Request("GET", url)
            response = inner.handle_request(request)
            parts, headers = request.url._uri_reference, response.headers._list
            admitting, settling, storing = [], [], []
            gc.disable()
            try:
                for _ in range(calls):
                    bare.get(url)
                    started = clock()
                    ticket = admit(parts)
                    admitted = clock()
                    settle(ticket, headers, 200)
                    settled = clock()
                    admitting.append(admitted - started)
                    settling.append(settled - admitted)
                    bare.get(url)
                    started = clock()
                    for group in groups:
                        store.check("api.example", group=group)
                    for group in groups:
                        store.cap("api.example", group=group, remaining=LIMIT, reset_after=3600.0, age=0.0)
                    storing.append(clock() - started)
            finally:
                gc.enable()
        print(
            f"| {DIALECT_NAMES[dialect]} | {len(groups)} | {statistics.median(admitting) / 1e3:.2f} | "
            f"{statistics.median(settling) / 1e3:.2f} | {statistics.median(storing) / 1e3:.2f} |"
        )


def profile(calls: int, top: int = 25) -> None:
    """Where one call's µs go: cProfile over ``calls`` httpx calls through the transport, no network."""
    made = httpx_client("http://api.example/github", "memory", True, [])
    made.run(200)
    profiler = cProfile.Profile()
    profiler.enable()
    made.run(calls)
    profiler.disable()
    print(f"\n--- cProfile: {calls:,} httpx calls through Transport, no network, GitHub dialect (per call below)")
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(r"_outgoing|_server_words|ratekeeper/httpx|limiter", top)


# --- verdicts ---------------------------------------------------------------------------------------------------

PASS, MISS, CANNOT_TELL = "PASS", "MISS", "cannot tell"
# A no-op hook costing more than this is a client's own price for being hooked at all: its verdict judges
# ratekeeper's cost above it.
HOOK_OWN_COST_US = 1.0


def judged(figures: list[tuple[float, float]], noise: float) -> str:
    """PASS when every figure's 95 % interval ends within the target, MISS when one lies wholly past it, else
    (an interval across it, or a noise floor wider than it) "cannot tell"."""
    if noise > ADDED_AT_MOST_US:
        return CANNOT_TELL
    if all(high <= ADDED_AT_MOST_US for _, high in figures):
        return PASS
    if any(low > ADDED_AT_MOST_US for low, _ in figures):
        return MISS
    return CANNOT_TELL


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One per client and store, over the dialects, with no network: what ratekeeper adds against the target,
    or, for a client whose no-op hook alone costs more than ``HOOK_OWN_COST_US``, what it adds above that."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["setup"] == "no network":
            groups.setdefault((row["client"], row["store"]), []).append(row)
    found = []
    for (client, store), mine in groups.items():
        noise = max(row["noise_us"] for row in mine)
        added = max(row["added_us"] for row in mine)
        above = max(row["above_hook_us"] for row in mine)
        hook = max(row["hook_us"] for row in mine)
        costly_hook = min(row["hook_ci_us"][0] for row in mine) > HOOK_OWN_COST_US
        which = "above the no-op hook" if costly_hook else "added"
        key = "above_hook_ci_us" if costly_hook else "added_ci_us"
        status = judged([tuple(row[key]) for row in mine], noise)
        shown = client if store == "memory" else f"{client} on {store}"
        text = (
            f"{shown}, no network: adds at most {added:+.1f} {MICRO} over the dialects, {above:+.1f} {MICRO} above "
            f"a no-op {HOOKS[client]} (which itself adds at most {hook:+.1f}); noise floor "
            f"\N{PLUS-MINUS SIGN}{noise:.1f} {MICRO}. Judged: {which}, target <= {ADDED_AT_MOST_US:g} {MICRO}"
        )
        found.append({"status": status, "passed": status == PASS, "judged": which, "text": text})
    return found


def ci(values: list[float]) -> str:
    return f"[{values[0]:+.2f}, {values[1]:+.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds over loopback (default 9)")
    parser.add_argument("--calls", type=int, default=300, help="calls a round over loopback (default 300)")
    parser.add_argument(
        "--blocks", type=int, default=1000, help="paired rounds of blocks with no network (default 1,000)"
    )
    parser.add_argument("--block", type=int, default=20, help="calls a block with no network (default 20)")
    parser.add_argument("--profile", action="store_true", help="also print where one call's µs go (steps, cProfile)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every verdict is PASS")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 rounds of 20 calls, 60 blocks of 5")
    parser.add_argument("--no-loopback", action="store_true", help="only the no-network figures (a quick look)")
    parser.add_argument(
        "--clients", type=lambda text: text.split(","), default=list(CLIENTS), help="with --no-loopback: these clients"
    )
    parser.add_argument(
        "--dialects",
        type=lambda text: text.split(","),
        default=list(DIALECTS),
        help="with --no-loopback: these dialects",
    )
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls, args.blocks, args.block = 3, 20, 60, 5
    if not args.no_loopback and (args.clients != list(CLIENTS) or args.dialects != list(DIALECTS)):
        parser.error("--clients and --dialects go with --no-loopback (a full run measures them all)")
    unknown = sorted({*args.clients} - {*CLIENTS} | {*args.dialects} - {*DIALECTS})
    if unknown:
        parser.error(
            f"no client or dialect {', '.join(unknown)}; clients: {', '.join(CLIENTS)}; dialects: {', '.join(DIALECTS)}"
        )

    sys.path.insert(0, str(HERE))
    from machine import describe, version, write_results

    regions: list[Path] = []
    loopback: list[Case] = []
    sets: list[Paired] = []
    try:
        if not args.no_loopback:
            with server() as base:
                loopback = loopback_cases(base, regions)
                measure_loopback(loopback, args.rounds, args.calls)
        sets = paired_sets(regions, args.clients, args.dialects)
        measure_paired(sets, args.blocks, args.block)
        engines = [(f"loopback {c.client} {c.dialect} {c.kind}", c.made.engine) for c in loopback if c.made.engine]
        engines += [
            (f"no network {p.client} {p.dialect} {kind}", made.engine)
            for p in sets
            for kind, made in p.made.items()
            if made.engine is not None
        ]
        problems = checked(engines)
    finally:
        for case in loopback:
            case.made.close()
        for paired in sets:
            for made in paired.made.values():
                made.close()
        for path in regions:
            path.unlink(missing_ok=True)
            os.rmdir(path.parent)
    reads = time_reads(9, 20_000 if not args.quick else 1_000)

    rows = loopback_rows(loopback, args.calls) + paired_rows(sets, args.block)
    http = (
        f"uvicorn {version('uvicorn')}, one worker, {' '.join(SERVER_OPTIONS[:4])} (httptools "
        f"{version('httptools')}), a separate process on loopback"
    )
    if loopback:
        print(f"loopback server: {http}")
        print(f"{args.rounds} interleaved rounds of {args.calls:,} calls; medians\n")
        print(f"| client | store | dialect | bare {MICRO} | with ratekeeper {MICRO} | added {MICRO} |")
        print("|---|---|---|---:|---:|---:|")
        for row in rows:
            if row["setup"] == "loopback":
                print(
                    f"| {row['client']} | {row['store']} | {DIALECT_NAMES[row['dialect']]} | {row['bare_us']:.1f} | "
                    f"{row['with_us']:.1f} | {row['added_us']:+.2f} |"
                )
    print(
        f"\nno network: {args.blocks:,} paired rounds of blocks of {args.block} calls; medians of the rounds' "
        f"differences, [95 % CI], (IQR)\n"
    )
    print(
        f"| client | store | dialect | bare {MICRO} | with {MICRO} | added {MICRO} | no-op hook {MICRO} | "
        f"above the hook {MICRO} | bare again (A/A) {MICRO} |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if row["setup"] != "no network":
            continue
        iqr = row["added_iqr_us"]
        print(
            f"| {row['client']} | {row['store']} | {DIALECT_NAMES[row['dialect']]} | {row['bare_us']:.1f} | "
            f"{row['with_us']:.1f} | {row['added_us']:+.2f} {ci(row['added_ci_us'])} ({iqr[0]:+.1f}, {iqr[1]:+.1f}) | "
            f"{row['hook_us']:+.2f} {ci(row['hook_ci_us'])} | {row['above_hook_us']:+.2f} "
            f"{ci(row['above_hook_ci_us'])} | {row['aa_us']:+.2f} {ci(row['aa_ci_us'])} |"
        )
    print(f"\n| dialect | read() {MICRO} |\n|---|---:|")
    for read in reads:
        print(f"| {DIALECT_NAMES[read['dialect']]} | {read['us']:.2f} |")
    found = verdicts(rows)
    print()
    for verdict in found:
        print(f"{verdict['status']}: {verdict['text']}")
    for problem in problems:
        print(f"PROBLEM {problem}")
    if args.profile:
        steps(5_000 if not args.quick else 200)
        profile(20_000 if not args.quick else 1_000)

    data = {"rows": rows, "reads": reads, "verdicts": found, "problems": problems, "server": http}
    packages = ["httpx", "requests", "aiohttp"]
    machine = describe(packages, http=http)
    settings = {"rounds": args.rounds, "calls": args.calls, "blocks": args.blocks, "block_calls": args.block}
    if not args.no_loopback:
        write_results(args.json, "outgoing", data, machine, **settings)
    # A problem (a call that waited) is shown on the page; only --check makes it, or a verdict short of PASS,
    # an exit status.
    failed = args.check and (bool(problems) or not all(v["passed"] for v in found))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
