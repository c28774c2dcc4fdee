"""What a limiter costs a request on a real server, counted: instructions and simulated cache misses per
request under callgrind, where wrk's req/s on a shared 2-core machine varies by more than the cost being
measured.

What is measured
    The apps of ``benches/web_apps.py``, FastAPI on uvicorn (one process; ``--http httptools --loop
    asyncio``, named so that no other parser is picked silently) and Flask and Django on gunicorn (one sync
    worker, gunicorn's own parser), under ``valgrind --tool=callgrind --cache-sim=yes``, the simulated
    caches fixed (L1 instruction and data 32 KiB 8-way, last level 8 MiB 16-way, 64-byte lines) so that
    the counts do not depend on the host's caches. Per request: instructions (Ir), simulated L1 misses
    (I1 + D1) and last-level misses (LL), and the estimated cycles ``Ir + 10 x L1 + 100 x LL`` (the
    weighting cachegrind's documentation and iai use).

Only the request is counted
    One process is counted, the one that serves: uvicorn's, or gunicorn's worker (its arbiter, which
    wakes every second to watch the worker, is never counted). Its instrumentation is off while the
    server starts and serves ``--warmup`` requests, then on (``callgrind_control``) for 20 requests that
    fill the simulated caches, zeroed, on for ``--requests`` requests sent one after another
    (``X-Account-ID: bench``; on one keep-alive connection with uvicorn, a connection each with
    gunicorn's sync worker, which closes them), and dumped.

    A server also does work no request asks for. uvicorn's main loop wakes every 0.1 s (to refresh its
    Date header and check for shutdown): once every few hundred requests in service, but under callgrind,
    where a request takes a hundred times longer, a few per cent of each counted request, and more on a
    slower host. Subtracting the cost of ticks measured while idle over-corrects: an idle tick wakes the
    loop for itself, while a tick among requests shares a loop iteration with them (runs that spanned
    more ticks came out up to 1 % lower). So while
    counting, the tick is stretched to once an hour (``web_apps.stretch_ticks``, which also counts the
    ticks: none fall among the counted requests). What else wakes by the clock (gunicorn's worker when
    its select times out) is measured over an idle interval (``--idle`` seconds, dumped) and subtracted,
    scaled to the requests' interval: ``(counted - idle x requests' seconds / idle seconds) /
    requests``; the table shows what was subtracted. With one hash seed the counts repeat to within
    0.3 % from run to run; ``--repeat`` runs each case again and keeps the median; ``--jobs`` cases run
    at once (the counts do not depend on the machine's load).

    The variants (``web_apps.py``):

      none                      no limiter
      fields-only-allowed       no limiter: a bare middleware adding the two fields an allowed request
                                gets, as constants. What the fields themselves cost the server (uvicorn
                                checks each header line with two regular expressions), the floor of any
                                limiter that sends them
      ratekeeper-quiet-allowed  ratekeeper, fields on 429s only: the integration and its decision
      ratekeeper-allowed        ratekeeper, the fields on every response (the default)
      ratekeeper-refused        ratekeeper, every request after the first answered 429
      slowapi-allowed, flask-limiter-allowed, django-ratelimit-allowed: the peers' documented set-ups

Targets
    The integration and its decision (ratekeeper-quiet-allowed) cost at most 2 % more estimated cycles
    than none with FastAPI, 3 % with Flask and Django. With the fields on every response,
    ratekeeper-allowed costs at most as much more than fields-only-allowed: ratekeeper's own part of a
    request that carries the fields, which alone cost the server more than these targets. A refusal costs
    at most 1/1.2 of none's cycles with FastAPI and Flask (refusals served at >= 1.2x the rate), at most
    none's with Django (its 429 goes through its whole middleware stack). Printed as PASS / MISS; with
    ``--check`` a miss is exit status 1.

Usage
    python benches/web_instructions.py                        # every case, 500 requests, one run
    python benches/web_instructions.py --only fastapi --repeat 3
    python benches/web_instructions.py --only flask --variants none,ratekeeper-allowed
    python benches/web_instructions.py --quick                # smoke run: 20 requests a case

Needs valgrind (Debian: ``apt-get install valgrind``) and the bench extra (``pip install -e '.[bench]'``,
which brings httptools).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from machine import describe, uvicorn_http, version, write_results

HERE = Path(__file__).resolve().parent
CASES = {
    "fastapi": (
        "none",
        "fields-only-allowed",
        "ratekeeper-quiet-allowed",
        "ratekeeper-allowed",
        "ratekeeper-refused",
        "slowapi-allowed",
    ),
    "flask": (
        "none",
        "fields-only-allowed",
        "ratekeeper-quiet-allowed",
        "ratekeeper-allowed",
        "ratekeeper-refused",
        "flask-limiter-allowed",
    ),
    "django": (
        "none",
        "fields-only-allowed",
        "ratekeeper-quiet-allowed",
        "ratekeeper-allowed",
        "ratekeeper-refused",
        "django-ratelimit-allowed",
    ),
}
MINUS = "\N{MINUS SIGN}"
L1_CYCLES, LL_CYCLES = 10, 100
# The simulated caches (size, associativity, line), the same on every host: callgrind would otherwise take
# the host's, and a VM may report a last level of hundreds of MB.
CACHES = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (8 * 2**20, 16, 64)}
ALLOWED_COST_AT_MOST = {"fastapi": 0.02, "flask": 0.03, "django": 0.03}  # of the cycles without ratekeeper
REFUSED_AT_MOST = {"fastapi": 1 / 1.2, "flask": 1 / 1.2, "django": 1.0}  # of a bare request's cycles
CACHE_WARMUP = 20  # requests served with instrumentation on, before the counts are zeroed
SETTLE_S = 0.5  # after the last response, for the server to see the connection closed before the dump
IDLE_S = 5.0  # the idle interval
TICK_S = 3600.0  # uvicorn's main loop, stretched from 0.1 s (web_apps.stretch_ticks)
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


@dataclass(frozen=True)
class Counted:
    framework: str
    variant: str
    instructions: float
    l1_misses: float
    ll_misses: float
    idle_cycles: float = 0.0  # what the idle interval held, per request: subtracted from the figures above
    seconds: float = 0.0  # the counted requests' interval (wall clock, under callgrind)

    @property
    def cycles(self) -> float:
        return self.instructions + L1_CYCLES * self.l1_misses + LL_CYCLES * self.ll_misses


def cycles_of(events: dict[str, float]) -> float:
    l1 = events["I1mr"] + events["D1mr"] + events["D1mw"]
    ll = events["ILmr"] + events["DLmr"] + events["DLmw"]
    return events["Ir"] + L1_CYCLES * l1 + LL_CYCLES * ll


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def server_command(framework: str, port: int) -> list[str]:
    if framework == "fastapi":
        return [
            *(sys.executable, "-m", "uvicorn", "--factory", "web_apps:fastapi_app", "--app-dir", str(HERE)),
            *("--http", "httptools", "--loop", "asyncio"),
            *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"),
        ]
    return [
        *(sys.executable, "-m", "gunicorn", "--chdir", str(HERE), "-w", "1", "-k", "sync"),
        *("-b", f"127.0.0.1:{port}", "--log-level", "warning", f"web_apps:{framework}_app()"),
    ]


def send(port: int, n: int, refused: bool) -> None:
    """``n`` requests one after another (on one connection while the server keeps it open), each answered
    as the variant must."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        for _ in range(n):
            connection.request("GET", "/", headers={"X-Account-ID": "bench"})
            response = connection.getresponse()
            response.read()
            if response.status not in ((200, 429) if refused else (200,)):
                raise SystemExit(f"unexpected status {response.status}")
    finally:
        connection.close()


