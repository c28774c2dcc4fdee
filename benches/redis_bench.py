"""What a decision costs with limits kept in Redis: ratekeeper's Redis backend against peers' Redis storages.

What is measured
    One real ``redis-server`` on a free loopback port (started and stopped here, no persistence); every
    library on it, each under its own keys, with a limit no call reaches (10**6 per second), checked
    after each measurement (a refusal fails the run).

    One caller, blocking (microseconds per decision, lower is better):
      redis-py PING              the yardstick: one round trip of redis-py, the client every peer uses
      ratekeeper exact           lim.allow(peer): one FCALL, from Rust, waited for without the GIL
      ratekeeper sync            lim.allow(peer) in sync mode: decided in memory, usage pushed every 1 s
      ratekeeper memory          lim.allow(peer) without a backend: the reference for sync mode
      limits FixedWindow         limits 5.x, RedisStorage (redis-py)
      limits MovingWindow        the same, moving window
      throttled-py GCRA          throttled-py 3.x, RedisStore
      pyrate-limiter             pyrate-limiter 4.x, RedisBucket (a sliding log in a sorted set)

    Server time per decision (µs, lower is better), per algorithm: the decision script's own time
    (``INFO commandstats``: FCALL or EVALSHA, the commands it runs included) and the main thread's CPU
    (``used_cpu_*_main_thread``: parsing and replying too), over the calls of one run after
    ``CONFIG RESETSTAT``. At scale the server's CPU is the bill: this is what one decision costs it.

    64 concurrent asyncio callers on one event loop (decisions per second, higher is better):
      redis-py PING              redis.asyncio, 64 tasks
      ratekeeper exact           await lim.aallow(peer)
      limits FixedWindow         limits.aio, RedisStorage(implementation="redispy")
      throttled-py GCRA          throttled.asyncio, RedisStore

How it is timed
    Blocking: N calls in a loop between two perf_counter reads, per run; runs are interleaved (run 1
    of every case, then run 2, ...) so that a shared machine's drift hits every case alike; the median
    of the runs is reported, with the minimum. asyncio: 64 tasks each make N/64 calls; the wall time of
    the whole gather is the run's. A warm-up of 200 calls precedes each run.

Targets (issue 10, the 2-core machine)
    exact mode, one caller: less time per decision than a redis-py PING;
    64 asyncio callers: at least 5x the decisions/s of the fastest peer;
    sync mode: at most 2x the in-memory allow.

Modes (issue 38; benches/redis_modes.py): lease mode against exact and sync mode, side by side
    Every process below is a fresh interpreter (multiprocessing, start method spawn) with its own
    rk.Limiter on the same server and prefix: exact (one script call per decision), sync
    (sync_interval 1 s), lease (rk.Redis(mode="lease"), its default span 0.1 s), and in part 1 memory
    (each process its own in-memory limiter: the reference); timeout 1 s, on_error="raise". Each is
    made and warmed (one decision on another peer opens the connection) before the timed part.

    1. Decisions per second: 4 processes released together (a barrier), each making 4,000,000
       decisions as fast as it can (or as many as fit in 4 s: exact mode stops there), limit 10**9 per
       hour (none refused; checked). hot key: every decision for one peer; 100k keys: each for a peer
       drawn from 100,000 (a sequence of 400,000 draws, seeded per process, cycled: the same in every
       mode). Reported: decisions/s of each process over its own loop, the median of the 4, the median
       of 3 runs; round trips per 1,000 decisions (stats()'s backend_seconds count: the decisions' own
       and lease mode's prefetches); the calls the server took per 1,000 decisions (INFO commandstats,
       reset after the warm-up, read once the processes exited: the scripts, lease give-backs included,
       and sync mode's INCRBY pushes). Targets (issue 38): lease mode within 2x of memory and at least
       20x exact mode, in each scenario.
    2. Admitted vs limit: 4 processes on the hot key, 2,000/s, released together, each offering as fast
       as it can for 3 s, each admission stamped (time.time_ns) just before and just after its call.
       fixed_window: the windows are those Redis held (the key's state, read every 2 ms: where each
       window ends, on the server's clock, which is this machine's); an admission counts in a window
       when its call lay wholly inside it ("certain"; "touched" adds those straddling an edge, at most
       one per process and edge). Sync mode's windows are each process's own: the fleet's are taken
       from the admissions (the first opens one, the first after its end the next). gcra: at each
       admission's end, the admissions so far against burst + rate x (that instant - the first call's
       start). Reported: the max ratio (<= 1.0 in exact and lease mode; sync mode's stated bound is
       1 + min(N - 1, R x 2 x interval / L), R the rate admitted), the use of the limit (admitted /
       allowed, over the whole windows or the run).
    3. Demand that moves: A alone on the hot key (1,000/s GCRA, burst 1,000) for 1.5 s, as fast as it
       can or paced at 500/s; then A stops (alive: its sweeper runs) and B, made and waiting, starts as
       fast as it can: B's admissions over its first 0.5 s (from its first call) against what the limit
       allows over it (500; 1,500 after the paced A, which left the bucket full), the shortfall in units
       and in ms of the limit.
    4. A killed holder: A as in 3 for 1.5 s, then SIGKILLed; B, waiting, starts once A is reaped. From
       the kill (time.monotonic_ns, one clock for every process): ms to B's first admission, ms to the
       first 100 ms window (1 ms steps) in which B is admitted the limit's units less one (the full
       rate again), B's admissions in the first second and what the limit allowed that B did not get;
       3 kills, medians, against the lease span.
    --quick: 400,000 decisions (a sequence of 100,000) or 1 s, 1 run; 1.5 s of offering; A busy 0.7 s;
    1 kill.

Usage
    python benches/redis_bench.py            # 5 runs of 2,000 calls per case
    python benches/redis_bench.py --quick    # 1 run of 500 calls
    python benches/redis_bench.py --runs 5 --calls 10000 --json results.json   # make bench's settings
    python benches/redis_bench.py --modes-only [--quick]   # the modes alone
    python benches/redis_bench.py --no-modes              # the libraries alone

Needs ``redis-server`` (Debian: ``apt-get install redis-server``) and the bench extra.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import functools
import importlib.metadata
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ratekeeper as rk
import redis_modes

HERE = Path(__file__).resolve().parent
LIMIT = "1000000/second"
PEER = "bench-peer"
TASKS = 64

Call = Callable[[], Any]
AsyncCall = Callable[[], Awaitable[Any]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    """redis-server on a free loopback port, no persistence; ready once it answers PING (asked over a socket:
    ``.ci/pgo_train.py`` starts one too, with no redis-py)."""

    def __init__(self) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise SystemExit("redis-server is not installed (Debian: apt-get install redis-server)")
        self.port = free_port()
        self.directory = tempfile.TemporaryDirectory()
        command = [executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            [*command, "--dir", self.directory.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not self._pong():
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit("redis-server did not answer PING within 10 s")
            time.sleep(0.02)

    def _pong(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as client:
                client.sendall(b"PING\r\n")
                return client.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        self.directory.cleanup()


@dataclass
class Case:
    name: str
    setup: Callable[[Server], Any]
    #: Whether a call's result means "admitted" (PING's does not decide anything).
    decides: bool = True
    seconds: list[float] = field(default_factory=list)
    note: str = ""


def admitted(result: Any) -> bool:
    """Each library's way of saying yes."""
    if isinstance(result, bool):
        return result
    if hasattr(result, "limited"):  # throttled-py
        return not result.limited
    return bool(result)


