"""What a limiter costs an HTTP service: wrk against FastAPI on uvicorn and Flask on gunicorn, peers side by side.

What is measured
    One app (``GET /`` answers ``ok``, ``benches/web_apps.py``) served with no limiter, with ratekeeper's
    middleware or Flask extension, and with the peer every FastAPI or Flask user knows, in its own
    documented set-up; each keyed by the ``X-Account-ID`` header:

      FastAPI on uvicorn (1 worker; --http httptools --loop asyncio, named so that no other parser is picked
      silently; Flask and Django go through gunicorn's own parser):
                                      none | ratekeeper allowed | ratekeeper refused | slowapi allowed | refused
                                      | fields-only (the fields added with no limiter: what they cost uvicorn)
      FastAPI on uvicorn --workers 2: ratekeeper allowed, in each worker's memory | ratekeeper-shared allowed,
                                      the workers' states in one shared-memory region (``rk.Shared``); the
                                      app sets TCP_NODELAY, which ``--workers`` loses (uvicorn #3149: ~40 ms
                                      a request otherwise, whatever the limiter)
      Flask on gunicorn (2 sync workers, one per core): none | ratekeeper | flask-limiter, allowed and refused
                                      | fields-only
      Django on gunicorn (the same): none | ratekeeper | django-ratelimit (default cache), allowed and refused

    "allowed": a limit of 10^9/s, every request is admitted and gets its headers; "refused": 1/hour, every
    request after a key's first is answered 429 (with gunicorn, each worker has its own in-memory
    limiter, so two requests are admitted in all). The shared case's region is a fresh file under /dev/shm
    per server (``BENCH_SHARED_PATH``), removed once the server stops; the server must have decided in it.
    Every case is a fresh server on a free loopback port, checked to answer as expected (200 twice, or
    200 then 429), warmed by 1 s of wrk, then measured by
    ``wrk -t1 -c<connections> -d<seconds>s``. Runs are interleaved (run 1 of every case, then run 2, ...)
    so drift of a shared machine hits every case alike; the table reports the median of the runs.

Targets (the 2-core machine)
    ratekeeper allowed, with the IETF fields on every response (and on 429s only), costs at most 2 % of the
    no-limiter req/s with FastAPI and 3 % with Flask and Django (slowapi: about -21 %). The fields alone
    cost uvicorn and gunicorn more than that (each header line is checked with regular expressions and
    formatted in Python): where the ``fields-only-allowed`` case runs (the two fields added by a bare
    middleware, no limiter), the fields-on case is measured against it instead, which leaves ratekeeper's
    own part. ratekeeper refused serves at least 1.2x the no-limiter app's req/s (Django: 1x); with 2
    uvicorn workers, the shared store serves within 3 % of the req/s of each worker's own memory.
    Printed as PASS / MISS; with ``--check`` a miss is exit status 1. On a shared 2-core VM the runs of one
    case spread by more than these percentages: ``benches/web_instructions.py`` counts the same requests'
    instructions and cache misses under callgrind, and ``benches/web_inprocess.py`` times them without a
    server.

Usage
    python benches/http_bench.py                 # 5 runs of 5 s per case, both frameworks
    python benches/http_bench.py --quick         # 1 run of 1 s
    python benches/http_bench.py --only fastapi --runs 7 --seconds 10 --connections 64
    python benches/http_bench.py --variants none,ratekeeper-allowed,ratekeeper-refused

Needs ``wrk`` (Debian: ``apt-get install wrk``) and the bench extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import importlib.util
import os
import platform
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import ratekeeper as rk

HERE = Path(__file__).resolve().parent
HEADER = "X-Account-ID: bench"
MINUS = "\N{MINUS SIGN}"
WORKERS = 2  # gunicorn sync workers: one per core
FIELDS_ONLY = "fields-only-allowed"  # the fields an allowed request gets, added with no limiter: their own cost
SHARED_PATH = "BENCH_SHARED_PATH"  # web_apps.py's region path, for the ratekeeper-shared variant
ALLOWED_COST_AT_MOST = {"fastapi": 2, "flask": 3, "django": 3}  # % of the no-limiter req/s an allowed request may cost
# x the no-limiter req/s that refusals are served at (Django's 429 goes through its whole middleware stack)
REFUSED_AT_LEAST = {"fastapi": 1.2, "flask": 1.2, "django": 1.0}


@dataclass(frozen=True)
class Case:
    framework: str  # "fastapi", "flask" or "django"
    variant: str  # BENCH_VARIANT of web_apps.py
    workers: int = 1  # uvicorn's --workers (gunicorn always runs WORKERS)

    @property
    def refused(self) -> bool:
        return self.variant.endswith("-refused")

    @property
    def shared(self) -> bool:
        return self.variant.startswith("ratekeeper-shared")

    @property
    def label(self) -> str:
        return self.variant if self.workers == 1 else f"{self.variant}, {self.workers} workers"

    def command(self, port: int) -> list[str]:
        if self.framework == "fastapi":
            uvicorn = [sys.executable, "-m", "uvicorn", "--factory", "web_apps:fastapi_app", "--app-dir", str(HERE)]
            uvicorn += ["--http", "httptools", "--loop", "asyncio"]  # named: auto would fall back to h11 unseen
            return uvicorn if self.workers == 1 else [*uvicorn, "--workers", str(self.workers)]
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "--chdir",
            str(HERE),
            "-w",
            str(WORKERS),
            "-k",
            "sync",
            f"web_apps:{self.framework}_app()",
        ]

    def argv(self, port: int) -> list[str]:
        if self.framework == "fastapi":
            options = ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
        else:
            options = ["-b", f"127.0.0.1:{port}", "--log-level", "warning"]
        return [*self.command(port), *options]


CASES = (
    Case("fastapi", "none"),
    Case("fastapi", "ratekeeper-allowed"),
    Case("fastapi", "ratekeeper-refused"),
    Case("fastapi", "ratekeeper-quiet-allowed"),
    Case("fastapi", "fields-only-allowed"),
    Case("fastapi", "slowapi-allowed"),
    Case("fastapi", "slowapi-refused"),
    Case("fastapi", "ratekeeper-allowed", workers=2),
    Case("fastapi", "ratekeeper-shared-allowed", workers=2),
    Case("flask", "none"),
    Case("flask", "ratekeeper-allowed"),
    Case("flask", "ratekeeper-refused"),
    Case("flask", "ratekeeper-quiet-allowed"),
    Case("flask", "fields-only-allowed"),
    Case("flask", "flask-limiter-allowed"),
    Case("flask", "flask-limiter-refused"),
    Case("django", "none"),
    Case("django", "ratekeeper-allowed"),
    Case("django", "ratekeeper-refused"),
    Case("django", "ratekeeper-quiet-allowed"),
    Case("django", "fields-only-allowed"),
    Case("django", "django-ratelimit-allowed"),
    Case("django", "django-ratelimit-refused"),
)


@dataclass
class Measured:
    case: Case
    requests_per_s: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    non_2xx: list[int] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.requests_per_s)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def pinned(cpu: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that keeps a child (and its workers) on one CPU: the server on one core and wrk on
    the other stop trading places, which on a 2-core machine halves the spread between runs."""
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