def serving_pid(framework: str, server: subprocess.Popen[bytes]) -> int:
    """The process that serves the requests: uvicorn's own, or gunicorn's one worker (the arbiter's child)."""
    if framework == "fastapi":
        return server.pid
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    if len(children) != 1:
        raise SystemExit(f"{framework}: expected one gunicorn worker, found {children}")
    return int(children[0])


def control(pid: int, *command: str) -> None:
    subprocess.run(["callgrind_control", *command, str(pid)], check=True, capture_output=True)


def dumped(scratch: str, pid: int, trigger: str) -> dict[str, float]:
    """The event totals of the dump of ``pid`` that ``callgrind_control --dump=trigger`` wrote."""
    for out in Path(scratch).glob(f"callgrind.out.{pid}.*"):
        text = out.read_text()
        if f"\ndesc: Trigger: dump {trigger}\n" not in text:
            continue
        events = re.search(r"^events: (.*)$", text, re.MULTILINE)
        found = re.search(r"^totals: (.*)$", text, re.MULTILINE)
        if events is None or found is None:
            break
        values = [int(value) for value in found.group(1).split()]
        # callgrind leaves out trailing zeros
        return {event: float(values[at] if at < len(values) else 0) for at, event in enumerate(events.group(1).split())}
    raise SystemExit(f"callgrind wrote no dump {trigger!r} for process {pid}")


