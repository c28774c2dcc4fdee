"""The per-account quota experiment in one process: quotas under load, then the memory of a flood of new ids.

What is measured
    A per-user quota limiter is tested with wrk: one profile per account in its quota
    table, plus ``invalid`` (an account id with no quota), ``invalidN`` (a new account id on every request:
    a denial-of-service attack on the state map) and ``admin`` (exempt: the control). This script runs the
    same profiles against the limiter of ``python -m ratekeeper serve`` (``ratekeeper/_serve.py``), which
    is configured like a per-user quota server::

        rk.Limiter(rate="60/min", exempt_peers=["admin@example.com"], max_keys=100_000,
                   quotas=rk.Quotas(<dict lookup>, failsafe="5/min"))   # 4 quota workers

    The provider looks the account up in a dict and raises ``LookupError("no such account")`` for an
    unknown one. Each profile gets its own thread (``--threads`` per profile) calling ``lim.allow(account)``
    as fast as it can for ``--seconds`` on the real clock, all profiles at once, starting cold: every key's
    first requests are decided on the failsafe until its quota lands.

    Profiles:
      alice     quota 1/min       bob      quota 100/min     carol    quota 1000/min    dave   quota 10/s
      invalid   no quota: the provider raises; the key stays on the failsafe (fail open, but only 5/min)
      invalidN  a new random 32-character id (like a UUID's hex) on every request; the provider raises
      admin     exempt_peers: never limited

    Expected maximum (GCRA, usage carried over when a quota lands, counted in requests): a key that ran on
    the failsafe (burst b_f, rate r_f) until its quota (burst b_q, rate r_q) landed at t_L, over a run of
    T seconds, is admitted at most  floor(r_f * t_L) + max(b_f, b_q + floor(r_q * T)):  what the failsafe
    admitted before the quota landed counts against the quota afterwards. t_L is measured from the start
    of the run to the moment the main thread (polling ``lim.quota`` every millisecond) sees the quota, an
    upper bound. A key that never gets a quota (``invalid``) may have b_f + floor(r_f * T). ``invalidN``
    and ``admin`` must have every request admitted (fail open; exempt).

    Memory: ``invalidN`` alone for ``--invalid-requests`` requests (10,000,000; ``--quick``: 1,000,000) on a
    fresh limiter of the same configuration, created after the first RSS reading (the first limiter is
    closed but kept alive, so memory it frees cannot be reused and hide the growth). Ids are made in
    chunks of 10,000 whose memory is reused. Reported: RSS growth right after the flood and after the
    fetch queue drained (``wait_quotas``), peak RSS, ``len(lim)`` (states; must stay <= max_keys),
    ``stats()["keys"]``, ``stats()["memory_bytes"]``, evictions, quota fetches and failures, and the RSS
    growth per allowed key (growth / max_keys). The ``ratekeeper`` logger is set to ERROR during the
    flood: a fetch that fails (times out behind the flood) logs one warning.

Exit status
    1 if any check fails: a limited profile admitted past its expected maximum, ``invalidN`` or ``admin``
    refused, more than max_keys states, or RSS growth above 64 MiB (for max_keys=100,000) after the flood
    or after the drain; 0 otherwise.

Usage
    python benches/profiles.py              # 5 s of profiles, then 10,000,000 new ids
    python benches/profiles.py --quick      # 2 s of profiles, then 1,000,000 new ids
    python benches/profiles.py --seconds 30 --threads 2 --invalid-requests 3000000
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import platform
import random
import resource
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import ratekeeper as rk
from ratekeeper._serve import ADMIN, FAILSAFE, MAX_KEYS, QUOTAS, AccountDirectory, build_limiter

GROUP = "default"  # the group of a limiter built with rate=...
INVALID = "invalid@example.com"
MEMORY_BOUND = 64 * 2**20  # bytes of RSS growth allowed for a flood at MAX_KEYS states
BATCH = 256  # allow() calls between two reads of the clock
CHUNK = 10_000  # new ids made at once in the memory phase
POLL_S = 0.001
TIMES = "\N{MULTIPLICATION SIGN}"
LE = "\N{LESS-THAN OR EQUAL TO}"


# The quota provider and the limiter are the HTTP server's (python -m ratekeeper serve): one configuration.
make_limiter = build_limiter


def new_ids(rng: random.Random, n: int) -> list[str]:
    """``n`` random 32-character hex account ids (like ``uuid4().hex``)."""
    bits = rng.getrandbits
    return [f"{bits(128):032x}" for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Phase 1: the profiles, all at once
# ---------------------------------------------------------------------------------------------


@dataclass
class Profile:
    name: str
    peer: str  # "" for invalidN: a new id on every request
    quota: str | None  # the provider's answer; None: it raises (or the peer is exempt)
    requests: int = 0
    allowed: int = 0
    landed_s: float | None = None  # when the main thread first saw the quota, from the start of the run
    expected_max: int = 0
    ok: bool = True


def build_profiles() -> list[Profile]:
    profiles = [Profile(peer.split("@")[0], peer, quota) for peer, quota in QUOTAS.items()]
    profiles += [Profile("invalid", INVALID, None), Profile("invalidN", "", None), Profile("admin", ADMIN, None)]
    return profiles


def hammer(lim: rk.Limiter, profile: Profile, deadline: float, lock: threading.Lock) -> None:
    """Calls ``lim.allow`` for ``profile`` until ``deadline`` (time.monotonic), then adds up its counts."""
    allow = lim.allow
    requests = allowed = 0
    if profile.peer:
        peer = profile.peer
        while time.monotonic() < deadline:
            for _ in range(BATCH):
                allowed += allow(peer)
            requests += BATCH
    else:
        rng = random.Random(int.from_bytes(os.urandom(16), "big"))
        while time.monotonic() < deadline:
            for peer in new_ids(rng, BATCH):
                allowed += allow(peer)
            requests += BATCH
    with lock:
        profile.requests += requests
        profile.allowed += allowed


def allowance(rate: rk.Rate, seconds: float) -> int:
    """GCRA's most admissions in a window of ``seconds``: burst (the rate's count) + floor(rate * seconds)."""
    return rate.count + math.floor(Fraction(seconds) * rate.count / Fraction(rate.period))


def expected_max(profile: Profile, elapsed: float) -> int:
    """The most ``profile`` may be admitted in ``elapsed`` seconds (see the module docstring)."""
    if profile.peer in ("", ADMIN):
        return profile.requests
    failsafe = rk.Rate(FAILSAFE)
    if profile.quota is None:
        return allowance(failsafe, elapsed)
    landed = elapsed if profile.landed_s is None else min(profile.landed_s, elapsed)
    before = allowance(failsafe, landed) - failsafe.count  # floor(r_f * t_L)
    return before + max(failsafe.count, allowance(rk.Rate(profile.quota), elapsed))


@dataclass
class ProfilesResult:
    profiles: list[Profile]
    elapsed: float
    threads: int  # per profile
    stats: dict[str, Any]
    provider_calls: int


def run_profiles(lim: rk.Limiter, directory: AccountDirectory, seconds: float, threads: int) -> ProfilesResult:
    profiles = build_profiles()
    lock = threading.Lock()
    start = time.monotonic()
    deadline = start + seconds
    workers = [
        threading.Thread(target=hammer, args=(lim, p, deadline, lock), name=f"profile-{p.name}-{i}")
        for p in profiles
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    waiting = [p for p in profiles if p.quota is not None]
    while waiting and time.monotonic() < deadline:
        for p in [p for p in waiting if lim.quota(p.peer, GROUP).source == "provider"]:
            p.landed_s = time.monotonic() - start
            waiting.remove(p)
        time.sleep(POLL_S)
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - start
    for p in profiles:
        p.expected_max = expected_max(p, elapsed)
        # invalidN and admin: every request admitted; the others: never past their expected maximum.
        p.ok = p.allowed == p.requests if p.peer in ("", ADMIN) else p.allowed <= p.expected_max
    return ProfilesResult(profiles, elapsed, threads, lim.stats(), directory.calls)


# ---------------------------------------------------------------------------------------------
# Phase 2: memory under a flood of new ids
# ---------------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """The process's resident set size now (/proc/self/statm), or its peak where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
    except OSError:
        return peak_rss_bytes()
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