# One caller, blocking -------------------------------------------------------------------------------


def redis_ping(server: Server) -> Call:
    import redis

    return redis.Redis(port=server.port).ping


def ratekeeper_exact(server: Server) -> Call:
    lim = rk.Limiter(LIMIT.replace("second", "s"), backend=rk.Redis(server.url, prefix="bench:rk:", on_error="raise"))
    return lambda: lim.allow(PEER)


def ratekeeper_sync(server: Server) -> Call:
    backend = rk.Redis(server.url, mode="sync", sync_interval=1.0, prefix="bench:rksync:")
    lim = rk.Limiter(LIMIT.replace("second", "s"), backend=backend)
    return lambda: lim.allow(PEER)


def ratekeeper_memory(server: Server) -> Call:
    lim = rk.Limiter(LIMIT.replace("second", "s"))
    return lambda: lim.allow(PEER)


def limits_strategy(name: str) -> Callable[[Server], Call]:
    def setup(server: Server) -> Call:
        import limits
        from limits.storage import RedisStorage

        storage = RedisStorage(f"redis://127.0.0.1:{server.port}", key_prefix=f"bench-limits-{name}")
        strategy = getattr(limits.strategies, f"{name}RateLimiter")(storage)
        item = limits.parse(LIMIT)
        return lambda: strategy.hit(item, PEER)

    return setup