def count(framework: str, variant: str, requests: int, warmup: int, idle_s: float) -> Counted:
    """One case: the serving process's events over ``requests`` requests, less what it does unasked (see the
    module docstring), per request."""
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        caches = [f"--{name}={size},{ways},{line}" for name, (size, ways, line) in CACHES.items()]
        command = [
            *("valgrind", "--tool=callgrind", "--cache-sim=yes", *caches, "--instr-atstart=no"),
            # gunicorn forks its worker: callgrind_control reaches a forked child only when children are traced.
            "--trace-children=yes",
            f"--callgrind-out-file={scratch}/callgrind.out.%p",
            *server_command(framework, port),
        ]
        ticks = Path(scratch, "ticks")
        ticks.touch()
        # The system allocator, so valgrind sees every allocation as the program makes it; one hash seed,
        # so dicts and sets lay out alike in every run.
        environment = {
            **os.environ,
            "BENCH_VARIANT": variant,
            "BENCH_TICKS_PATH": str(ticks),
            "BENCH_TICK_S": str(TICK_S),
            "PYTHONMALLOC": "malloc",
            "PYTHONHASHSEED": "0",
        }
        refused = variant.endswith("-refused")
        with Path(scratch, "server.log").open("wb") as log:
            server = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    send(port, 1, refused)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        error = Path(scratch, "server.log").read_text(errors="replace")[-2000:]
                        raise SystemExit(
                            f"{framework} {variant}: the server did not start under valgrind\n{error}"
                        ) from None
                    time.sleep(0.5)
            send(port, warmup, refused)
            pid = serving_pid(framework, server)
            control(pid, "--instr=on")
            # The simulated caches start empty when instrumentation is turned on: warm them, then zero the counts.
            send(port, CACHE_WARMUP, refused)
            control(pid, "--zero")
            started, ticked = time.monotonic(), ticks.stat().st_size
            send(port, requests, refused)
            time.sleep(SETTLE_S)  # the server closes the client's connection: part of the requests' work
            control(pid, "--dump=requests")
            busy, busy_ticks = time.monotonic() - started, ticks.stat().st_size - ticked
            started = time.monotonic()
            time.sleep(idle_s)
            control(pid, "--dump=idle")
            idle = time.monotonic() - started
            control(pid, "--instr=off")
        finally:
            # uvicorn checks for shutdown at its (stretched) ticks only: it is killed; gunicorn's arbiter is asked.
            server.kill() if framework == "fastapi" else server.terminate()
            server.wait()
        counted, quiet = dumped(scratch, pid, "requests"), dumped(scratch, pid, "idle")
    if busy_ticks:
        raise SystemExit(f"{framework} {variant}: uvicorn ticked {busy_ticks} times among the counted requests")
    scale = busy / idle  # what is left wakes by the clock (gunicorn's worker: its select's timeout)
    total = {event: counted.get(event, 0.0) - scale * quiet.get(event, 0.0) for event in EVENTS}
    if total["Ir"] <= 0:
        raise SystemExit(f"{framework} {variant}: callgrind counted nothing")
    return Counted(
        framework,
        variant,
        total["Ir"] / requests,
        (total["I1mr"] + total["D1mr"] + total["D1mw"]) / requests,
        (total["ILmr"] + total["DLmr"] + total["DLmw"]) / requests,
        idle_cycles=scale * cycles_of({event: quiet.get(event, 0.0) for event in EVENTS}) / requests,
        seconds=busy,
    )


def servers() -> str:
    """Which server and HTTP parser carried each framework's requests."""
    return (
        f"FastAPI: uvicorn {version('uvicorn')}, --http httptools ({uvicorn_http()}), --loop asyncio; "
        f"Flask and Django: gunicorn {version('gunicorn')}, one sync worker (gunicorn's own parser)"
    )


def change(value: float, base: float) -> str:
    percent = (value / base - 1) * 100
    return f"{'+' if percent >= 0 else MINUS}{abs(percent):.2f} %"


