"""Adaptive concurrency against a real server: wrk with 4x a service's capacity in connections, with and
without an adaptive limit in front of it.

The service is an endpoint whose latency grows with its concurrency: an ``asyncio.Semaphore(capacity)``
around a sleep of ``service`` seconds, so it serves at most ``capacity / service`` requests a second and
queues the rest (a request's latency is its wait for the semaphore plus the sleep). uvicorn (one worker)
serves it behind ``ratekeeper.asgi.RateLimitMiddleware`` with one rule, ``Limit(adaptive=...)`` and
``concurrency_status=503``; the case ``none`` has no middleware. An outer ASGI wrapper times every request
in the server, by status, so the admitted requests' latency and the refusals' are told apart (wrk's own
distribution mixes them). Each case: a warm-up of wrk (discarded, the limit learns), then
``wrk -t2 -c<4 x capacity> -d<seconds>s``; the unloaded latency is one connection's p50.

Each case runs ``--repeats`` times (3), interleaved with the others; its run of median throughput is reported.
Reports, per case: served requests/s against the capacity, admitted p50/p99 against the unloaded latency,
refusals/s with their p50/p99 (answered at once), their status and whether they carry ``Retry-After``.

Usage
    python benches/adaptive_bench.py                          # 10 s a case
    python benches/adaptive_bench.py --quick                  # smoke run: 2 s a case
    python benches/adaptive_bench.py --json benches/results/adaptive.json

Needs ``wrk`` (Debian: ``apt-get install wrk``) and uvicorn (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from machine import describe, uvicorn_http, write_results

CASES = ("none", "gradient", "aimd")


def make_app(case: str, capacity: int, service: float) -> Any:
    """The service, behind the middleware (unless ``case`` is ``none``), inside the timing wrapper."""
    import ratekeeper as rk
    from ratekeeper.asgi import RateLimitMiddleware

    records: list[tuple[int, float, bool]] = []
    semaphore: list[asyncio.Semaphore] = []

    async def service_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not semaphore:
            semaphore.append(asyncio.Semaphore(capacity))
        async with semaphore[0]:
            await asyncio.sleep(service)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"served"})

    limiter = None
    app: Any = service_app
    if case != "none":
        limit = rk.Limit(adaptive=case)
        limiter = rk.Limiter(rules=[rk.Rule("^/work", "work", limits=[limit])])
        app = RateLimitMiddleware(service_app, limiter=limiter, concurrency_status=503)

    async def timed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/stats":
            body = json.dumps({"records": records, "limiter": None if limiter is None else limiter.stats()}).encode()
            records.clear()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        start = time.perf_counter()
        seen: dict[str, Any] = {}

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                seen["retry"] = any(name.lower() == b"retry-after" for name, _ in message.get("headers", ()))
            await send(message)

        await app(scope, receive, watch)
        records.append((seen.get("status", 0), time.perf_counter() - start, seen.get("retry", False)))

    return timed


def serve(case: str, port: int, capacity: int, service: float) -> None:
    import uvicorn

    uvicorn.run(make_app(case, capacity, service), host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the server ended before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the server did not listen within 20 s")


def wrk(port: int, seconds: int, connections: int) -> str:
    threads = min(2, connections)
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", f"http://127.0.0.1:{port}/work"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as answer:
        return dict(json.loads(answer.read()))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def run_case(case: str, capacity: int, service: float, seconds: int, warmup: int) -> dict[str, Any]:
    port = free_port()
    command = [sys.executable, __file__, "--serve", case, "--port", str(port)]
    command += ["--capacity", str(capacity), "--service", str(service)]
    process = subprocess.Popen(command)
    try:
        wait_for(port, process)
        wrk(port, 2, 1)
        unloaded = [d for s, d, _ in stats(port)["records"] if s == 200]
        wrk(port, warmup, 4 * capacity)
        stats(port)  # the warm-up's records, discarded
        output = wrk(port, seconds, 4 * capacity)
        measured = stats(port)
    finally:
        process.terminate()
        process.wait(timeout=20)
    records = measured["records"]
    served = [d for s, d, _ in records if s == 200]
    refused = [(s, d, r) for s, d, r in records if s != 200]
    limit = None
    if measured["limiter"] is not None:
        limit = measured["limiter"]["groups"]["work"]["adaptive"][0]["limit"]
    rate = re.search(r"Requests/sec:\s*([\d.]+)", output)
    return {
        "case": case,
        "unloaded_ms": percentile(unloaded, 0.5) * 1000,
        "served_per_s": len(served) / seconds,
        "admitted_p50_ms": percentile(served, 0.5) * 1000,
        "admitted_p99_ms": percentile(served, 0.99) * 1000,
        "refused_per_s": len(refused) / seconds,
        "refused_p50_ms": percentile([d for _, d, _ in refused], 0.5) * 1000 if refused else None,
        "refused_p99_ms": percentile([d for _, d, _ in refused], 0.99) * 1000 if refused else None,
        "refusal_statuses": sorted({s for s, _, _ in refused}),
        "refusals_with_retry_after": all(r for _, _, r in refused) if refused else None,
        "wrk_requests_per_s": float(rate.group(1)) if rate else None,
        "limit": limit,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 s a case, 1 s of warm-up")
    parser.add_argument("--seconds", type=int, default=10, help="seconds of wrk a case (default 10)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each case, interleaved (default 3)")
    parser.add_argument("--capacity", type=int, default=20, help="the service's concurrency (default 20)")
    parser.add_argument("--service", type=float, default=0.05, help="seconds a request takes (default 0.05)")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    parser.add_argument("--serve", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.port, args.capacity, args.service)
        return 0
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk (Debian: apt-get install wrk)")
    seconds, warmup, repeats = (2, 1, 1) if args.quick else (args.seconds, 3, args.repeats)
    # Interleaved (every case once, then again), so that a noisy neighbour spreads over the cases; each case
    # reports its run of median throughput, whole (its latencies are that run's).
    runs: dict[str, list[dict[str, Any]]] = {case: [] for case in CASES}
    for _ in range(repeats):
        for case in CASES:
            runs[case].append(run_case(case, args.capacity, args.service, seconds, warmup))
    rows = []
    for case in CASES:
        ordered = sorted(runs[case], key=lambda row: row["served_per_s"])
        median = dict(ordered[len(ordered) // 2])
        median["served_per_s_runs"] = [row["served_per_s"] for row in runs[case]]
        rows.append(median)
    maximum = args.capacity / args.service
    print(f"capacity {args.capacity} x {args.service * 1000:.0f} ms: at most {maximum:.0f} req/s")
    for row in rows:
        print(
            f"{row['case']:>9}: served {row['served_per_s']:7.0f}/s ({row['served_per_s'] / maximum:5.1%}), "
            f"admitted p50 {row['admitted_p50_ms']:6.1f} ms p99 {row['admitted_p99_ms']:6.1f} ms "
            f"(unloaded {row['unloaded_ms']:.1f} ms), refused {row['refused_per_s']:7.0f}/s "
            f"p99 {row['refused_p99_ms'] or 0:.1f} ms {row['refusal_statuses']} limit {row['limit']}"
        )
    data = {
        "capacity": args.capacity,
        "service_ms": args.service * 1000,
        "connections": 4 * args.capacity,
        "max_per_s": maximum,
        "cases": rows,
    }
    machine = describe(["uvicorn"], http=f"uvicorn {uvicorn_http()}")
    write_results(args.json, "adaptive", data, machine, seconds=seconds, repeats=repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
