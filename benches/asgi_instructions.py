"""What the ASGI middleware costs a FastAPI request on uvicorn, counted: instructions and simulated cache
misses per request under callgrind, where wrk's req/s on a shared 2-core machine varies by more than the
cost being measured.

What is measured
    The apps of ``benches/web_apps.py`` served by uvicorn (one process, ``--http auto``) under
    ``valgrind --tool=callgrind --cache-sim=yes``, instrumentation off while the server starts and serves
    ``--warmup`` requests, then on for ``--requests`` requests sent one after another on one keep-alive
    connection (``X-Account-ID: bench``). Per request: instructions (Ir), simulated L1 misses (I1 + D1) and
    last-level misses (LL), and the estimated cycles ``Ir + 10 x L1 + 100 x LL`` (the weighting cachegrind's
    documentation and iai use). With one hash seed the counts repeat to within 0.3 % from run to run;
    ``--repeat`` runs each variant again, interleaved, and keeps the median. The variants:

      none                      no limiter
      fields-only-allowed       no limiter: a pure ASGI middleware adding the two fields an allowed request
                                gets, as constants. What the fields themselves cost the server (uvicorn
                                checks each header line with two regular expressions), and the floor of any
                                limiter that sends them
      ratekeeper-quiet-allowed  ratekeeper, fields on 429s only: the middleware and its decision
      ratekeeper-allowed        ratekeeper, the fields on every response (the default)
      ratekeeper-refused        ratekeeper, every request after the first answered 429
      slowapi-allowed           slowapi's documented set-up

Targets
    ratekeeper-quiet-allowed costs at most 2 % more estimated cycles than none (the middleware and the
    decision); ratekeeper-allowed at most 2 % more than fields-only-allowed (ratekeeper's own part of a
    request that carries the fields); a refusal at most 1/1.2 of none's cycles. Printed as PASS / MISS;
    with ``--check`` a miss is exit status 1.

Usage
    python benches/asgi_instructions.py                       # 1,000 requests a variant, one run
    python benches/asgi_instructions.py --repeat 3            # the median of 3 runs
    python benches/asgi_instructions.py --variants none,ratekeeper-allowed --requests 2000

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
VARIANTS = (
    "none",
    "fields-only-allowed",
    "ratekeeper-quiet-allowed",
    "ratekeeper-allowed",
    "ratekeeper-refused",
    "slowapi-allowed",
)
MINUS = "\N{MINUS SIGN}"
L1_CYCLES, LL_CYCLES = 10, 100
OWN_COST_AT_MOST = 0.02  # of the cycles of the request without ratekeeper
REFUSED_AT_MOST = 1 / 1.2  # of a bare request's cycles: refusals served at >= 1.2x its rate


@dataclass(frozen=True)
class Counted:
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


def send(port: int, n: int, refused: bool) -> None:
    """``n`` requests one after another on one keep-alive connection, each answered as the variant must."""
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


def count(variant: str, requests: int, warmup: int) -> Counted:
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        command = [
            *("valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no"),
            f"--callgrind-out-file={out}",
            *(sys.executable, "-m", "uvicorn", "--factory", "web_apps:fastapi_app", "--app-dir", str(HERE)),
            *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"),
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
                        raise SystemExit(f"{variant}: the server did not start under valgrind") from None
                    time.sleep(0.5)
            send(port, warmup, refused)
            subprocess.run(["callgrind_control", "--instr=on", str(server.pid)], check=True, capture_output=True)
            send(port, requests, refused)
            subprocess.run(["callgrind_control", "--instr=off", str(server.pid)], check=True, capture_output=True)
        finally:
            server.terminate()
            server.wait()
        text = next(Path(scratch).glob("callgrind.out*")).read_text()
    events = re.search(r"^events: (.*)$", text, re.MULTILINE)
    totals = re.search(r"^totals: (.*)$", text, re.MULTILINE)
    if events is None or totals is None:
        raise SystemExit(f"{variant}: callgrind wrote no totals")
    total = dict(zip(events.group(1).split(), map(int, totals.group(1).split()), strict=True))
    return Counted(
        variant,
        total["Ir"] / requests,
        (total["I1mr"] + total["D1mr"] + total["D1mw"]) / requests,
        (total["ILmr"] + total["DLmr"] + total["DLmw"]) / requests,
    )


def change(value: float, base: float) -> str:
    percent = (value / base - 1) * 100
    return f"{'+' if percent >= 0 else MINUS}{abs(percent):.2f} %"


def table(counted: dict[str, Counted]) -> list[str]:
    base = counted.get("none")
    lines = [
        "| variant | instructions | L1 misses | LL misses | est. cycles | vs none |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in counted.values():
        versus = change(c.cycles, base.cycles) if base is not None and c is not base else "—"
        lines.append(
            f"| {c.variant} | {c.instructions:,.0f} | {c.l1_misses:,.0f} | {c.ll_misses:,.1f} "
            f"| {c.cycles:,.0f} | {versus} |"
        )
    return lines


def verdicts(counted: dict[str, Counted]) -> list[tuple[bool, str]]:
    found: list[tuple[bool, str]] = []
    none, floor = counted.get("none"), counted.get("fields-only-allowed")
    quiet, allowed = counted.get("ratekeeper-quiet-allowed"), counted.get("ratekeeper-allowed")
    refused = counted.get("ratekeeper-refused")
    if none is not None and quiet is not None:
        ratio = quiet.cycles / none.cycles
        found.append(
            (
                ratio <= 1 + OWN_COST_AT_MOST,
                f"the middleware and its decision cost {change(quiet.cycles, none.cycles)} (<= +2 %)",
            )
        )
    if floor is not None and allowed is not None:
        ratio = allowed.cycles / floor.cycles
        found.append(
            (
                ratio <= 1 + OWN_COST_AT_MOST,
                f"with the fields on, ratekeeper costs {change(allowed.cycles, floor.cycles)} "
                "over the fields alone (<= +2 %)",
            )
        )
    if none is not None and refused is not None:
        ratio = refused.cycles / none.cycles
        found.append(
            (ratio <= REFUSED_AT_MOST, f"a refusal costs {ratio:.3f}x a bare request (<= {REFUSED_AT_MOST:.3f})")
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="counted requests a variant (default 1,000)")
    parser.add_argument("--warmup", type=int, default=300, help="requests before counting (default 300)")
    parser.add_argument("--repeat", type=int, default=1, help="runs a variant, interleaved; the median is kept")
    parser.add_argument("--variants", help=f"comma-separated, from {', '.join(VARIANTS)}; default all")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
            return 2
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants: {', '.join(unknown)}")
    runs: dict[str, list[Counted]] = {variant: [] for variant in variants}
    for run in range(1, args.repeat + 1):
        for variant in variants:
            runs[variant].append(count(variant, args.requests, args.warmup))
            print(f"  run {run}/{args.repeat} {variant}: {runs[variant][-1].cycles:,.0f} est. cycles", file=sys.stderr)
    counted = {variant: sorted(found, key=lambda c: c.cycles)[len(found) // 2] for variant, found in runs.items()}
    print(
        f"\n{args.requests:,} requests a variant under callgrind, median of {args.repeat} run(s); "
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
