"""The shared-memory store (``backend=rk.Shared(...)``) between real processes.

Processes decide on one region: forked after the limiter was made, spawned (each builds its own limiter on
the same file), the workers of a real ``uvicorn --workers 3`` and ``gunicorn -w 3`` (with ``--preload``, which
forks after the limiter was made, and without), processes killed with SIGKILL in the middle
of deciding or holding permits, a process flooding a full region; and the regions a process must refuse or
cannot make, and ``python -m ratekeeper inspect``. The regions live in the test's ``tmp_path``
(``rk.Shared(path=...)``), except the one test of a named region, which removes its ``/dev/shm`` file when
it ends. Every rate is hourly, so that no refill happens within a test: the counts are exact, and no test
sleeps to time the limiter.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import json
import multiprocessing
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from _web import stop

FORK = multiprocessing.get_context("fork")
SPAWN = multiprocessing.get_context("spawn")

#: Small regions (about 1 MB): the default of 1,000,000 keys would make a 45 MB file per test.
MAX_KEYS = 10_000


def shared(path: Path, *args: Any, max_keys: int = MAX_KEYS, **options: Any) -> rk.Limiter:
    """A limiter keeping its states in the region at ``path``."""
    return rk.Limiter(*args, max_keys=max_keys, backend=rk.Shared(path=path), **options)


@contextlib.contextmanager
def reaping(processes: list[BaseProcess]) -> Iterator[list[BaseProcess]]:
    """Yields ``processes`` (started inside the block, or later added); on leaving, kills (by pid) and
    reaps any that still runs, so that a failing test leaves no process behind."""
    try:
        yield processes
    finally:
        for process in processes:
            if process.pid is not None and process.exitcode is None:
                process.kill()
                process.join(5)


def joined(processes: list[BaseProcess], timeout: float = 20) -> None:
    """Waits for ``processes``, which must all end well."""
    for process in processes:
        process.join(timeout)
        assert process.exitcode == 0, f"{process.name} ended with {process.exitcode}"


def drain(limiter: rk.Limiter, peer: str, path: str | None = None) -> int:
    """Takes every admission the key still has, until it refuses: how many it had."""
    taken = 0
    while True:
        decision = limiter.check(peer, path)
        if not decision.allowed:
            return taken
        taken += 1
        if decision.remaining:
            assert limiter.check(peer, path, cost=decision.remaining).allowed
            taken += decision.remaining


# --- fork and spawn: every process decides on the same states, exactly ----------------------------------------------

#: Keys every process decides on; each process also has one key of its own (``own-INDEX``).
COMMON = ("hot", "k1", "k2", "k3", "k4")
PROCESSES = 4
ATTEMPTS = 40


def decide(limiter: rk.Limiter, index: int) -> dict[str, int]:
    """``ATTEMPTS`` rounds over the common keys and this process's own: admissions per key."""
    admitted: Counter[str] = Counter()
    keys = (*COMMON, f"own-{index}")
    for _ in range(ATTEMPTS):
        for key in keys:
            admitted[key] += limiter.allow(key)
    return dict(admitted)


def decide_inherited(limiter: rk.Limiter, index: int, start: Any, results: Any) -> None:
    """A forked child: decides on the limiter its parent made (the mapping is inherited)."""
    start.wait(10)
    results.put(decide(limiter, index))


def decide_own(path: Path, index: int, start: Any, results: Any) -> None:
    """A spawned child: builds its own limiter on ``path``, every child at once (one creates the region,
    the others attach to it, maybe while it is being made), then decides."""
    start.wait(10)
    limiter = shared(path, "10/hour")
    results.put(decide(limiter, index))


def assert_exact(results: list[dict[str, int]], limiter: rk.Limiter) -> None:
    """Every key, common or own, admitted exactly its 10 over every process; the region counts them all."""
    totals: Counter[str] = Counter()
    for admitted in results:
        totals.update(admitted)
    assert totals == {key: 10 for key in (*COMMON, *(f"own-{i}" for i in range(PROCESSES)))}
    region = limiter.stats()["shared"]
    assert region is not None
    decisions = PROCESSES * ATTEMPTS * (len(COMMON) + 1)
    keys = len(COMMON) + PROCESSES
    assert (region["keys"], region["allowed"], region["refused"]) == (keys, 10 * keys, decisions - 10 * keys)
    assert not limiter.allow("hot"), "this process sees the key the others used up"


