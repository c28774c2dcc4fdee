"""What a limiter costs a request on a real server, counted: instructions and simulated cache misses per
request under callgrind, where wrk's req/s on a shared 2-core machine varies by more than the cost being
measured.

What is measured
    The apps of ``benches/web_apps.py``, FastAPI on uvicorn (one process, ``--http auto``) and Flask and
    Django on gunicorn (one sync worker), under ``valgrind --tool=callgrind --cache-sim=yes``:
    instrumentation off while the server starts and serves ``--warmup`` requests, then on for
    ``--requests`` requests sent one after another (``X-Account-ID: bench``; on one keep-alive connection
    with uvicorn, a connection each with gunicorn's sync worker, which closes them). Every process of the
    server is counted. gunicorn's forked worker cannot be switched on and off, so its cases run twice,
    with and without the counted requests, and the difference is taken; the start-up cancels out to
    within a few thousand instructions a request at the default 3,000 requests. Per request: instructions
    (Ir), simulated L1 misses (I1 + D1) and last-level misses (LL), and the estimated cycles
    ``Ir + 10 x L1 + 100 x LL`` (the weighting cachegrind's documentation and iai use). With one hash seed
    the counts repeat to within 0.3 % from run to run (uvicorn); ``--repeat`` runs
    each case again, interleaved, and keeps the median. The variants (``web_apps.py``):

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
    python benches/web_instructions.py                        # every case, 3,000 requests, one run
    python benches/web_instructions.py --only fastapi --repeat 3
    python benches/web_instructions.py --only flask --variants none,ratekeeper-allowed

Needs valgrind (Debian: ``apt-get install valgrind``) and the bench extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

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
ALLOWED_COST_AT_MOST = {"fastapi": 0.02, "flask": 0.03, "django": 0.03}  # of the cycles without ratekeeper
REFUSED_AT_MOST = {"fastapi": 1 / 1.2, "flask": 1 / 1.2, "django": 1.0}  # of a bare request's cycles


@dataclass(frozen=True)
class Counted:
    framework: str
    variant: str
    instructions: float
    l1_misses: float
    ll_misses: float

    @property
    def cycles(self) -> float:
        return self.instructions + L1_CYCLES * self.l1_misses + LL_CYCLES * self.ll_misses


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def server_command(framework: str, port: int) -> list[str]:
    if framework == "fastapi":
        return [
            *(sys.executable, "-m", "uvicorn", "--factory", "web_apps:fastapi_app", "--app-dir", str(HERE)),
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


def totals(framework: str, variant: str, warmup: int, requests: int, *, toggled: bool) -> dict[str, int]:
    """callgrind's event totals over every process of a server that answered ``warmup`` requests, then
    ``requests`` more: those alone when ``toggled`` (instrumentation turned on between them), else all
    of its run, start-up included."""
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            *("valgrind", "--tool=callgrind", "--cache-sim=yes", f"--instr-atstart={'no' if toggled else 'yes'}"),
            f"--callgrind-out-file={scratch}/callgrind.out.%p",  # one a process: gunicorn forks its worker
            *server_command(framework, port),
        ]
        # The system allocator, so valgrind sees every allocation as the program makes it; one hash seed,
        # so dicts and sets lay out alike in every run.
        environment = {**os.environ, "BENCH_VARIANT": variant, "PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}
        server = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        refused = variant.endswith("-refused")
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    send(port, 1, refused)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"{framework} {variant}: the server did not start under valgrind") from None
                    time.sleep(0.5)
            send(port, warmup, refused)
            if toggled:
                subprocess.run(["callgrind_control", "--instr=on", str(server.pid)], check=True, capture_output=True)
            send(port, requests, refused)
            if toggled:
                subprocess.run(["callgrind_control", "--instr=off", str(server.pid)], check=True, capture_output=True)
        finally:
            server.terminate()
            server.wait()
        total: dict[str, int] = {}
        for out in Path(scratch).glob("callgrind.out.*"):
            text = out.read_text()
            events = re.search(r"^events: (.*)$", text, re.MULTILINE)
            found = re.search(r"^totals: (.*)$", text, re.MULTILINE)
            if events is None or found is None:
                continue
            values = [int(value) for value in found.group(1).split()]
            for at, event in enumerate(events.group(1).split()):  # callgrind leaves out trailing zeros
                total[event] = total.get(event, 0) + (values[at] if at < len(values) else 0)
    return total


def count(framework: str, variant: str, requests: int, warmup: int) -> Counted:
    if framework == "fastapi":
        total = totals(framework, variant, warmup, requests, toggled=True)
    else:
        # callgrind_control cannot reach gunicorn's forked worker: two whole runs, one with the counted
        # requests and one without, and the difference.
        with_them = totals(framework, variant, warmup, requests, toggled=False)
        without = totals(framework, variant, warmup, 0, toggled=False)
        total = {event: value - without.get(event, 0) for event, value in with_them.items()}
    if total.get("Ir", 0) <= 0:
        raise SystemExit(f"{framework} {variant}: callgrind counted nothing")
    return Counted(
        framework,
        variant,
        total["Ir"] / requests,
        (total["I1mr"] + total["D1mr"] + total["D1mw"]) / requests,
        (total["ILmr"] + total["DLmr"] + total["DLmw"]) / requests,
    )


def change(value: float, base: float) -> str:
    percent = (value / base - 1) * 100
    return f"{'+' if percent >= 0 else MINUS}{abs(percent):.2f} %"


def table(counted: list[Counted]) -> list[str]:
    lines = [
        "| app | variant | instructions | L1 misses | LL misses | est. cycles | vs none |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for c in counted:
        base = next((b for b in counted if b.framework == c.framework and b.variant == "none"), None)
        versus = change(c.cycles, base.cycles) if base is not None and c is not base else "—"
        lines.append(
            f"| {c.framework} | {c.variant} | {c.instructions:,.0f} | {c.l1_misses:,.0f} | {c.ll_misses:,.1f} "
            f"| {c.cycles:,.0f} | {versus} |"
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
    parser.add_argument("--requests", type=int, default=3000, help="counted requests a case (default 3,000)")
    parser.add_argument("--warmup", type=int, default=300, help="requests before counting (default 300)")
    parser.add_argument("--repeat", type=int, default=1, help="runs a case, interleaved; the median is kept")
    parser.add_argument("--only", choices=tuple(CASES), help="one framework")
    parser.add_argument("--variants", help="only these web_apps.py variants, comma-separated; default all")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
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
    for run in range(1, args.repeat + 1):
        for framework, variant in cases:
            found = count(framework, variant, args.requests, args.warmup)
            runs[framework, variant].append(found)
            print(f"  run {run}/{args.repeat} {framework} {variant}: {found.cycles:,.0f} est. cycles", file=sys.stderr)
    counted = [sorted(found, key=lambda c: c.cycles)[len(found) // 2] for found in runs.values()]
    print(
        f"\n{args.requests:,} requests a case under callgrind, median of {args.repeat} run(s); "
        f"Python {platform.python_version()}\n"
    )
    print("\n".join(table(counted)))
    print()
    results = verdicts(counted)
    for ok, text in results:
        print(f"{'PASS' if ok else 'MISS'} {text}")
    return 1 if args.check and not all(ok for ok, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