def throttled_gcra(server: Server) -> Call:
    from throttled import RateLimiterType, RedisStore, Throttled, per_sec

    store = RedisStore(server=f"{server.url}")
    throttle = Throttled(
        key=f"bench-throttled-{PEER}", using=RateLimiterType.GCRA.value, quota=per_sec(10**6), store=store, timeout=-1
    )
    return lambda: throttle.limit()


def pyrate_redis(server: Server) -> Call:
    import redis
    from pyrate_limiter import Duration, Limiter, Rate, RedisBucket

    bucket = RedisBucket.init([Rate(10**6, Duration.SECOND)], redis.Redis(port=server.port), "bench-pyrate")
    limiter = Limiter(bucket)
    return lambda: limiter.try_acquire(PEER)


BLOCKING = [
    Case("redis-py PING", redis_ping, decides=False),
    Case("ratekeeper exact", ratekeeper_exact),
    Case("ratekeeper sync", ratekeeper_sync),
    Case("ratekeeper memory", ratekeeper_memory),
    Case("limits FixedWindow", limits_strategy("FixedWindow")),
    Case("limits MovingWindow", limits_strategy("MovingWindow")),
    Case("throttled-py GCRA", throttled_gcra),
    Case("pyrate-limiter RedisBucket", pyrate_redis),
]

# 64 asyncio callers ---------------------------------------------------------------------------------


def async_redis_ping(server: Server) -> AsyncCall:
    import redis.asyncio

    client = redis.asyncio.Redis(port=server.port)
    return client.ping


def async_ratekeeper(server: Server) -> AsyncCall:
    lim = rk.Limiter(LIMIT.replace("second", "s"), backend=rk.Redis(server.url, prefix="bench:rka:", on_error="raise"))
    return lambda: lim.aallow(PEER)


def async_limits(server: Server) -> AsyncCall:
    import limits
    from limits.aio.storage import RedisStorage
    from limits.aio.strategies import FixedWindowRateLimiter

    storage = RedisStorage(
        f"async+redis://127.0.0.1:{server.port}", implementation="redispy", key_prefix="bench-limits-aio"
    )
    strategy = FixedWindowRateLimiter(storage)
    item = limits.parse(LIMIT)
    return lambda: strategy.hit(item, PEER)


def async_throttled(server: Server) -> AsyncCall:
    from throttled.asyncio import RateLimiterType, RedisStore, Throttled, per_sec

    store = RedisStore(server=server.url)
    throttle = Throttled(
        key=f"bench-throttled-aio-{PEER}",
        using=RateLimiterType.GCRA.value,
        quota=per_sec(10**6),
        store=store,
        timeout=-1,
    )
    return throttle.limit


CONCURRENT = [
    Case("redis-py asyncio PING", async_redis_ping, decides=False),
    Case("ratekeeper exact", async_ratekeeper),
    Case("limits FixedWindow (aio)", async_limits),
    Case("throttled-py GCRA (asyncio)", async_throttled),
]