def test_forked_after_the_limiter_was_made_processes_admit_exactly_the_burst(tmp_path: Path) -> None:
    path = tmp_path / "region"
    limiter = shared(path, "10/hour")
    start, results = FORK.Barrier(PROCESSES), FORK.SimpleQueue()
    with reaping([]) as processes:
        for index in range(PROCESSES):
            processes.append(FORK.Process(target=decide_inherited, args=(limiter, index, start, results)))
            processes[-1].start()
        admitted = [results.get() for _ in processes]
        joined(processes)
    results.close()
    assert_exact(admitted, limiter)


def test_spawned_processes_each_opening_the_path_admit_exactly_the_burst(tmp_path: Path) -> None:
    path = tmp_path / "region"
    start, results = SPAWN.Barrier(PROCESSES), SPAWN.SimpleQueue()
    with reaping([]) as processes:
        for index in range(PROCESSES):
            processes.append(SPAWN.Process(target=decide_own, args=(path, index, start, results)))
            processes[-1].start()
        admitted = [results.get() for _ in processes]
        joined(processes)
    results.close()
    assert path.stat().st_mode & 0o777 == 0o600
    assert_exact(admitted, shared(path, "10/hour"))


def report_wait(path: Path, results: Any) -> None:
    """A child: its own limiter on ``path``; the region's clock and how long the spent key must wait."""
    limiter = shared(path, "1/hour")
    region = limiter.stats()["shared"]
    assert region is not None
    results.put((region["clock"], limiter.check("spent").retry_after))


@pytest.mark.parametrize("context", [FORK, SPAWN], ids=["fork", "spawn"])
def test_every_process_reads_the_regions_one_clock(tmp_path: Path, context: Any) -> None:
    """A wait computed in one process from a time another wrote is the same wait: the processes read one
    clock (the region's), not each its own from its own origin (which would put it hours off)."""
    path = tmp_path / "region"
    limiter = shared(path, "1/hour")
    region = limiter.stats()["shared"]
    assert region is not None
    assert region["clock"] in ("tsc", "kernel")
    assert limiter.allow("spent")
    before = limiter.check("spent").retry_after
    results = context.SimpleQueue()
    with reaping([context.Process(target=report_wait, args=(path, results))]) as processes:
        processes[0].start()
        clock, theirs = results.get()
        joined(processes)
    after = limiter.check("spent").retry_after
    results.close()
    assert clock == region["clock"]
    # Read in between (the clocks agree to within 100 µs at most; 1 ms of slack).
    assert after - 0.001 <= theirs <= before + 0.001, (before, theirs, after)


# --- uvicorn --workers 3: one limit across the workers of a real server ----------------------------------------------

APP = """
import contextlib
import os
import time
from pathlib import Path

import ratekeeper as rk
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

limiter = rk.Limiter("10/hour", max_keys=10_000, backend=rk.Shared(path=os.environ["RK_TEST_REGION"]))


async def hit(request):
    allowed = limiter.allow(request.query_params["peer"])
    # Holds this worker's event loop a moment, so that the connections arriving meanwhile are accepted
    # by the other workers: the requests are spread over the three.
    time.sleep(0.02)
    return JSONResponse({"pid": os.getpid()}, status_code=200 if allowed else 429)


async def pid(request):
    return JSONResponse({"pid": os.getpid()})


@contextlib.asynccontextmanager
async def lifespan(app):
    Path(os.environ["RK_TEST_READY"], str(os.getpid())).touch()
    yield


app = Starlette(routes=[Route("/hit", hit), Route("/pid", pid)], lifespan=lifespan)
"""