def table(counted: list[Counted]) -> list[str]:
    lines = [
        "| app | variant | instructions | L1 misses | LL misses | est. cycles | vs none | idle work subtracted |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in counted:
        base = next((b for b in counted if b.framework == c.framework and b.variant == "none"), None)
        versus = change(c.cycles, base.cycles) if base is not None and c is not base else "—"
        lines.append(
            f"| {c.framework} | {c.variant} | {c.instructions:,.0f} | {c.l1_misses:,.0f} | {c.ll_misses:,.1f} "
            f"| {c.cycles:,.0f} | {versus} | {c.idle_cycles:,.0f} ({c.idle_cycles / c.cycles * 100:.1f} %) |"
        )
    return lines


def verdicts(counted: list[Counted]) -> list[tuple[bool, str]]:
    found: list[tuple[bool, str]] = []
    for framework in CASES:
        of = {c.variant: c for c in counted if c.framework == framework}
        none, floor = of.get("none"), of.get("fields-only-allowed")
        quiet, allowed, refused = (
            of.get("ratekeeper-quiet-allowed"),
            of.get("ratekeeper-allowed"),
            of.get("ratekeeper-refused"),
        )
        at_most = ALLOWED_COST_AT_MOST[framework]
        limit = f"<= +{at_most * 100:.0f} %"
        if none is not None and quiet is not None:
            found.append(
                (
                    quiet.cycles <= none.cycles * (1 + at_most),
                    f"{framework}: the integration and its decision cost {change(quiet.cycles, none.cycles)} ({limit})",
                )
            )
        if floor is not None and allowed is not None:
            alone = change(floor.cycles, none.cycles) if none is not None else "not run"
            found.append(
                (
                    allowed.cycles <= floor.cycles * (1 + at_most),
                    f"{framework}: with the fields on, ratekeeper costs {change(allowed.cycles, floor.cycles)} "
                    f"over the fields alone ({limit}; the fields alone: {alone})",
                )
            )
        elif none is not None and allowed is not None:
            found.append(
                (
                    allowed.cycles <= none.cycles * (1 + at_most),
                    f"{framework}: ratekeeper allowed, the fields on, costs "
                    f"{change(allowed.cycles, none.cycles)} ({limit})",
                )
            )
        if none is not None and refused is not None:
            ratio = refused.cycles / none.cycles
            found.append(
                (
                    ratio <= REFUSED_AT_MOST[framework],
                    f"{framework}: a refusal costs {ratio:.3f}x a bare request (<= {REFUSED_AT_MOST[framework]:.3f})",
                )
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="counted requests a case (default 500)")
    parser.add_argument("--warmup", type=int, default=100, help="requests before counting (default 100)")
    parser.add_argument("--idle", type=float, default=IDLE_S, help="seconds of the idle interval (default 5)")
    parser.add_argument("--repeat", type=int, default=1, help="runs a case, interleaved; the median is kept")
    parser.add_argument("--jobs", type=int, default=2, help="cases counted at once (default 2)")
    parser.add_argument("--only", choices=tuple(CASES), help="one framework")
    parser.add_argument("--variants", help="only these web_apps.py variants, comma-separated; default all")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 requests a case after 10, 1 s idle")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.warmup, args.idle = 20, 10, 1.0
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
            return 2
    if version("httptools") == "not installed":
        print("httptools is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    wanted = set(args.variants.split(",")) if args.variants else None
    cases = [
        (framework, variant)
        for framework, variants in CASES.items()
        if args.only in (None, framework)
        for variant in variants
        if wanted is None or variant in wanted
    ]
    if not cases:
        parser.error("no case matches --only and --variants")
    runs: dict[tuple[str, str], list[Counted]] = {case: [] for case in cases}

    def one(run: int, framework: str, variant: str) -> None:
        found = count(framework, variant, args.requests, args.warmup, args.idle)
        runs[framework, variant].append(found)
        print(
            f"  run {run}/{args.repeat} {framework} {variant}: {found.cycles:,.0f} est. cycles "
            f"({found.idle_cycles:,.0f} idle subtracted, {found.seconds:.1f} s)",
            file=sys.stderr,
        )

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for run in range(1, args.repeat + 1):
            for future in [pool.submit(one, run, framework, variant) for framework, variant in cases]:
                future.result()
    counted = [sorted(found, key=lambda c: c.cycles)[len(found) // 2] for found in runs.values()]
    print(f"\n{args.requests:,} requests a case under callgrind, median of {args.repeat} run(s)\n{servers()}\n")
    print("\n".join(table(counted)))
    print()
    results = verdicts(counted)
    for ok, text in results:
        print(f"{'PASS' if ok else 'MISS'} {text}")
    data = {
        "rows": [{**asdict(c), "cycles": c.cycles} for c in counted],
        "caches": {name: list(cache) for name, cache in CACHES.items()},
        "verdicts": [{"passed": ok, "text": text} for ok, text in results],
    }
    packages = ["fastapi", "starlette", "uvicorn", "httptools", "slowapi", "flask", "flask-limiter", "gunicorn"]
    machine = describe([*packages, "django", "django-ratelimit"], http=servers())
    write_results(
        args.json,
        "web_instructions",
        data,
        machine,
        requests=args.requests,
        warmup=args.warmup,
        repeat=args.repeat,
        idle_s=args.idle,
    )
    return 1 if args.check and not all(ok for ok, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