@contextmanager
def logger_level(name: str, level: int) -> Iterator[None]:
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


@dataclass
class MemoryResult:
    requests: int
    allowed: int
    flood_s: float
    drain_s: float
    drained: bool  # wait_quotas returned True: no fetch queued or running
    rss_before: int
    growth_flood: int  # RSS growth right after the last request
    growth_drained: int  # RSS growth once the fetch queue drained (or the drain timed out)
    peak_rss: int
    states: int  # len(lim) at the end
    states_max: int  # the largest len(lim) read after each chunk
    stats: dict[str, Any]
    provider_calls: int


def run_memory(requests: int, drain_timeout: float) -> MemoryResult:
    """``requests`` new ids on a fresh limiter created after the first RSS reading."""
    directory = AccountDirectory()
    rng = random.Random(2)
    chunk = new_ids(rng, min(CHUNK, requests))  # built before the reading: later chunks reuse its memory
    gc.collect()
    before = rss_bytes()
    lim = make_limiter(directory)
    allow = lim.allow
    done = allowed = states_max = 0
    start = time.perf_counter()
    while chunk:
        for peer in chunk:
            allowed += allow(peer)
        done += len(chunk)
        states_max = max(states_max, len(lim))
        del chunk
        chunk = new_ids(rng, min(CHUNK, requests - done))
    flood_s = time.perf_counter() - start
    after_flood = rss_bytes()
    start = time.perf_counter()
    drained = lim.wait_quotas(timeout=drain_timeout)
    drain_s = time.perf_counter() - start
    after_drain = rss_bytes()
    result = MemoryResult(
        requests=done,
        allowed=allowed,
        flood_s=flood_s,
        drain_s=drain_s,
        drained=drained,
        rss_before=before,
        growth_flood=after_flood - before,
        growth_drained=after_drain - before,
        peak_rss=peak_rss_bytes(),
        states=len(lim),
        states_max=max(states_max, len(lim)),
        stats=lim.stats(),
        provider_calls=directory.calls,
    )
    lim.close()
    return result


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def profile_quota(p: Profile) -> str:
    if p.quota is not None:
        return p.quota
    return {"": "new id per request", ADMIN: "exempt"}.get(p.peer, "none (provider raises)")


