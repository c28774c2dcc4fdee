"""The modes part of ``redis_bench.py``: lease mode against exact and sync mode, 4 processes on one Redis.

Run by ``benches/redis_bench.py`` (after its library cases, or alone with ``--modes-only``), against the
``redis-server`` it starts; see its docstring for what is measured and how. Every process is a fresh
interpreter (``multiprocessing``, start method ``spawn``), each with its own ``rk.Limiter`` on the same
server and prefix, made and warmed (one decision on another peer: the connection is open) before the
timed part begins.
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
import random
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ratekeeper as rk

PROCESSES = 4
KEYS = 100_000
#: Part 1's limit: no run reaches it. On the hot key, every decision of the run fits in its burst; the 100k
#: keys, each decided at most 40 times a run by a process, get a burst of 10,000: its tolerance (36 ms) is
#: over within the warm-up, where a standing share's keys start empty for one tolerance after it is claimed
#: (an hour with the hot key's burst: the keys would stay in its table that long).
FAST_LIMIT = "1000000000/h"
KEYS_BURST = 10_000
MODES = ("memory", "exact", "sync", "lease", "standing")
#: The modes that share a limit across processes (parts 2 to 4).
SHARED = ("exact", "sync", "lease", "standing")
SYNC_INTERVAL = 1.0
HOT = "hot"
#: Part 2: the limit the 4 processes exceed several times over.
OFFERED_LIMIT = 2000
#: Parts 3 and 4: the limit process A saturates alone.
MOVING_LIMIT = 1000
#: Part 3: B's admissions are counted over its first this many seconds.
FIRST = 0.5
#: Part 4: B's rate is taken over windows this long; B runs this long after the kill.
RATE_WINDOW = 0.1
AFTER_KILL = 1.5
#: How long to wait for a process (a loaded machine starts interpreters slowly).
PATIENCE = 180.0


@dataclass(frozen=True)
class Settings:
    #: Part 1: decisions per process, and the most seconds a process spends on them; the length of the
    #: sequence of peers each process cycles through.
    decisions: int
    seconds: float
    sequence: int
    runs: int
    #: Part 2: seconds each process offers.
    offer: float
    #: Parts 3 and 4: seconds A is busy alone.
    busy: float
    #: Part 4: kills per mode.
    kills: int


FULL = Settings(decisions=4_000_000, seconds=4.0, sequence=400_000, runs=3, offer=3.0, busy=1.5, kills=3)
QUICK = Settings(decisions=400_000, seconds=1.0, sequence=100_000, runs=1, offer=1.5, busy=0.7, kills=1)


def limiter(
    mode: str, url: str, prefix: str, limit: str, algorithm: str = "gcra", burst: int | None = None
) -> rk.Limiter:
    """``mode``'s limiter: memory (no backend), or Redis in exact, sync (1 s) or lease mode (its defaults),
    or lease mode with a standing share for each of the processes ("standing"), held before this returns."""
    options: dict[str, Any] = {"algorithm": algorithm, "burst": burst}
    if mode != "memory":
        # A round trip may take up to a second on a loaded machine without failing the run.
        redis: dict[str, Any] = {"prefix": prefix, "on_error": "raise", "timeout": 1.0}
        if mode == "sync":
            redis.update(mode="sync", sync_interval=SYNC_INTERVAL)
        elif mode == "lease":
            redis["mode"] = "lease"
        elif mode == "standing":
            redis.update(mode="lease", standing_shares=PROCESSES)
        options["backend"] = rk.Redis(url, **redis)
    lim = rk.Limiter(limit, **options)
    lim.allow("warm-up")  # the connection is opened, the script loaded
    if mode == "standing":
        hold_share(lim)
    return lim


#: A standing share's time to live in the pool (lease mode's default span: a second).
SHARE_TTL = 1.0


def hold_share(lim: rk.Limiter) -> None:
    """Waits for the process's standing share, and for a pool made now to free it: its keys start empty a
    time to live after the pool was made (a holder from before a restart may spend until then)."""
    deadline = time.monotonic() + PATIENCE
    while lim.stats()["standing_share"] is None:
        if time.monotonic() > deadline:
            raise SystemExit("standing: no share held")
        lim.sync_now()
        time.sleep(0.01)
    time.sleep(SHARE_TTL + 0.1)


def round_trips(lim: rk.Limiter) -> int:
    return int(lim.stats()["backend_seconds"]["count"])


# Part 1: decisions per second ------------------------------------------------------------------------------


def speed_worker(
    mode: str, url: str, prefix: str, hot: bool, index: int, settings: Settings, barrier: Any, out: Any
) -> None:
    """Makes ``settings.decisions`` decisions as fast as it can (stopping after ``settings.seconds``),
    cycling through its sequence of peers."""
    lim = limiter(mode, url, prefix, FAST_LIMIT, burst=None if hot else KEYS_BURST)
    if hot:
        peers = [HOT] * settings.sequence
    else:
        names = [f"k{n}" for n in range(KEYS)]
        peers = random.Random(index).choices(names, k=settings.sequence)
    chunks = [peers[i : i + 4000] for i in range(0, len(peers), 4000)]
    before = round_trips(lim)
    barrier.wait(PATIENCE)  # ready: the parent resets the server's counts
    barrier.wait(PATIENCE)  # go
    allow, clock, refused, made = lim.allow, time.perf_counter, 0, 0
    start = clock()
    deadline = start + settings.seconds
    while made < settings.decisions and clock() < deadline:
        for chunk in chunks:
            for peer in chunk:
                if not allow(peer):
                    refused += 1
            made += len(chunk)
            if made >= settings.decisions or clock() > deadline:
                break
    elapsed = clock() - start
    out.put((index, made, elapsed, round_trips(lim) - before, refused))


@dataclass
class Speed:
    mode: str
    hot: bool
    #: Per run: each process's decisions per second.
    rates: list[list[float]] = field(default_factory=list)
    decisions: int = 0
    round_trips: int = 0
    commands: int = 0

    @property
    def rate(self) -> float:
        """Median over runs of the median of the processes."""
        return statistics.median(statistics.median(run) for run in self.rates)


def spawn(target: Callable[..., None], *args: Any) -> Any:
    process = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    process.start()
    return process


#: The calls a client makes to Redis (a script's own commands are counted too, under their names: left out):
#: the scripts (decisions, leases, give-backs) and sync mode's pushes (INCRBY, one per key pushed).
CALLS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval", "cmdstat_incrby")


def calls(admin: Any) -> int:
    """Calls the server took since its counts were reset: scripts, and sync mode's pushes."""
    stats = admin.info("commandstats")
    return sum(stats[k]["calls"] for k in CALLS if k in stats)