# Timing ---------------------------------------------------------------------------------------------


def time_blocking(call: Call, calls: int, decides: bool) -> float:
    for _ in range(200):
        call()
    refused = 0
    start = time.perf_counter()
    for _ in range(calls):
        result = call()
        refused += decides and not admitted(result)
    elapsed = time.perf_counter() - start
    if refused:
        raise SystemExit(f"{refused} of {calls} calls were refused: the bench's limit must admit every call")
    return elapsed


async def time_concurrent(call: AsyncCall, calls: int, decides: bool) -> float:
    async def worker(n: int) -> int:
        refused = 0
        for _ in range(n):
            result = await call()
            refused += decides and not admitted(result)
        return refused

    await asyncio.gather(*(worker(200 // TASKS + 1) for _ in range(TASKS)))
    start = time.perf_counter()
    refused = sum(await asyncio.gather(*(worker(calls // TASKS) for _ in range(TASKS))))
    elapsed = time.perf_counter() - start
    if refused:
        raise SystemExit(f"{refused} calls were refused: the bench's limit must admit every call")
    return elapsed


def measure(server: Server, runs: int, calls: int) -> tuple[list[Case], list[Case]]:
    ready: list[tuple[Case, Call]] = []
    for case in BLOCKING:
        try:
            ready.append((case, case.setup(server)))
        except Exception as error:  # a peer that cannot be set up is skipped, with the reason
            case.note = f"skipped: {type(error).__name__}: {error}"
    loop = asyncio.new_event_loop()
    ready_async: list[tuple[Case, AsyncCall]] = []
    for case in CONCURRENT:
        try:
            ready_async.append((case, loop.run_until_complete(_made(case, server))))
        except Exception as error:
            case.note = f"skipped: {type(error).__name__}: {error}"
    for run in range(runs):
        for case, call in ready:
            case.seconds.append(time_blocking(call, calls, case.decides))
        for case, acall in ready_async:
            case.seconds.append(loop.run_until_complete(time_concurrent(acall, calls, case.decides)))
        print(f"  run {run + 1}/{runs} done", file=sys.stderr)
    loop.close()
    return [c for c, _ in ready], [c for c, _ in ready_async]


async def _made(case: Case, server: Server) -> AsyncCall:
    """Async set-ups run inside the loop (some clients bind to the running loop)."""
    made: AsyncCall = case.setup(server)
    return made


# Server time ----------------------------------------------------------------------------------------

#: Every algorithm exact mode decides, with a limit no call of a run reaches (a sliding log keeps a
#: member per unit in Redis, so its limit is smaller).
SERVER_ALGORITHMS = {
    "gcra": LIMIT,
    "token_bucket": LIMIT,
    "sliding_window": LIMIT,
    "fixed_window": LIMIT,
    "leaky_bucket": LIMIT,
    "sliding_log": "100000/second",
}
SCRIPT_COMMANDS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval")


def server_cases(server: Server) -> list[tuple[str, Call]]:
    """Each algorithm in exact mode, then limits' strategies (skipped when limits is missing)."""
    cases: list[tuple[str, Call]] = []
    for algorithm, limit in SERVER_ALGORITHMS.items():
        backend = rk.Redis(server.url, prefix=f"bench:server:{algorithm}:", on_error="raise")
        lim = rk.Limiter(limit.replace("second", "s"), algorithm=algorithm, backend=backend)
        cases.append((f"ratekeeper {algorithm}", functools.partial(lim.allow, PEER)))
    for name in ("FixedWindow", "MovingWindow", "SlidingWindowCounter"):
        try:
            cases.append((f"limits {name}", limits_strategy(name)(server)))
        except ImportError as error:
            print(f"limits {name}: skipped ({error})", file=sys.stderr)
    return cases


def server_time(server: Server, calls: int) -> list[tuple[str, float, float]]:
    """(case, script µs per decision, main-thread CPU µs per decision), each over ``calls`` decisions."""
    import redis

    admin = redis.Redis(port=server.port)
    rows = []
    for name, call in server_cases(server):
        for _ in range(200):
            call()
        admin.config_resetstat()
        before = admin.info("cpu")
        for _ in range(calls):
            if not admitted(call()):
                raise SystemExit(f"{name}: a call was refused")
        after = admin.info("cpu")
        stats = admin.info("commandstats")
        script_us = sum(stats[c]["usec"] for c in SCRIPT_COMMANDS if c in stats) / calls
        cpu = sum(after[f"used_cpu_{k}_main_thread"] - before[f"used_cpu_{k}_main_thread"] for k in ("user", "sys"))
        rows.append((name, script_us, cpu / calls * 1e6))
    return rows


def report_server_time(rows: list[tuple[str, float, float]]) -> None:
    print("\n**Server time per decision** (µs; one caller)\n")
    print("| decision | script µs | main thread CPU µs |")
    print("|---|---:|---:|")
    for name, script_us, cpu_us in rows:
        print(f"| {name} | {script_us:.1f} | {cpu_us:.1f} |")


# Report ---------------------------------------------------------------------------------------------


def versions() -> str:
    names = ["ratekeeper", "redis", "limits", "throttled-py", "pyrate-limiter"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    server = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    return ", ".join(found) + f", redis-server {server.removeprefix('v=')}"


def report(blocking: list[Case], concurrent: list[Case], calls: int) -> list[tuple[bool, str]]:
    per_call = {c.name: [s / calls * 1e6 for s in c.seconds] for c in blocking}
    ping = statistics.median(per_call["redis-py PING"])
    print("\n**One caller, blocking** (µs per decision; median of runs, min)\n")
    print("| library | µs (median) | min | vs PING |")
    print("|---|---:|---:|---:|")
    for case in blocking:
        values = per_call[case.name]
        median = statistics.median(values)
        digits = 1 if median >= 1 else 3
        print(f"| {case.name} | {median:,.{digits}f} | {min(values):,.{digits}f} | {median / ping:.2f}x |")
    rates = {c.name: [calls // TASKS * TASKS / s for s in c.seconds] for c in concurrent}
    print(f"\n**{TASKS} asyncio callers** (decisions/s; median of runs, max)\n")
    print("| library | decisions/s (median) | max |")
    print("|---|---:|---:|")
    for case in concurrent:
        values = rates[case.name]
        print(f"| {case.name} | {statistics.median(values):,.0f} | {max(values):,.0f} |")
    for case in [*BLOCKING, *CONCURRENT]:
        if case.note:
            print(f"\n{case.name}: {case.note}")

    verdicts = []
    exact = statistics.median(per_call["ratekeeper exact"])
    verdicts.append((exact < ping, f"exact mode, one caller: {exact:.1f} µs per decision vs PING {ping:.1f} µs (< 1x)"))
    if "ratekeeper sync" in per_call and "ratekeeper memory" in per_call:
        ratio = statistics.median(per_call["ratekeeper sync"]) / statistics.median(per_call["ratekeeper memory"])
        verdicts.append((ratio <= 2.0, f"sync mode: {ratio:.2f}x the in-memory allow (<= 2x)"))
    peers = [statistics.median(v) for name, v in rates.items() if "ratekeeper" not in name and "PING" not in name]
    if peers and "ratekeeper exact" in rates:
        ratio = statistics.median(rates["ratekeeper exact"]) / max(peers)
        verdicts.append((ratio >= 5.0, f"{TASKS} asyncio callers: {ratio:.1f}x the fastest peer's decisions/s (>= 5x)"))
    print()
    for passed, text in verdicts:
        print(f"{'PASS' if passed else 'MISS'} {text}")
    return verdicts


def write_tsv(path: Path, blocking: list[Case], concurrent: list[Case], calls: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["scenario", "library", "run", "calls", "seconds"])
        for scenario, cases in (("blocking", blocking), (f"asyncio-{TASKS}", concurrent)):
            for case in cases:
                for run, seconds in enumerate(case.seconds, 1):
                    writer.writerow([scenario, case.name, run, calls, f"{seconds:.6f}"])


def write_json(
    args: argparse.Namespace,
    blocking: list[Case],
    concurrent: list[Case],
    server_rows: list[tuple[str, float, float]],
    verdicts: list[tuple[bool, str]],
    modes: redis_modes.Modes | None = None,
) -> None:
    """The figures for ``benches/render.py``: medians per case, server time, verdicts; and the modes part's
    figures and verdicts under ``modes``."""
    from machine import write_results

    per_call = {c.name: [s / args.calls * 1e6 for s in c.seconds] for c in blocking}
    rates = {c.name: [args.calls // TASKS * TASKS / s for s in c.seconds] for c in concurrent}
    data = {
        "blocking": [
            {"name": name, "median_us": statistics.median(values), "min_us": min(values)}
            for name, values in per_call.items()
        ],
        "concurrent": [
            {"name": name, "median_per_s": statistics.median(values), "max_per_s": max(values)}
            for name, values in rates.items()
        ],
        "tasks": TASKS,
        "server_time": [{"name": name, "script_us": script, "cpu_us": cpu} for name, script, cpu in server_rows],
        "verdicts": [{"passed": passed, "text": text} for passed, text in verdicts],
        "notes": [f"{case.name}: {case.note}" for case in [*BLOCKING, *CONCURRENT] if case.note],
    }
    if modes is not None:
        data["modes"] = redis_modes.figures(modes)
    write_results(args.json, "redis", data, machine_block(), runs=args.runs, calls=args.calls)


def write_modes_json(args: argparse.Namespace, modes: redis_modes.Modes | None) -> None:
    """``--modes-only``: the modes part's figures alone (not the ``redis`` results render.py reads)."""
    from machine import write_results

    if modes is not None:
        write_results(
            args.json, "redis_modes", {"modes": redis_modes.figures(modes)}, machine_block(), quick=args.quick
        )


def machine_block() -> dict[str, Any]:
    from machine import describe, version

    machine = describe(["redis", "limits", "throttled-py", "pyrate-limiter"])
    server = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout.split()
    machine["versions"]["redis-server"] = server[2].removeprefix("v=") if len(server) > 2 else version("redis-server")
    return machine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per case, interleaved (default 5)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per run (default 2000)")
    parser.add_argument("--quick", action="store_true", help="1 run of 500 calls")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "redis_bench.tsv", help="the TSV of every run")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    parts = parser.add_mutually_exclusive_group()
    parts.add_argument("--no-modes", action="store_true", help="skip the modes part (lease, exact, sync, memory)")
    parts.add_argument("--modes-only", action="store_true", help="only the modes part")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.calls = 1, 500
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}", file=sys.stderr)
    print(versions(), file=sys.stderr)
    print(f"{args.runs} run(s) x {args.calls} calls per case, interleaved; medians", file=sys.stderr)
    server = Server()
    modes = None
    try:
        if not args.modes_only:
            blocking, concurrent = measure(server, args.runs, args.calls)
            server_rows = server_time(server, args.calls)
        if not args.no_modes:
            import redis

            modes = redis_modes.measure(server.url, server.port, redis.Redis(port=server.port), args.quick)
    finally:
        server.stop()
    verdicts = []
    if not args.modes_only:
        verdicts = report(blocking, concurrent, args.calls)
        report_server_time(server_rows)
    modes_verdicts = redis_modes.report(modes) if modes is not None else []
    if args.modes_only:
        write_modes_json(args, modes)
    else:
        write_tsv(args.out, blocking, concurrent, args.calls)
        print(f"\nTSV: {args.out}")
        write_json(args, blocking, concurrent, server_rows, verdicts, modes)
    return 1 if args.check and not all(passed for passed, _ in [*verdicts, *modes_verdicts]) else 0


if __name__ == "__main__":
    sys.exit(main())