def render_profiles(result: ProfilesResult) -> list[str]:
    elapsed = result.elapsed
    lines = [
        "| profile | quota | requests | allowed | refused | allowed/s | expected max | quota seen after | check |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in result.profiles:
        landed = f"{p.landed_s * 1e3:,.1f} ms" if p.landed_s is not None else "—" if p.quota is None else "never"
        lines.append(
            f"| {p.name} | {profile_quota(p)} | {p.requests:,} | {p.allowed:,} | {p.requests - p.allowed:,} "
            f"| {p.allowed / elapsed:,.1f} | {p.expected_max:,} | {landed} | {'ok' if p.ok else 'FAIL'} |"
        )
    group = result.stats["groups"][GROUP]
    lines += [
        "",
        (
            f'Group "{GROUP}": {group["requests"]:,} requests, {group["allowed"]:,} allowed, '
            f"{group['refused']:,} refused; {result.stats['exempt']:,} exempt; "
            f"{group['quota_fetches']:,} quota fetches, {group['quota_unknown']:,} unknown accounts, "
            f"{group['quota_failures']:,} failures "
            f"({result.provider_calls:,} provider calls); {result.stats['keys']:,} keys, "
            f"{result.stats['evictions']:,} evictions."
        ),
    ]
    return lines


def render_memory(m: MemoryResult) -> list[str]:
    group = m.stats["groups"][GROUP]
    drained = f"drained in {m.drain_s:,.2f} s" if m.drained else f"NOT drained after {m.drain_s:,.0f} s"
    rate = m.requests / m.flood_s if m.flood_s else 0.0
    return [
        f"| memory: invalidN alone, a fresh limiter, max_keys={MAX_KEYS:,} | value |",
        "| --- | ---: |",
        f"| requests (a new id each) | {m.requests:,} |",
        f"| allowed (fail open: all) | {m.allowed:,} |",
        f"| flood time | {m.flood_s:,.2f} s ({rate:,.0f} requests/s) |",
        f"| RSS before | {mib(m.rss_before)} |",
        f"| RSS growth right after the flood | {mib(m.growth_flood)} |",
        f"| RSS growth after the fetch queue ({drained}) | {mib(m.growth_drained)} |",
        f"| peak RSS of the process | {mib(m.peak_rss)} |",
        f"| len(lim), states (end / largest seen) | {m.states:,} / {m.states_max:,} |",
        f'| stats()["keys"] | {m.stats["keys"]:,} |',
        f'| stats()["memory_bytes"] | {m.stats["memory_bytes"]:,} B ({mib(m.stats["memory_bytes"])}) |',
        f"| evictions | {m.stats['evictions']:,} |",
        f"| quota fetches / unknown / failures | {group['quota_fetches']:,} / {group['quota_unknown']:,} / "
        f"{group['quota_failures']:,} |",
        f"| provider calls | {m.provider_calls:,} |",
        f"| RSS growth per key (growth after the flood / max_keys) | {m.growth_flood / MAX_KEYS:,.1f} B |",
        f"| bound on RSS growth | {mib(MEMORY_BOUND)} ({MEMORY_BOUND / MAX_KEYS:,.0f} B/key) |",
    ]


def checks(profiles: ProfilesResult, memory: MemoryResult | None) -> list[str]:
    """The failed checks, each a sentence; empty when all passed."""
    failed = [
        f"{p.name}: {p.allowed:,} of {p.requests:,} allowed, expected "
        + ("all (fail open / exempt)" if p.peer in ("", ADMIN) else f"at most {p.expected_max:,}")
        for p in profiles.profiles
        if not p.ok
    ]
    if memory is None:
        return failed
    if memory.allowed != memory.requests:
        failed.append(f"memory flood: {memory.allowed:,} of {memory.requests:,} new ids allowed, expected all")
    if memory.states_max > MAX_KEYS:
        failed.append(f"memory flood: len(lim) reached {memory.states_max:,} > max_keys {MAX_KEYS:,}")
    for when, growth in (("after the flood", memory.growth_flood), ("after the drain", memory.growth_drained)):
        if growth > MEMORY_BOUND:
            failed.append(f"memory flood: RSS grew {mib(growth)} {when} > {mib(MEMORY_BOUND)}")
    if not memory.drained:
        failed.append(f"memory flood: the fetch queue did not drain in {memory.drain_s:,.0f} s")
    return failed


def render(profiles: ProfilesResult, memory: MemoryResult | None, failed: list[str]) -> str:
    lines = [
        "## ratekeeper: the per-account wrk profiles, in one process",
        "",
        (
            f"Python {platform.python_version()} ({platform.python_implementation()}), {platform.machine()}, "
            f"{os.cpu_count()} CPUs, ratekeeper {rk.__version__}. "
            f"the limiter of `python -m ratekeeper serve` (failsafe {FAILSAFE}, max_keys={MAX_KEYS:,}, "
            "4 quota workers). "
            f"{len(profiles.profiles)} profiles {TIMES} {profiles.threads} thread(s), "
            f"{profiles.elapsed:.2f} s on the real clock, started cold."
        ),
        "",
        *render_profiles(profiles),
    ]
    if memory is not None:
        lines += ["", *render_memory(memory)]
    lines += [
        "",
        "Notes:",
        (
            f"- expected max: floor(failsafe rate {TIMES} time until the quota was seen) + max(failsafe burst, "
            f"quota burst + floor(quota rate {TIMES} run time)); invalid: the failsafe's allowance; invalidN and "
            "admin: every request."
        ),
        "- the ratekeeper logger is set to ERROR: a fetch that fails (times out behind the flood) logs a warning;"
        " unknown accounts (LookupError) are not failures.",
        "",
        "Checks: all passed." if not failed else "Checks FAILED:",
        *[f"- {f}" for f in failed],
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 s of profiles, 1,000,000 new ids")
    parser.add_argument("--seconds", type=float, help="how long the profiles run (default 5; --quick: 2)")
    parser.add_argument("--threads", type=int, default=1, help="threads per profile (default 1)")
    parser.add_argument(
        "--invalid-requests",
        type=int,
        help="requests of the memory phase, a new id each (default 10,000,000; --quick: 1,000,000; 0: skip it)",
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=120.0, help="seconds to wait for the fetch queue after the flood"
    )
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 2.0 if args.quick else 5.0
    if args.invalid_requests is None:
        args.invalid_requests = 1_000_000 if args.quick else 10_000_000
    if args.seconds <= 0 or args.threads < 1 or args.invalid_requests < 0:
        parser.error("--seconds must be > 0, --threads >= 1, --invalid-requests >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with logger_level("ratekeeper", logging.ERROR):
        directory = AccountDirectory()
        lim = make_limiter(directory)
        print(f"profiles: {args.threads} thread(s) each for {args.seconds:g} s ...", file=sys.stderr)
        profiles = run_profiles(lim, directory, args.seconds, args.threads)
        lim.close()  # kept alive until the end: memory it frees must not be reused by the memory phase
        memory = None
        if args.invalid_requests:
            print(f"memory: {args.invalid_requests:,} new ids ...", file=sys.stderr)
            memory = run_memory(args.invalid_requests, args.drain_timeout)
        failed = checks(profiles, memory)
        print(render(profiles, memory, failed))
        del lim
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