WORKERS = 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def serving(name: str, command: list[str], tmp_path: Path, port: int) -> Iterator[tuple[str, set[int]]]:
    """Runs ``command`` (a server of ``WORKERS`` workers on ``port`` whose app shares a region of
    ``tmp_path``, each worker touching a file named by its pid in ``RK_TEST_READY`` when it starts): its URL
    and its workers' pids once all have started. Stopped, and its process group killed, when it ends."""
    ready = tmp_path / "ready"
    ready.mkdir()
    log = tmp_path / f"{name}.log"
    env = {**os.environ, "RK_TEST_REGION": str(tmp_path / "region"), "RK_TEST_READY": str(ready)}
    with log.open("wb") as output:
        # Its workers in a process group of their own, to end them all at the end.
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while len(list(ready.iterdir())) < WORKERS or not serves(url):
            if process.poll() is not None:
                pytest.fail(f"{name} exited with {process.returncode}:\n{log.read_text(errors='replace')}")
            assert time.monotonic() < deadline, f"{name}'s workers did not start:\n{log.read_text(errors='replace')}"
            time.sleep(0.02)
        yield url, {int(entry.name) for entry in ready.iterdir()}
    finally:
        stop(process)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # a worker the supervisor left behind


@pytest.fixture
def uvicorn_workers(tmp_path: Path) -> Iterator[tuple[str, set[int]]]:
    """``uvicorn --workers 3`` serving an app whose limiter is shared in a region of ``tmp_path``."""
    (tmp_path / "app.py").write_text(APP)
    port = free_port()
    options = {"--app-dir": str(tmp_path), "--host": "127.0.0.1", "--port": str(port), "--workers": str(WORKERS)}
    command = [sys.executable, "-m", "uvicorn", "app:app", *itertools.chain(*options.items())]
    with serving("uvicorn", [*command, "--log-level", "warning", "--no-access-log"], tmp_path, port) as served:
        yield served


def serves(url: str) -> bool:
    try:
        return httpx.get(f"{url}/pid", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_uvicorn_workers_share_one_limit(uvicorn_workers: tuple[str, set[int]]) -> None:
    assert_one_limit(*uvicorn_workers)


def assert_one_limit(url: str, workers: set[int]) -> None:
    """60 requests of one key across the server's workers admit exactly 10, another key's 15 its own 10,
    and more than one worker served them."""
    assert len(workers) == WORKERS
    # A new connection per request (the workers share the listening socket: a kept-alive connection would
    # stay with one worker), six at a time.
    with httpx.Client(base_url=url, headers={"Connection": "close"}, timeout=10) as client:

        def hit(peer: str) -> tuple[int, int]:
            response = client.get("/hit", params={"peer": peer})
            pid: int = response.json()["pid"]
            return response.status_code, pid

        with ThreadPoolExecutor(6) as pool:
            one = list(pool.map(hit, ["one"] * 60))
            two = list(pool.map(hit, ["two"] * 15))
    assert Counter(status for status, _ in one) == {200: 10, 429: 50}
    assert Counter(status for status, _ in two) == {200: 10, 429: 5}, "another key has its own 10"
    served = {pid for _, pid in one + two}
    assert served <= workers
    assert len(served) > 1, f"every request was served by one worker ({served}): the test proves nothing"


# --- gunicorn -w 3, with and without --preload (the limiter made before the workers fork) -----------------------

WSGI_APP = """
import json
import os
import time
from urllib.parse import parse_qs

import ratekeeper as rk

# With --preload, made in gunicorn's master before it forks the workers, which inherit the mapped region.
limiter = rk.Limiter("10/hour", max_keys=10_000, backend=rk.Shared(path=os.environ["RK_TEST_REGION"]))


def app(environ, start_response):
    if environ["PATH_INFO"] == "/hit":
        allowed = limiter.allow(parse_qs(environ["QUERY_STRING"])["peer"][0])
        time.sleep(0.02)  # holds this worker a moment: the next connections go to the others
    else:
        allowed = True
    start_response("200 OK" if allowed else "429 Too Many Requests", [("Content-Type", "application/json")])
    return [json.dumps({"pid": os.getpid()}).encode()]
"""

GUNICORN_CONFIG = """
import os
from pathlib import Path


def post_fork(server, worker):
    Path(os.environ["RK_TEST_READY"], str(os.getpid())).touch()
"""


@pytest.fixture(params=[True, False], ids=["preload", "no_preload"])
def gunicorn_workers(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, set[int]]]:
    """``gunicorn -w 3`` (sync workers; ``--preload`` or not) serving a WSGI app whose limiter is shared in
    a region of ``tmp_path``."""
    (tmp_path / "wsgi_app.py").write_text(WSGI_APP)
    (tmp_path / "gunicorn_conf.py").write_text(GUNICORN_CONFIG)
    port = free_port()
    command = [
        *(sys.executable, "-m", "gunicorn", "--chdir", str(tmp_path), "--config", str(tmp_path / "gunicorn_conf.py")),
        *("--bind", f"127.0.0.1:{port}", "--workers", str(WORKERS), "--log-level", "warning"),
        *(["--preload"] if request.param else []),
        "wsgi_app:app",
    ]
    with serving("gunicorn", command, tmp_path, port) as served:
        yield served


