"""Several processes calling one rate-limited API through ``ratekeeper.httpx.AsyncTransport``: 4 processes of 16
asyncio tasks on one ``rk.Shared`` region (the workers of a machine), and 2 processes each with its own
``rk.Redis`` client (two machines). The server announces 100 calls per 4-second window and answers 429 past
it; the processes must draw no 429 and use at least 90 % of every window they cover, counted by the server
(with no group declared, at most one 429 per process but the first, at the start).

The window is 4 s, not less: the IETF fields say resets in whole seconds, which the server rounds up, so the
announced end of a window may come up to a second after the server's, and the calls sent in that second land in
its next window. A word from the next window tells itself apart (it ends more than a second after the announced
one) only when windows are longer than two seconds and a bit; a real API's are a minute or an hour.

The processes are spawned (each builds its own limiter on the store, as separate workers do) and start together
at a barrier; they call for 12 s, which covers at least 2 whole windows of the server. A slow machine only makes
the tasks slower, and 64 tasks waiting their turn still spend a window's 100 calls within its 4 s.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _callers import Store, call_for_a_while
from _redis import RedisServer
from conftest import ServeApi, Served

# Run after the other tests, alone (see pyproject's markers): 2 to 4 processes must each make their calls in
# real time, which the other tests' workers, on a machine of 2 cores, would starve.
pytestmark = pytest.mark.alone

SPAWN = multiprocessing.get_context("spawn")
LIMIT, WINDOW, SECONDS = 100, 4.0, 12.0


def run(
    served: Served,
    store: Store,
    processes: int,
    tasks: int,
    declared: str | None,
    most_429s: int = 0,
    before_turn: float | None = None,
) -> list[Any]:
    """Runs the processes; what each reported. Asserts on what the server counted: at most ``most_429s``
    429s, at least 90 % of the limit in each whole window, never more than the limit. ``before_turn``: the
    processes start that many seconds before one of the server's windows ends (else whenever they are ready)."""
    barrier = SPAWN.Barrier(processes + 1)
    results = SPAWN.Queue()
    started = [
        SPAWN.Process(target=call_for_a_while, args=(served.url, store, declared, tasks, SECONDS, barrier, results))
        for _ in range(processes)
    ]
    for process in started:
        process.start()
    try:
        if before_turn is not None:
            ready = time.monotonic() + 60
            while barrier.n_waiting < processes and time.monotonic() < ready:
                time.sleep(0.01)
            # The next turn of the server's windows at least half a window away, less `before_turn`.
            since = time.monotonic() - served.api.start + WINDOW / 2
            time.sleep((since // WINDOW + 1) * WINDOW - since + WINDOW / 2 - before_turn)
        barrier.wait(timeout=60)
        began = time.monotonic()
        # Generous: 12 s of calls, then the last ones' waits; a loaded machine only makes them slower.
        reports = [results.get(timeout=180) for _ in started]
        ended = began + SECONDS
    finally:
        for process in started:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    failures = [report[2] for report in reports if report[2] is not None]
    assert not failures, failures[0]
    api = served.api
    # The server's windows that the calls covered whole (the first and last are cut by the start and end).
    whole = [
        index
        for index in api.accepted
        if began <= api.start + index * WINDOW and api.start + (index + 1) * WINDOW <= ended
    ]
    assert len(whole) >= 2, (began - api.start, dict(api.accepted))
    used = [api.accepted[index] for index in whole]
    codes = sum((Counter(report[0]) for report in reports), Counter())
    windows, refusals = sorted(api.accepted.items()), sorted(api.refused_in.items())
    print(f"whole windows {used} of {LIMIT} (all: {windows}), 429s {api.refused} {refusals}, codes {dict(codes)}")
    assert api.refused <= most_429s, (dict(api.accepted), dict(codes))
    assert all(count >= 0.9 * LIMIT for count in used), used
    assert all(count <= LIMIT for count in api.accepted.values())
    return reports


def test_four_processes_on_a_shared_region_draw_no_429_and_use_the_servers_windows(
    serve_api: ServeApi, tmp_path: Path
) -> None:
    served = serve_api("ietf", LIMIT, WINDOW)  # RateLimit-Policy: "api";q=100;w=4, RateLimit: "api";r=..;t=..
    reports = run(served, ("shared", str(tmp_path / "region")), 4, 16, f"{LIMIT}/{WINDOW:g}s")
    assert all(report[1] for report in reports), "a process made no call"


def test_four_processes_starting_just_before_a_servers_window_ends_use_its_next_one(
    serve_api: ServeApi, tmp_path: Path
) -> None:
    # The first calls straddle the server's turn (how many fall on either side depends on the machine's speed):
    # those past it land in its next window, whose word shows that the window announced by the calls before it
    # is over. The next window is then what the server says is left, not what the announced one had: it is used
    # whole. The calls still on their way across the turn, which that word did not count, may be counted twice:
    # at most one 429 per task.
    served = serve_api("ietf", LIMIT, WINDOW)
    region = ("shared", str(tmp_path / "region"))
    run(served, region, 4, 16, f"{LIMIT}/{WINDOW:g}s", most_429s=4 * 16, before_turn=0.3)


def test_two_machines_on_redis_draw_no_429_and_use_the_servers_windows(
    serve_api: ServeApi, redis_server: RedisServer, redis_prefix: str
) -> None:
    served = serve_api("openai", LIMIT, WINDOW)  # x-ratelimit-limit-requests: 100, -reset-requests: 1.234s
    run(served, ("redis", redis_server.url, redis_prefix), 2, 16, f"{LIMIT}/{WINDOW:g}s")


def test_four_processes_need_no_number_the_server_announces_it(serve_api: ServeApi, tmp_path: Path) -> None:
    # No group declared: each process makes the group on the server's first word (RateLimit-Policy: q=100;w=4),
    # its first call going alone until then. Those first calls are in no budget: the word one brings back may
    # not count the other processes' first calls yet, so up to 3 of them may cost a 429 (retried) at the start.
    served = serve_api("ietf", LIMIT, WINDOW)
    run(served, ("shared", str(tmp_path / "region")), 4, 16, None, most_429s=3)