def speed_run(url: str, admin: Any, row: Speed, settings: Settings, run: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(PROCESSES + 1), ctx.Queue()
    prefix = f"bench:modes:speed:{run}:{row.mode}:{'hot' if row.hot else 'keys'}:"
    workers = [spawn(speed_worker, row.mode, url, prefix, row.hot, i, settings, barrier, out) for i in range(PROCESSES)]
    barrier.wait(PATIENCE)
    admin.config_resetstat()
    barrier.wait(PATIENCE)
    results = [out.get(timeout=PATIENCE) for _ in workers]
    for worker in workers:
        worker.join(PATIENCE)
    refused = sum(r[4] for r in results)
    if refused:
        raise SystemExit(f"{row.mode}: {refused} decisions refused: part 1's limit must admit every one")
    row.rates.append([made / elapsed for _, made, elapsed, _, _ in results])
    row.decisions += sum(r[1] for r in results)
    row.round_trips += sum(r[3] for r in results)
    row.commands += calls(admin) if row.mode != "memory" else 0


def speeds(url: str, admin: Any, settings: Settings) -> list[Speed]:
    rows = [Speed(mode, hot) for hot in (True, False) for mode in MODES]
    for run in range(settings.runs):
        for row in rows:
            speed_run(url, admin, row, settings, run)
        print(f"  modes, decisions/s: run {run + 1}/{settings.runs} done", file=sys.stderr)
    return rows


# Part 2: admitted vs limit -----------------------------------------------------------------------------------


def offer_worker(mode: str, url: str, prefix: str, algorithm: str, seconds: float, barrier: Any, out: Any) -> None:
    """Offers decisions on the hot key as fast as it can for ``seconds``; each admission's wall-clock
    instants just before and just after its call (ns)."""
    lim = limiter(mode, url, prefix, f"{OFFERED_LIMIT}/s", algorithm)
    barrier.wait(PATIENCE)
    allow, now, stamps, offered = lim.allow, time.time_ns, [], 0
    end = now() + int(seconds * 1e9)
    while True:
        before = now()
        if before >= end:
            break
        if allow(HOT):
            stamps.append((before, now()))
        offered += 1
    out.put((stamps, offered, end))


class WindowPoller(threading.Thread):
    """Reads the hot key's fixed-window state in Redis every 2 ms: where each window ended (ns, the
    server's wall clock, the one ``time.time_ns`` reads on this machine)."""

    def __init__(self, port: int, prefix: str) -> None:
        super().__init__(daemon=True)
        self.port, self.prefix = port, prefix
        self.ends: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        import redis

        client = redis.Redis(port=self.port)
        key = None
        while not self.stop.is_set():
            if key is None:
                key = next(iter(client.scan_iter(match=f"{self.prefix}*{HOT}*", count=1000)), None)
            else:
                raw: Any = client.get(key)
                if raw:
                    s, ns = raw.split()[:2]
                    self.ends.add(int(s) * 10**9 + int(ns))
            time.sleep(0.002)
        client.close()


@dataclass
class Offered:
    mode: str
    algorithm: str
    admitted: int = 0
    offered: int = 0
    #: Fixed window: per window (certainly in it, in or straddling its ends); GCRA: one entry, the run.
    windows: list[tuple[int, int]] = field(default_factory=list)
    #: The most admitted against what the limit allows: per window, or by any instant of the run (GCRA).
    max_ratio: float = 0.0
    #: The same, counting an admission whose call straddled a window's edge in both windows.
    max_ratio_upper: float = 0.0
    #: Admitted over allowed, over the whole windows (fixed window) or the run (GCRA).
    use: float = 0.0
    #: Admissions that touched no window Redis held (fixed window, exact and lease: should be none).
    outside: int = 0
    #: Sync mode's stated bound on the ratio.
    bound: float = 1.0


def fixed_windows(stamps: Sequence[tuple[int, int]], ends: Iterable[int], window_ns: int) -> list[tuple[int, int]]:
    """Per window ending at each of ``ends``: admissions whose call lay wholly inside, and those whose
    call touched it."""
    rows = []
    for end in sorted(ends):
        start = end - window_ns
        certain = sum(1 for b, a in stamps if b >= start and a < end)
        touched = sum(1 for b, a in stamps if a >= start and b < end)
        rows.append((certain, touched))
    return rows


def greedy_ends(stamps: Sequence[tuple[int, int]], window_ns: int) -> list[int]:
    """Windows as a fixed window opens them, from admissions alone: the first admission opens one, the
    first after it ended the next (sync mode: each process has its own, so this is the fleet's view)."""
    ends: list[int] = []
    for before, _ in sorted(stamps):
        if not ends or before >= ends[-1]:
            ends.append(before + window_ns)
    return ends


def sync_bound(admitted: int, seconds: float) -> float:
    """Sync mode's stated bound on admitted / limit: 1 + min(N - 1, R (2 interval) / L), R the rate the
    processes admit at together, round trips neglected (docs/workers-and-machines.md)."""
    rate = admitted / seconds
    return 1 + min(PROCESSES - 1, rate * 2 * SYNC_INTERVAL / OFFERED_LIMIT)


def offer_run(url: str, port: int, mode: str, algorithm: str, seconds: float) -> Offered:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(PROCESSES + 1), ctx.Queue()
    prefix = f"bench:modes:offer:{mode}:{algorithm}:"
    workers = [spawn(offer_worker, mode, url, prefix, algorithm, seconds, barrier, out) for _ in range(PROCESSES)]
    poller = WindowPoller(port, prefix)
    barrier.wait(PATIENCE)
    if algorithm == "fixed_window" and mode != "sync":
        poller.start()
    results = [out.get(timeout=PATIENCE) for _ in workers]
    poller.stop.set()
    for worker in workers:
        worker.join(PATIENCE)
    if poller.is_alive():
        poller.join(10)
    stamps: list[tuple[int, int]] = sorted(s for r in results for s in r[0])
    row = Offered(mode, algorithm, admitted=len(stamps), offered=sum(r[1] for r in results))
    start, end = stamps[0][0], max(r[2] for r in results)
    if algorithm == "fixed_window":
        window_ns = 10**9
        ends = sorted(poller.ends) if mode != "sync" else greedy_ends(stamps, window_ns)
        row.windows = fixed_windows(stamps, ends, window_ns)
        row.max_ratio = max(c for c, _ in row.windows) / OFFERED_LIMIT
        row.max_ratio_upper = max(t for _, t in row.windows) / OFFERED_LIMIT
        whole = [c for (c, _), e in zip(row.windows, ends, strict=True) if e <= end]
        row.use = sum(whole) / (OFFERED_LIMIT * len(whole)) if whole else float("nan")
        row.outside = sum(1 for b, a in stamps if not any(e - window_ns <= a and b < e for e in ends))
    else:
        # GCRA: the burst, then the rate; by each admission's end, against the earliest start.
        by_end = sorted(a for _, a in stamps)
        allowed = [OFFERED_LIMIT + OFFERED_LIMIT * (a - start) / 1e9 for a in by_end]
        row.max_ratio = row.max_ratio_upper = max((i + 1) / limit for i, limit in enumerate(allowed))
        row.use = len(stamps) / (OFFERED_LIMIT + OFFERED_LIMIT * (end - start) / 1e9)
        row.windows = [(len(stamps), len(stamps))]
    if mode == "sync":
        row.bound = sync_bound(len(stamps), (end - start) / 1e9)
    return row


def offers(url: str, port: int, settings: Settings) -> list[Offered]:
    rows = [offer_run(url, port, m, a, settings.offer) for a in ("fixed_window", "gcra") for m in SHARED]
    print("  modes, admitted vs limit: done", file=sys.stderr)
    return rows


# Parts 3 and 4: demand that moves, a holder killed ------------------------------------------------------------

#: A's demand: as fast as it can (None), or paced at half the limit (the bucket stays full, and A's lease
#: is sized by its demand, not by what the limit has left).
DEMANDS: tuple[int | None, ...] = (None, MOVING_LIMIT // 2)


def demand_name(demand: int | None) -> str:
    return "as fast as it can" if demand is None else f"{demand:,}/s"


def busy_worker(
    mode: str, url: str, prefix: str, demand: int | None, ready: Any, switch: Any, done: Any, out: Any
) -> None:
    """A: on the hot key (as fast as it can, or ``demand`` a second) until ``switch`` (or a SIGKILL), then
    idle, alive, until ``done``."""
    lim = limiter(mode, url, prefix, f"{MOVING_LIMIT}/s")
    ready.wait(PATIENCE)
    allow, admitted, clock = lim.allow, 0, time.monotonic
    if demand is None:
        while not switch.is_set():
            for _ in range(64):
                admitted += allow(HOT)
    else:
        step, due = 1 / demand, clock()
        while not switch.is_set():
            admitted += allow(HOT)
            due += step
            if (pause := due - clock()) > 0:
                time.sleep(pause)
    out.put(("A", admitted))
    done.wait(PATIENCE)


def second_worker(mode: str, url: str, prefix: str, seconds: float, ready: Any, switch: Any, out: Any) -> None:
    """B: waits for ``switch``, then on the hot key as fast as it can for ``seconds``: the instant of each
    admission's reply (``time.monotonic_ns``: the same clock in every process), and of its first call."""
    lim = limiter(mode, url, prefix, f"{MOVING_LIMIT}/s")
    ready.wait(PATIENCE)
    switch.wait(PATIENCE)
    allow, now, stamps = lim.allow, time.monotonic_ns, []
    start = now()
    end = start + int(seconds * 1e9)
    while (t := now()) < end:
        if allow(HOT):
            stamps.append(now())
    out.put(("B", start, stamps, t))


def allowed_over(demand: int | None, seconds: float) -> float:
    """What the limit lets B have over its first ``seconds``: the rate, and the burst when A, paced at
    half the limit, left the bucket full (as fast as it could, A left it empty)."""
    return MOVING_LIMIT * seconds + (0 if demand is None else MOVING_LIMIT)


@dataclass
class Moved:
    """Part 3: B's first ``FIRST`` seconds after A, alone on the key, stopped."""

    mode: str
    demand: int | None
    a_admitted: int
    b_admitted: int

    @property
    def allowed(self) -> float:
        return allowed_over(self.demand, FIRST)

    @property
    def shortfall(self) -> float:
        return self.allowed - self.b_admitted


def moved_run(url: str, mode: str, demand: int | None, busy: float) -> Moved:
    ctx = multiprocessing.get_context("spawn")
    ready, switch, done, out = ctx.Barrier(3), ctx.Event(), ctx.Event(), ctx.Queue()
    prefix = f"bench:modes:moved:{mode}:{demand}:"
    a = spawn(busy_worker, mode, url, prefix, demand, ready, switch, done, out)
    b = spawn(second_worker, mode, url, prefix, FIRST + 0.5, ready, switch, out)
    ready.wait(PATIENCE)
    time.sleep(busy)
    switch.set()
    results = {r[0]: r for r in (out.get(timeout=PATIENCE) for _ in range(2))}
    done.set()
    for process in (a, b):
        process.join(PATIENCE)
    _, start, stamps, _ = results["B"]
    first = sum(1 for t in stamps if t < start + int(FIRST * 1e9))
    return Moved(mode, demand, results["A"][1], first)


@dataclass
class Killed:
    """Part 4: B after A, busy on the key, was killed; per kill."""

    mode: str
    demand: int | None
    #: ms from the kill to B's first admission.
    first_ms: list[float] = field(default_factory=list)
    #: ms from the kill until B is admitted at the full rate: the start of the first window of
    #: ``RATE_WINDOW`` holding the limit's units for it less one.
    full_ms: list[float] = field(default_factory=list)
    #: B's admissions in the first second after the kill.
    admitted: list[int] = field(default_factory=list)

    @property
    def lost(self) -> float:
        """Units the limit allowed in the first second after the kill that B was not admitted (median)."""
        return allowed_over(self.demand, 1.0) - statistics.median(self.admitted)


def full_rate_from(stamps: Sequence[int], kill: int) -> float:
    """ms from ``kill`` to the start (1 ms steps) of the first ``RATE_WINDOW`` admitting the limit's rate."""
    times = [t - kill for t in stamps]
    need = MOVING_LIMIT * RATE_WINDOW - 1
    width = int(RATE_WINDOW * 1e9)
    for ms in range(int(AFTER_KILL * 1000 - RATE_WINDOW * 1000) + 1):
        s = ms * 1_000_000
        if bisect.bisect_left(times, s + width) - bisect.bisect_left(times, s) >= need:
            return float(ms)
    return float("inf")


def killed_run(url: str, row: Killed, busy: float, rep: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, switch, done, out = ctx.Barrier(3), ctx.Event(), ctx.Event(), ctx.Queue()
    prefix = f"bench:modes:killed:{rep}:{row.mode}:{row.demand}:"
    # A's ``switch`` is ``done``, never set: A is not told to stop, only killed.
    a = spawn(busy_worker, row.mode, url, prefix, row.demand, ready, done, done, out)
    b = spawn(second_worker, row.mode, url, prefix, AFTER_KILL, ready, switch, out)
    ready.wait(PATIENCE)
    time.sleep(busy)
    kill = time.monotonic_ns()
    os.kill(a.pid, signal.SIGKILL)
    a.join(PATIENCE)
    switch.set()
    _, _, stamps, _ = out.get(timeout=PATIENCE)
    b.join(PATIENCE)
    row.first_ms.append((stamps[0] - kill) / 1e6 if stamps else float("inf"))
    row.full_ms.append(full_rate_from(stamps, kill))
    row.admitted.append(sum(1 for t in stamps if t < kill + 10**9))


def moving(url: str, settings: Settings) -> tuple[list[Moved], list[Killed]]:
    moved = [moved_run(url, mode, demand, settings.busy) for demand in DEMANDS for mode in SHARED]
    print("  modes, demand that moves: done", file=sys.stderr)
    killed = [Killed(mode, demand) for demand in DEMANDS for mode in SHARED]
    for rep in range(settings.kills):
        for row in killed:
            killed_run(url, row, settings.busy, rep)
    print("  modes, killed holder: done", file=sys.stderr)
    return moved, killed


# Report --------------------------------------------------------------------------------------------------------


@dataclass
class Modes:
    speeds: list[Speed]
    offered: list[Offered]
    moved: list[Moved]
    killed: list[Killed]
    settings: Settings
    verdicts: list[tuple[bool, str]] = field(default_factory=list)


def measure(url: str, port: int, admin: Any, quick: bool) -> Modes:
    settings = QUICK if quick else FULL
    speed_rows = speeds(url, admin, settings)
    offered = offers(url, port, settings)
    moved, killed = moving(url, settings)
    return Modes(speed_rows, offered, moved, killed, settings)


def report_speeds(modes: Modes) -> list[tuple[bool, str]]:
    s = modes.settings
    print(
        f"\n**Modes: {PROCESSES} processes, decisions/s per process** (limit {FAST_LIMIT}, burst its count on the "
        f"hot key, {KEYS_BURST:,} on the {KEYS:,} keys; {s.decisions:,} "
        f"decisions each, or {s.seconds:g} s; median of the {PROCESSES}, median of {s.runs} run(s))\n"
    )
    print("| scenario | mode | decisions/s per process | vs memory | round trips / 1,000 | server calls / 1,000 |")
    print("|---|---|---:|---:|---:|---:|")
    verdicts: list[tuple[bool, str]] = []
    for hot in (True, False):
        rows = {r.mode: r for r in modes.speeds if r.hot == hot}
        scenario = "hot key" if hot else f"{KEYS:,} keys"
        for mode, row in rows.items():
            trips = row.round_trips / row.decisions * 1000
            cmds = f"{row.commands / row.decisions * 1000:.2f}" if mode != "memory" else ""
            versus = row.rate / rows["memory"].rate
            print(f"| {scenario} | {mode} | {row.rate:,.0f} | {versus:.2f}x | {trips:.2f} | {cmds} |")
        memory, exact = rows["memory"].rate, rows["exact"].rate
        for mode, name in (("lease", "lease mode"), ("standing", "lease mode with standing shares")):
            slower = memory / rows[mode].rate
            verdicts.append((slower <= 2, f"{scenario}: {name} {slower:.2f}x slower than memory (<= 2x)"))
            times = rows[mode].rate / exact
            verdicts.append((times >= 20, f"{scenario}: {name} {times:.1f}x exact mode (>= 20x)"))
    return verdicts


def report_offered(modes: Modes) -> list[tuple[bool, str]]:
    print(
        f"\n**Modes: admitted vs limit** (hot key, {OFFERED_LIMIT:,}/s, {PROCESSES} processes offering as fast "
        f"as they can for {modes.settings.offer:g} s)\n"
    )
    print("| algorithm | mode | offered | admitted | per window (certain/touched) | max ratio | use | bound |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    verdicts: list[tuple[bool, str]] = []
    for row in modes.offered:
        windows = "(the run)"
        if row.algorithm == "fixed_window":
            windows = ", ".join(f"{c}/{t}" for c, t in row.windows)
        if row.outside and row.mode != "sync":
            windows += f"; {row.outside} outside any window"
        upper = f" ({row.max_ratio_upper:.4f})" if row.max_ratio_upper != row.max_ratio else ""
        print(
            f"| {row.algorithm} | {row.mode} | {row.offered:,} | {row.admitted:,} | {windows} | "
            f"{row.max_ratio:.4f}{upper} | {row.use:.1%} | {row.bound:.2f} |"
        )
        if row.mode != "sync":
            text = f"{row.algorithm}, {row.mode} mode: at most {row.max_ratio:.4f}x the limit (<= 1.0)"
            verdicts.append((row.max_ratio <= 1.0 and not row.outside, text))
    return verdicts


def report_moving(modes: Modes) -> list[tuple[bool, str]]:
    s = modes.settings
    print(
        f"\n**Modes: demand that moves** (hot key, {MOVING_LIMIT:,}/s GCRA, burst {MOVING_LIMIT:,}: A alone for "
        f"{s.busy:g} s, then A stops and B, as fast as it can, starts)\n"
    )
    print(f"| A's demand | mode | B admitted, its first {FIRST:g} s | the limit over it | shortfall | in ms |")
    print("|---|---|---:|---:|---:|---:|")
    for moved in modes.moved:
        units, millis = moved.shortfall, moved.shortfall / MOVING_LIMIT * 1000
        print(
            f"| {demand_name(moved.demand)} | {moved.mode} | {moved.b_admitted:,} | {moved.allowed:,.0f} | "
            f"{units:,.0f} | {millis:.0f} |"
        )

    print(
        f"\n**Modes: a killed holder** (hot key, {MOVING_LIMIT:,}/s GCRA: A busy for {s.busy:g} s, SIGKILLed; "
        f"B, as fast as it can, starts at once; {s.kills} kill(s), medians; lease span 0.1 s)\n"
    )
    print("| A's demand | mode | ms to B's 1st admission | ms to the full rate | B admitted, 1st s | not admitted |")
    print("|---|---|---:|---:|---:|---:|")
    verdicts: list[tuple[bool, str]] = []
    for killed in modes.killed:
        first, full = statistics.median(killed.first_ms), statistics.median(killed.full_ms)
        print(
            f"| {demand_name(killed.demand)} | {killed.mode} | {first:.1f} | {full:.1f} | "
            f"{statistics.median(killed.admitted):,.0f} | {killed.lost:,.0f} |"
        )
        if killed.mode == "lease":
            text = f"a killed holder ({demand_name(killed.demand)}): full rate {full:.1f} ms after the kill (<= span)"
            verdicts.append((full <= 100.0, text))
    return verdicts


def report(modes: Modes) -> list[tuple[bool, str]]:
    """The four tables, then the verdicts (kept in ``modes.verdicts``)."""
    modes.verdicts = [*report_speeds(modes), *report_offered(modes), *report_moving(modes)]
    print()
    for passed, text in modes.verdicts:
        print(f"{'PASS' if passed else 'MISS'} {text}")
    return modes.verdicts


def figures(modes: Modes) -> dict[str, Any]:
    """The part's figures for ``--json``."""
    s = modes.settings
    return {
        "processes": PROCESSES,
        "settings": {
            "decisions": s.decisions,
            "seconds": s.seconds,
            "runs": s.runs,
            "offer_seconds": s.offer,
            "busy_seconds": s.busy,
            "kills": s.kills,
            "sync_interval": SYNC_INTERVAL,
        },
        "speed": [
            {
                "scenario": "hot key" if r.hot else f"{KEYS} keys",
                "mode": r.mode,
                "per_process_per_s": r.rate,
                "runs": r.rates,
                "round_trips_per_1000": r.round_trips / r.decisions * 1000,
                "commands_per_1000": r.commands / r.decisions * 1000 if r.mode != "memory" else None,
            }
            for r in modes.speeds
        ],
        "admitted": [
            {
                "algorithm": r.algorithm,
                "mode": r.mode,
                "limit_per_s": OFFERED_LIMIT,
                "offered": r.offered,
                "admitted": r.admitted,
                "windows": r.windows,
                "max_ratio": r.max_ratio,
                "max_ratio_upper": r.max_ratio_upper,
                "use": r.use,
                "outside": r.outside,
                "bound": r.bound,
            }
            for r in modes.offered
        ],
        "moved": [
            {
                "mode": m.mode,
                "a_demand_per_s": m.demand,
                "limit_per_s": MOVING_LIMIT,
                "first_seconds": FIRST,
                "a_admitted": m.a_admitted,
                "b_admitted": m.b_admitted,
                "allowed": m.allowed,
                "shortfall": m.shortfall,
                "shortfall_ms": m.shortfall / MOVING_LIMIT * 1000,
            }
            for m in modes.moved
        ],
        "killed": [
            {
                "mode": k.mode,
                "a_demand_per_s": k.demand,
                "limit_per_s": MOVING_LIMIT,
                "first_ms": k.first_ms,
                "full_rate_ms": k.full_ms,
                "admitted_first_second": k.admitted,
                "median_full_rate_ms": statistics.median(k.full_ms),
                "not_admitted_first_second": k.lost,
            }
            for k in modes.killed
        ],
        "verdicts": [{"passed": passed, "text": text} for passed, text in modes.verdicts],
    }