def test_gunicorn_workers_share_one_limit_with_and_without_preload(gunicorn_workers: tuple[str, set[int]]) -> None:
    assert_one_limit(*gunicorn_workers)


# --- SIGKILL while deciding: no hang, no over-admission beyond the decisions in flight -------------------------------

KILLS = 20
CHURNERS = 3
#: What the churning processes decide on, as (peer, path): one key used up at once, one that admits all
#: along (a burst of a million, so admissions are in flight at every kill), and 200 keys of 3 (new states
#: are inserted while processes die).
TARGETS = [("small", "/small"), ("big", "/big")] + [(f"m{j}", "/many") for j in range(200)]
LIMITS = [10, 1_000_000] + [3] * 200
CHURN_RULES = [
    rk.Rule("^/small", "small", "10/hour"),
    rk.Rule("^/big", "big", "1/hour", burst=1_000_000),
    rk.Rule("^/many", "many", "3/hour"),
]


def churn(limiter: rk.Limiter, slot: int, admitted: Any, progress: Any, pending: Any, stop: Any) -> None:
    """Decides in a loop until told to stop (or killed). Its own cells only: ``admitted[slot, target]``
    counts admissions, ``progress[slot]`` rounds, ``pending[slot]`` the target being decided (+1), set
    before the decision and cleared after it is counted: a process killed with it set may have been
    admitted unreported. No lock guards them (a process killed holding a lock would wedge the others)."""
    base = slot * len(TARGETS)
    rounds = 0
    while not stop.value:
        for target in (0, 1, 2 + (rounds + slot * 67) % 200):
            peer, path = TARGETS[target]
            pending[slot] = target + 1
            if limiter.allow(peer, path):
                admitted[base + target] += 1
            pending[slot] = 0
        rounds += 1
        progress[slot] = rounds


def test_processes_killed_while_deciding_neither_wedge_the_others_nor_over_admit(tmp_path: Path) -> None:
    limiter = shared(tmp_path / "region", rules=CHURN_RULES)
    slots = CHURNERS + KILLS
    admitted = FORK.RawArray(ctypes.c_int64, slots * len(TARGETS))
    progress = FORK.RawArray(ctypes.c_int64, slots)
    pending = FORK.RawArray(ctypes.c_int64, slots)
    stop = FORK.RawValue(ctypes.c_int8, 0)
    rng = random.Random(21)
    running: dict[int, BaseProcess] = {}

    def start(slot: int) -> None:
        process = FORK.Process(target=churn, args=(limiter, slot, admitted, progress, pending, stop))
        process.start()
        running[slot] = process
        processes.append(process)

    def every_one_progresses(after: str) -> None:
        """Each running process finishes a round of decisions within 2 s (none waits forever on a lock
        a dead process held)."""
        seen = {slot: progress[slot] for slot in running}
        deadline = time.monotonic() + 2
        while any(progress[slot] <= seen[slot] for slot in running):
            stuck = [slot for slot in running if progress[slot] <= seen[slot]]
            assert time.monotonic() < deadline, f"processes {stuck} made no decision within 2 s {after}"
            time.sleep(0.001)

    unknown: Counter[int] = Counter()  # targets a killed process was deciding on
    with reaping([]) as processes:
        for slot in range(CHURNERS):
            start(slot)
        every_one_progresses("after starting")
        for kill in range(KILLS):
            time.sleep(rng.uniform(0, 0.01))  # a random instant of its loop, not a timing under test
            victim = rng.choice(sorted(running))
            process = running.pop(victim)
            os.kill(process.pid, signal.SIGKILL)  # type: ignore[arg-type]
            process.join(5)
            assert process.exitcode == -signal.SIGKILL
            if pending[victim]:
                unknown[pending[victim] - 1] += 1
            start(CHURNERS + kill)
            every_one_progresses(f"after kill {kill + 1}")
        stop.value = 1
        joined(list(running.values()))

    over = 0
    for target, ((peer, path), limit) in enumerate(zip(TARGETS, LIMITS, strict=True)):
        reported = sum(admitted[slot * len(TARGETS) + target] for slot in range(slots))
        total = reported + drain(limiter, peer, path)
        assert total <= limit + KILLS, f"{peer} admitted {total} of {limit}"
        assert total + unknown[target] >= limit, f"{peer} admitted {total} of {limit}: admissions were lost"
        over += max(0, total - limit)
    assert over <= KILLS, f"{over} admissions over the limits after {KILLS} kills: more than the decisions in flight"
    region = limiter.stats()["shared"]
    assert region is not None
    assert region["keys"] == len(TARGETS)