# The server's CPU and wrk's, when the machine has two or more (``--no-pin`` turns pinning off).
CPUS: dict[str, int | None] = {"server": None, "wrk": None}


@contextmanager
def shared_region(case: Case) -> Iterator[dict[str, str]]:
    """The environment naming a fresh region for a shared case (none otherwise); the file is removed after."""
    if not case.shared:
        yield {}
        return
    path = f"/dev/shm/ratekeeper-bench-http-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        yield {SHARED_PATH: path}
    finally:
        Path(path).unlink(missing_ok=True)


def start(case: Case, port: int, log: IO[bytes], extra: dict[str, str]) -> subprocess.Popen[bytes]:
    """The case's server, once it answers; it must answer 200 twice, or 200 then 429 when refusing."""
    environment = {**os.environ, "BENCH_VARIANT": case.variant, **extra}
    process = subprocess.Popen(
        case.argv(port), env=environment, stdout=log, stderr=log, preexec_fn=pinned(CPUS["server"])
    )
    url = f"http://127.0.0.1:{port}/"
    headers = dict([HEADER.split(": ")])
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            log.seek(0)
            raise SystemExit(f"{case.framework} {case.variant} exited:\n{log.read().decode(errors='replace')}")
        try:
            first = httpx.get(url, headers=headers).status_code
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                stop(process)
                raise SystemExit(f"{case.framework} {case.variant} did not answer within 30 s") from None
            time.sleep(0.05)
    # gunicorn's two workers each admit their own first request when refusing: at most WORKERS pass.
    statuses = [first] + [httpx.get(url, headers=headers).status_code for _ in range(9)]
    admitted = statuses.count(200)
    expected = admitted <= WORKERS and 429 in statuses if case.refused else admitted == len(statuses)
    if statuses[0] != 200 or not expected:
        stop(process)
        raise SystemExit(f"{case.framework} {case.variant}: unexpected statuses {statuses}")
    if SHARED_PATH in extra and rk._core._inspect_region(extra[SHARED_PATH])["allowed"] < len(statuses):
        stop(process)
        raise SystemExit(f"{case.framework} {case.variant}: the server did not decide in its shared region")
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wrk(port: int, seconds: int, connections: int) -> tuple[float, float, float, int]:
    """``(requests/s, p50 ms, p99 ms, non-2xx responses)`` of one wrk run."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-H", HEADER]
    out = subprocess.run(
        [*command, f"http://127.0.0.1:{port}/"],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=pinned(CPUS["wrk"]),
    ).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None:
        raise SystemExit(f"wrk printed no Requests/sec:\n{out}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return float(rate.group(1)), latency(out, "50"), latency(out, "99"), int(non_2xx.group(1)) if non_2xx else 0


def latency(out: str, percentile: str) -> float:
    """wrk's ``--latency`` line for ``percentile``, in ms (it prints us, ms or s)."""
    found = re.search(rf"^\s+{percentile}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
    if found is None:
        return float("nan")
    return float(found.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[found.group(2)]


def measure(cases: list[Case], runs: int, seconds: int, connections: int) -> list[Measured]:
    results = [Measured(case) for case in cases]
    for run in range(1, runs + 1):
        for result in results:
            port = free_port()
            with tempfile.TemporaryFile() as log, shared_region(result.case) as extra:
                process = start(result.case, port, log, extra)
                try:
                    wrk(port, 1, connections)  # warm-up, discarded
                    rate, p50, p99, non_2xx = wrk(port, seconds, connections)
                finally:
                    stop(process)
            result.requests_per_s.append(rate)
            result.p50_ms.append(p50)
            result.p99_ms.append(p99)
            result.non_2xx.append(non_2xx)
            print(f"  run {run}/{runs} {result.case.framework} {result.case.label}: {rate:,.0f} req/s", file=sys.stderr)
    return results


def median_of(results: list[Measured], framework: str, variant: str, workers: int = 1) -> float | None:
    """The median req/s of a case, or None when it was not run."""
    return next(
        (
            result.median
            for result in results
            if (result.case.framework, result.case.variant, result.case.workers) == (framework, variant, workers)
        ),
        None,
    )


def baseline(results: list[Measured], case: Case) -> float | None:
    """The no-limiter app's req/s with as many workers (None: not run, e.g. uvicorn with 2 workers)."""
    return median_of(results, case.framework, "none", case.workers)


def change(value: float, base: float | None) -> str:
    if base is None:
        return "n/a"
    percent = (value / base - 1) * 100
    return "—" if value == base else f"{'+' if percent >= 0 else MINUS}{abs(percent):.1f} %"


def table(results: list[Measured]) -> list[str]:
    lines = [
        "| framework | case | req/s (median) | min | max | vs no limiter | p50 ms | p99 ms | non-2xx |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        base = baseline(results, result.case)
        lines.append(
            f"| {result.case.framework} | {result.case.label} | {result.median:,.0f} "
            f"| {min(result.requests_per_s):,.0f} | {max(result.requests_per_s):,.0f} "
            f"| {change(result.median, base)} | {statistics.median(result.p50_ms):.2f} "
            f"| {statistics.median(result.p99_ms):.2f} | {int(statistics.median(result.non_2xx)):,} |"
        )
    return lines


def targets(results: list[Measured]) -> list[tuple[bool, str]]:
    verdicts = []
    for result in results:
        framework, workers = result.case.framework, result.case.workers
        memory = median_of(results, framework, "ratekeeper-allowed", workers)
        if result.case.shared and memory is not None:
            ratio = result.median / memory
            verdicts.append(
                (
                    ratio >= 0.97,
                    f"{framework}, {workers} workers: the shared store costs {change(result.median, memory)} "
                    f"against each worker's own memory (>= {MINUS}3 %)",
                )
            )
    for framework in sorted({result.case.framework for result in results}):
        for result in results:
            case = result.case
            if case.framework != framework or not case.variant.startswith("ratekeeper") or case.workers != 1:
                continue
            base = baseline(results, case)
            if base is None:
                continue
            ratio = result.median / base
            if result.case.refused:
                verdicts.append(
                    (
                        ratio >= REFUSED_AT_LEAST[framework],
                        f"{framework}: ratekeeper refused serves {ratio:.3f}x the no-limiter req/s "
                        f"(>= {REFUSED_AT_LEAST[framework]})",
                    )
                )
            else:
                cost = ALLOWED_COST_AT_MOST[framework]
                floor = median_of(results, framework, FIELDS_ONLY)
                if case.variant == "ratekeeper-allowed" and floor is not None:
                    # The fields cost the server the same whoever adds them: ratekeeper's part is above them.
                    verdicts.append(
                        (
                            result.median / floor >= 1 - cost / 100,
                            f"{framework}: ratekeeper-allowed costs {change(result.median, floor)} against the "
                            f"fields alone ({FIELDS_ONLY}; >= {MINUS}{cost} %), {change(result.median, base)} "
                            f"against no limiter, where the fields alone cost {change(floor, base)}",
                        )
                    )
                    continue
                verdicts.append(
                    (
                        ratio >= 1 - cost / 100,
                        f"{framework}: {result.case.variant} costs {change(result.median, base)} (>= {MINUS}{cost} %)",
                    )
                )
    return verdicts


def write_tsv(path: Path, results: list[Measured]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["framework", "case", "run", "requests_per_s", "p50_ms", "p99_ms", "non_2xx"])
        for result in results:
            for run, values in enumerate(
                zip(result.requests_per_s, result.p50_ms, result.p99_ms, result.non_2xx, strict=True), 1
            ):
                rate, p50, p99, non_2xx = values
                writer.writerow(
                    [
                        result.case.framework,
                        result.case.label,
                        run,
                        f"{rate:.2f}",
                        f"{p50:.3f}",
                        f"{p99:.3f}",
                        non_2xx,
                    ]
                )


def versions() -> str:
    names = (
        *("ratekeeper", "fastapi", "starlette", "uvicorn", "slowapi", "flask", "flask-limiter", "gunicorn"),
        *("django", "django-ratelimit"),
    )
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def servers() -> str:
    """Which server and HTTP parser carried each framework's requests."""
    from machine import uvicorn_http, version

    return (
        f"FastAPI: uvicorn {version('uvicorn')}, --http httptools ({uvicorn_http()}), --loop asyncio; "
        f"Flask and Django: gunicorn {version('gunicorn')}, {WORKERS} sync workers (gunicorn's own parser)"
    )


def write_json(args: argparse.Namespace, results: list[Measured], verdicts: list[tuple[bool, str]]) -> None:
    """The figures for ``benches/render.py``: every case's runs, medians and verdicts."""
    from machine import describe, write_results

    rows = [
        {
            "framework": result.case.framework,
            "variant": result.case.variant,
            "workers": result.case.workers,
            "median": result.median,
            "runs": result.requests_per_s,
            "p50_ms": statistics.median(result.p50_ms),
            "p99_ms": statistics.median(result.p99_ms),
            "non_2xx": int(statistics.median(result.non_2xx)),
        }
        for result in results
    ]
    data = {"rows": rows, "verdicts": [{"passed": passed, "text": text} for passed, text in verdicts]}
    packages = ["fastapi", "starlette", "uvicorn", "httptools", "slowapi", "flask", "flask-limiter", "gunicorn"]
    machine = describe([*packages, "django", "django-ratelimit"], http=servers())
    settings = {
        "runs": args.runs,
        "seconds": args.seconds,
        "connections": args.connections,
        "pinned": CPUS["server"] is not None,
    }
    write_results(args.json, "http_bench", data, machine, **settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per case; the median is reported (default 5)")
    parser.add_argument("--seconds", type=int, default=5, help="seconds of wrk per run (default 5)")
    parser.add_argument("--connections", type=int, default=50, help="wrk connections (default 50)")
    parser.add_argument("--only", choices=("fastapi", "flask", "django"), help="one framework")
    parser.add_argument(
        "--variants",
        help="only these web_apps.py variants, comma-separated (e.g. none,ratekeeper-allowed); default all",
    )
    parser.add_argument("--quick", action="store_true", help="1 run of 1 s")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="let the OS place the server and wrk (default: one CPU each)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "http_bench.tsv", help="the TSV of every run")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.seconds = 1, 1
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) >= 2:
        CPUS.update(server=cpus[-1], wrk=cpus[0])
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    if importlib.util.find_spec("httptools") is None:
        print("httptools is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    variants = set(args.variants.split(",")) if args.variants else None
    cases = [
        case for case in CASES if args.only in (None, case.framework) and (variants is None or case.variant in variants)
    ]
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}", file=sys.stderr)
    print(versions(), file=sys.stderr)
    print(servers(), file=sys.stderr)
    runs = f"{args.runs} run(s) x {args.seconds} s per case, wrk -t1 -c{args.connections}, median reported"
    if CPUS["server"] is not None:
        runs += f"; server on CPU {CPUS['server']}, wrk on CPU {CPUS['wrk']}"
    print(runs, file=sys.stderr)

    results = measure(cases, args.runs, args.seconds, args.connections)
    write_tsv(args.out, results)
    print(f"\n{runs}\n")
    print("\n".join(table(results)))
    print()
    verdicts = targets(results)
    for passed, text in verdicts:
        print(f"{'PASS' if passed else 'MISS'} {text}")
    print(f"\nTSV: {args.out}")
    write_json(args, results, verdicts)
    return 1 if args.check and not all(passed for passed, _ in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