# --- concurrency permits of a dead process come back ----------------------------------------------------------------

PERMIT_RULES = [rk.Rule("", "jobs", limits=[rk.Limit(concurrency=3)])]


def hold_permits(path: Path, held: Any, release: Any) -> None:
    """Takes every permit of ``tenant`` and holds them until killed (or released)."""
    limiter = shared(path, rules=PERMIT_RULES)
    with contextlib.ExitStack() as stack:
        for _ in range(3):
            stack.enter_context(limiter.concurrent("tenant"))
        held.set()
        release.wait(30)


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_the_permits_of_a_killed_process_come_back(tmp_path: Path, reaped: bool) -> None:
    path = tmp_path / "region"
    limiter = shared(path, rules=PERMIT_RULES)
    held, release = FORK.Event(), FORK.Event()
    holder = FORK.Process(target=hold_permits, args=(path, held, release))
    with reaping([holder]):
        holder.start()
        assert held.wait(10), "the child did not take its permits"
        for _ in range(3):  # each refusal looks for dead holders, and finds the child alive
            with pytest.raises(rk.RateLimited) as refused, limiter.concurrent("tenant"):
                pass
            assert refused.value.decision.refused_by == "concurrency"
        with limiter.concurrent("another"):
            pass  # another key has permits of its own
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        if reaped:
            holder.join(5)
        else:  # killed, not yet waited for: a zombie is dead too
            deadline = time.monotonic() + 5
            while Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                assert time.monotonic() < deadline, "the child did not die"
                time.sleep(0.001)
        with contextlib.ExitStack() as stack:
            decisions = [stack.enter_context(limiter.concurrent("tenant")) for _ in range(3)]
            assert all(decision.permits_held for decision in decisions)
            with pytest.raises(rk.RateLimited), limiter.concurrent("tenant"):
                pass  # the dead process's 3 came back once, not more
        with limiter.concurrent("tenant"):
            pass  # and this process's own permits came back when it left
        holder.join(5)
    assert holder.exitcode == -signal.SIGKILL


# --- a full region: one-shot keys never push out a busy one ---------------------------------------------------------

#: The busy key's group: one rate limit (decided in place), several, a rate limit with concurrency permits
#: (as the web integrations use), a sliding log (its entries in the region's log chunks).
FLOOD_LIMITS: dict[str, list[rk.Limit | str]] = {
    "one_limit": ["5/hour"],
    "two_limits": ["5/hour", "50/day"],
    "rate_and_permits": ["5/hour", rk.Limit(concurrency=4)],
    "sliding_log": [rk.Limit("5/hour", algorithm="sliding_log")],
}


def flooding(path: Path, kind: str) -> rk.Limiter:
    return shared(path, rules=[rk.Rule("", "api", limits=FLOOD_LIMITS[kind])], max_keys=2_000)


def flood(path: Path, kind: str, orders: Any) -> None:
    """Decides once for each of the one-shot keys it is told of, chunk by chunk, answering the admissions."""
    limiter = flooding(path, kind)
    while (chunk := orders.recv()) is not None:
        orders.send(sum(limiter.allow(f"once-{i}") for i in range(*chunk)))


@pytest.mark.parametrize("kind", FLOOD_LIMITS)
def test_a_busy_key_outlives_a_flood_of_one_shot_keys_from_another_process(tmp_path: Path, kind: str) -> None:
    """Another process floods 100,000 one-shot keys into a region of 2,000 while this one keeps using a
    key it has used up (a tenth of all the requests): the busy key stays, refused, never admitted again."""
    path = tmp_path / "region"
    limiter = flooding(path, kind)
    assert [limiter.allow("busy") for _ in range(6)] == [True] * 5 + [False]
    orders, theirs = FORK.Pipe()
    flooder = FORK.Process(target=flood, args=(path, kind, theirs))
    try:
        with reaping([flooder]):
            flooder.start()
            # 1,000 one-shot keys at a time, the busy key used 100 times before each thousand (as often from
            # the first: used 6 times only, decay soon leaves it no more used than a one-shot key).
            for chunk in range(101):
                admitted = sum(limiter.allow("busy") for _ in range(100))
                assert admitted == 0, (
                    f"the busy key, refused 100 times for every 1,000 one-shot keys, was evicted as least used "
                    f"after {chunk},000 of them: its usage forgotten, it was admitted {admitted} times more"
                )
                if chunk < 100:
                    orders.send((chunk * 1_000, (chunk + 1) * 1_000))
                    assert orders.recv() == 1_000, "a new key is admitted"
            orders.send(None)
            joined([flooder])
    finally:
        orders.close()
        theirs.close()
    region = limiter.stats()["shared"]
    assert region is not None
    assert 0 < region["keys"] <= 2_000
    assert region["evictions"] > 0
    assert region["groups"] == {"api": region["keys"]}
    assert not limiter.allow("busy")


# --- regions refused: another layout, another user, a symlink, open to others ----------------------------------------


def made(path: Path, **options: Any) -> bytes:
    """Makes a region at ``path`` and lets it go (giving its process slot back): its bytes."""
    limiter = shared(path, "10/hour", **options)
    assert limiter.allow("someone")
    del limiter
    return path.read_bytes()


def refusal(path: Path, **options: Any) -> str:
    with pytest.raises(rk.InvalidValue) as refused:
        shared(path, "10/hour", **options)
    assert isinstance(refused.value, ValueError)
    return str(refused.value)


def test_a_region_of_another_layout_or_max_keys_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "region"
    made(path)
    (layout,) = struct.unpack_from("<I", path.read_bytes(), 8)
    assert struct.unpack_from("<Q", path.read_bytes(), 0) == (int.from_bytes(b"rkregion", "little"),)
    with path.open("r+b") as region:
        region.seek(8)
        region.write(struct.pack("<I", layout + 1))
    before = path.read_bytes()
    message = refusal(path)
    assert f"layout {layout + 1}" in message
    assert f"layout {layout}" in message
    assert str(path) in message
    bigger = tmp_path / "bigger"
    made(bigger)
    assert "max_keys" in refusal(bigger, max_keys=2 * MAX_KEYS)
    assert path.read_bytes() == before, "a refused region is left as it was"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
def test_another_users_region_is_refused_naming_the_owner(tmp_path: Path) -> None:
    path = tmp_path / "region"
    before = made(path)
    os.chown(path, 12345, -1)
    message = refusal(path)
    assert "owned by user 12345" in message
    assert str(path) in message
    assert path.read_bytes() == before


def test_a_region_open_to_other_users_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "region"
    before = made(path)
    path.chmod(0o644)
    message = refusal(path)
    assert "mode 644" in message
    assert "want 600" in message
    assert path.read_bytes() == before


def test_a_symlink_is_refused_and_its_target_never_touched(tmp_path: Path) -> None:
    region = tmp_path / "region"
    before = made(region)
    link = tmp_path / "link"
    link.symlink_to(region)
    assert str(link) in refusal(link)
    assert region.read_bytes() == before
    # A dangling link: following it would create the file it names, wherever that is.
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "victim")
    assert str(dangling) in refusal(dangling)
    assert not (tmp_path / "victim").exists()


def test_a_fifo_is_refused_as_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert "not a regular file" in refusal(fifo)


# --- no room for the region: a clear error when it is made, and no file left ----------------------------------------

NO_ROOM = """
import resource, signal, sys
import ratekeeper as rk

if sys.argv[2] == "fsize":
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
try:
    rk.Limiter("10/hour", max_keys=100_000, backend=rk.Shared(path=sys.argv[1]))
except ValueError as error:
    print(type(error).__name__, error)
else:
    sys.exit("a 5 MB region was made in 2 MB")
# There is room for a smaller region at the same path: nothing was left in its way.
rk.Limiter("10/hour", max_keys=1_000, backend=rk.Shared(path=sys.argv[1]))
"""


def no_room(path: Path, how: str) -> str:
    """Makes a region of 100,000 keys (5 MB) where only 2 MB fit, in a child: what it printed."""
    child = subprocess.run(
        [sys.executable, "-c", NO_ROOM, str(path), how], capture_output=True, text=True, timeout=30, check=False
    )
    assert child.returncode == 0, child.stderr
    return child.stdout


def test_a_region_without_room_under_a_file_size_limit_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "region"
    output = no_room(path, "fsize")
    assert output.startswith("InvalidValue ")
    assert "cannot reserve" in output
    assert str(path) in output
    assert "lower max_keys" in output
    assert path.stat().st_size < 2 << 20  # the small region made afterwards, not the big one's remains


def decide_alongside(path: Path, attempts: dict[str, int], start: Any) -> None:
    limiter = shared(path, "10/hour")
    start.wait(10)
    for peer, count in attempts.items():
        for _ in range(count):
            limiter.allow(peer)


def inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ratekeeper", "inspect", *args], capture_output=True, text=True, timeout=30, check=False
    )


def test_inspect_shows_what_two_processes_decided_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "region"
    start = FORK.Barrier(2)
    first = FORK.Process(target=decide_alongside, args=(path, {"alice": 15, "carol": 12, "dave": 2}, start))
    second = FORK.Process(target=decide_alongside, args=(path, {"alice": 3, "bob": 4, "dave": 2}, start))
    with reaping([first, second]) as processes:
        for process in processes:
            process.start()
        joined(processes)
    before = hashlib.sha256(path.read_bytes()).digest()
    shown = inspect("--path", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    stats = json.loads(shown.stdout)
    assert stats.pop("clock") in ("tsc", "kernel")
    # alice: 18 tries, 10 admitted; carol: 12 tries, 10 admitted; bob and dave: 4 each, all admitted.
    assert stats == {
        "path": str(path),
        "keys": 4,
        "max_keys": MAX_KEYS,
        "evictions": 0,
        "dropped": 0,
        "allowed": 28,
        "refused": 10,
        "top_refused": [["alice", 8], ["carol", 2]],
        "groups": {"default": 4},
        "stalls": 0,
    }
    text = inspect("--path", str(path))
    assert text.returncode == 0, text.stderr
    assert "4 keys of 10,000" in text.stdout
    assert "28 allowed, 10 refused" in text.stdout
    assert text.stdout.index("alice") < text.stdout.index("carol")
    assert hashlib.sha256(path.read_bytes()).digest() == before, "inspect wrote to the region"
    missing = inspect("--path", str(tmp_path / "missing"))
    assert missing.returncode == 2
    assert missing.stderr.startswith("ratekeeper inspect: cannot open the shared region")
    assert "missing" in missing.stderr
    assert not (tmp_path / "missing").exists()


def decide_named(name: str, start: Any) -> None:
    limiter = rk.Limiter("10/hour", max_keys=MAX_KEYS, backend=rk.Shared(name))
    start.wait(10)
    for _ in range(12):
        limiter.allow("erin")


def test_a_named_region_is_in_dev_shm_and_inspect_finds_it_by_name() -> None:
    name = f"test-{uuid.uuid4().hex}"
    path = Path(f"/dev/shm/ratekeeper-{name}")
    try:
        start = FORK.Barrier(2)
        other = FORK.Process(target=decide_named, args=(name, start))
        with reaping([other]):
            other.start()
            limiter = rk.Limiter("10/hour", max_keys=MAX_KEYS, backend=rk.Shared(name))
            start.wait(10)
            joined([other])
        assert isinstance(limiter.backend, rk.Shared)
        assert limiter.backend.path == str(path)
        assert path.stat().st_mode & 0o777 == 0o600
        assert not limiter.allow("erin"), "this process sees what the other used, by name"
        shown = inspect(name, "--json")
        assert shown.returncode == 0, shown.stderr
        stats = json.loads(shown.stdout)
        assert (stats["path"], stats["keys"], stats["allowed"], stats["refused"]) == (str(path), 1, 10, 3)
    finally:
        path.unlink(missing_ok=True)
