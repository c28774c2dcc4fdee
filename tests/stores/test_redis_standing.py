"""Lease mode's standing shares (``rk.Redis(mode="lease", standing_shares=n)``): part of every key's budget split
in advance into shares, one per process, so that a process decides keys it has never seen without a round trip.

The promise under test is lease mode's: never above the limit, across processes, stated the strongest way
memory's own algorithm can state it: every admission the fleet made, replayed at its instant into one limiter
in memory with the same rules, is admitted there too; through shares claimed, lapsed, taken over from a
process killed with SIGKILL, refused to processes of other settings, and a pool lost in a restart. Limiters
share a ``ManualClock`` reading (the pool and the scripts decide at the time they are given); ``sync_now()``
renews a share and waits for the pool's answer, so every step is deterministic.
"""

from __future__ import annotations

import itertools
import multiprocessing
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import pytest
import ratekeeper as rk
from _redis import RedisServer
from _support import fresh_per_example
from hypothesis import given
from hypothesis import strategies as st

SPAWN = multiprocessing.get_context("spawn")

START = 1000.0
START_NS = 1_000_000_000_000
SECOND = 1_000_000_000
#: A share's time to live in the pool with these tests' span (0.05 s): at least a second.
TTL_NS = SECOND

prefixes = itertools.count()


def standing_backend(server: RedisServer, prefix: str, shares: int, **options: Any) -> rk.Redis:
    return rk.Redis(
        server.url, mode="lease", prefix=prefix, lease_span=0.05, standing_shares=shares, on_error="raise",
        timeout=2.0, **options,
    )  # fmt: skip


def rules(rate: str | list[str], algorithm: rk.Algorithm = "gcra") -> dict[str, Any]:
    limits = [rk.Limit(r, algorithm=algorithm) for r in ([rate] if isinstance(rate, str) else rate)]
    return {"rules": [rk.Rule("^/api", "api", limits=limits)]}


def refused_in_memory(
    options: dict[str, Any], admissions: list[tuple[int, str]], change: tuple[int, str] | None = None
) -> list[tuple[int, str]]:
    """The admissions one limiter in memory with the same rules refuses at their instants (none, if the fleet
    kept the promise); with ``change``, the group's rate becomes ``change[1]`` at ``change[0]``."""
    clock = rk.ManualClock(START)
    memory = rk.Limiter(clock=clock, **options)
    refused = []
    for at_ns, peer in sorted(admissions):
        if change is not None and at_ns >= change[0]:
            clock._advance_to_ns(change[0])
            memory.update_rule("api", change[1])
            change = None
        clock._advance_to_ns(at_ns)
        if not memory.allow(peer, "/api"):
            refused.append((at_ns, peer))
    return refused


def round_trips(limiter: rk.Limiter) -> int:
    count: int = limiter.stats()["backend_seconds"]["count"]
    return count


def share_of(limiter: rk.Limiter) -> int | None:
    """The share the limiter holds once it has asked the pool (and waited)."""
    limiter.sync_now()
    return limiter.stats()["standing_share"]


@dataclass
class Fleet:
    """Limiters with standing shares on one key space and one clock reading, with every admission made."""

    limiters: list[rk.Limiter]
    clock: rk.ManualClock
    options: dict[str, Any]
    admissions: list[tuple[int, str]] = field(default_factory=list)
    now_ns: int = START_NS

    def allow(self, who: int, peer: str = "k") -> bool:
        allowed = self.limiters[who].allow(peer, "/api")
        if allowed:
            self.admissions.append((self.now_ns, peer))
        return allowed

    def advance_ns(self, ns: int) -> None:
        self.now_ns += ns
        self.clock._advance_to_ns(self.now_ns)


@pytest.fixture
def fleet(redis_server: RedisServer, redis_prefix: str) -> Callable[..., Fleet]:
    """``fleet(n, shares, **limiter_options)``: n limiters with ``shares`` standing shares on one prefix."""

    def build(n: int, shares: int, **options: Any) -> Fleet:
        prefix = f"{redis_prefix}{next(prefixes)}:"
        clock = rk.ManualClock(START)
        backends = [standing_backend(redis_server, prefix, shares) for _ in range(n)]
        return Fleet([rk.Limiter(clock=clock, backend=b, **options) for b in backends], clock, options)

    return build


# One process ------------------------------------------------------------------------------------------------


def test_a_share_decides_keys_it_has_never_seen_without_a_round_trip(fleet: Callable[..., Fleet]) -> None:
    one = fleet(1, 4, **rules("1000/s"))
    limiter = one.limiters[0]
    assert share_of(limiter) == 1
    # A pool made now frees no share before a time to live (a holder from before a restart may spend until
    # then), and its keys fill at the share's rate after: an hour later they are full.
    one.advance_ns(3600 * SECOND)
    assert share_of(limiter) == 1
    before = round_trips(limiter)
    assert all(one.allow(0, f"peer-{i}") for i in range(2000))
    assert round_trips(limiter) == before
    # 1000/s with burst 1000, half split into 4 shares: 125 at once per key here, then Redis's part (500).
    # The 3 shares nobody holds are idle: the capacity standing shares cost.
    assert sum(one.allow(0, "hot") for _ in range(1200)) == 125 + 500
    assert round_trips(limiter) > before
    assert refused_in_memory(one.options, one.admissions) == []


def test_a_share_spends_nothing_once_its_time_to_live_passes_unrenewed(fleet: Callable[..., Fleet]) -> None:
    one = fleet(1, 4, **rules("1000/s"))
    limiter = one.limiters[0]
    share_of(limiter)
    one.advance_ns(3600 * SECOND)
    assert share_of(limiter) == 1
    one.advance_ns(TTL_NS)
    # Not renewed at this reading: the share lapsed here, and Redis decides (a round trip).
    assert limiter.stats()["standing_share"] is None
    before = round_trips(limiter)
    assert one.allow(0, "fresh")
    assert round_trips(limiter) == before + 1


def test_groups_that_cannot_be_split_keep_their_whole_limit_in_redis(fleet: Callable[..., Fleet]) -> None:
    options = {
        "rules": [
            rk.Rule("^/api/small", "small", "3/s"),  # a share would round to nothing
            rk.Rule("^/api/window", "window", "1000/s", algorithm="fixed_window"),
        ]
    }
    one = fleet(1, 4, **options)
    limiter = one.limiters[0]
    share_of(limiter)
    one.advance_ns(3600 * SECOND)
    assert share_of(limiter) == 1
    assert sum(limiter.allow("k", "/api/small") for _ in range(10)) == 3
    assert sum(limiter.allow("k", "/api/window") for _ in range(1200)) == 1000


# Several holders --------------------------------------------------------------------------------------------

step = st.tuples(
    st.integers(0, 2),  # which limiter decides
    st.one_of(st.sampled_from([0, 1_000, 100_000_000, 999_000_000, 3_600 * SECOND]), st.integers(0, 3 * SECOND)),
    st.integers(0, 9),  # 0: that limiter renews its share first (sync_now)
    st.sampled_from(["k", "k", "k", "j"]),
)


@fresh_per_example
@given(
    rate=st.sampled_from(["40/s", "8/s", "3/s", ["40/s", "200/10s"], ["16/s", "5/s"]]),
    shares=st.integers(1, 3),
    steps=st.lists(step, max_size=80),
)
def test_admissions_of_three_holders_with_shares_are_what_one_limiter_in_memory_admits(
    fleet: Callable[..., Fleet], rate: str | list[str], shares: int, steps: list[tuple[int, int, int, str]]
) -> None:
    three = fleet(3, shares, **rules(rate))
    for limiter in three.limiters:
        limiter.sync_now()
    for who, gap_ns, renew, peer in steps:
        three.advance_ns(gap_ns)
        if renew == 0:
            three.limiters[who].sync_now()
        three.allow(who, peer)
    assert refused_in_memory(three.options, three.admissions) == []


def test_a_limit_lowered_while_shares_are_out_holds_from_the_change(fleet: Callable[..., Fleet]) -> None:
    # Rolling out a lower limit: a share's keys start empty under the new one (stricter than memory, which
    # keeps what each used); Redis's part moves as memory moves. Never more admitted than memory would.
    pair = fleet(2, 2, **rules("400/min"))
    for limiter in pair.limiters:
        limiter.sync_now()
    pair.advance_ns(3600 * SECOND)
    for step in range(120):
        if step % 20 == 0:
            for limiter in pair.limiters:
                limiter.sync_now()
        pair.allow(step % 2, f"k{step % 3}")
        pair.advance_ns(SECOND // 10)
    change = (pair.now_ns, "40/min")
    for limiter in pair.limiters:
        limiter.update_rule("api", "40/min")
    admitted_before = len(pair.admissions)
    for step in range(600):
        if step % 20 == 0:
            for limiter in pair.limiters:
                limiter.sync_now()
        pair.allow(step % 2, f"k{step % 3}")
        pair.advance_ns(SECOND // 5)
    assert refused_in_memory(pair.options, pair.admissions, change) == []
    # Two minutes at 40/min on each of 3 keys, less what the change left and the shares' empty start.
    assert len(pair.admissions) - admitted_before >= 3 * 40


def test_processes_beyond_the_shares_decide_in_redis_until_a_share_is_free(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    # Each its own clock: the first's stays where it stopped renewing (a frozen process's renewals would
    # carry its old readings, and the sweeper renews in the background).
    prefix = f"{redis_prefix}{next(prefixes)}:"
    clocks = [rk.ManualClock(START), rk.ManualClock(START)]
    first = rk.Limiter(clock=clocks[0], backend=standing_backend(redis_server, prefix, 1), **rules("1000/s"))
    assert share_of(first) == 1
    second = rk.Limiter(clock=clocks[1], backend=standing_backend(redis_server, prefix, 1), **rules("1000/s"))
    assert share_of(second) is None
    # The first stops renewing: its share is free after its time to live, and the second's keys start
    # empty where the first may have spent last.
    clocks[1].advance(TTL_NS / SECOND + 0.001)
    assert share_of(second) == 1
    assert share_of(first) is None


def test_processes_of_other_settings_never_hold_shares_at_once(redis_server: RedisServer, redis_prefix: str) -> None:
    prefix = f"{redis_prefix}{next(prefixes)}:"
    clocks = [rk.ManualClock(START), rk.ManualClock(START)]
    old = rk.Limiter(clock=clocks[0], backend=standing_backend(redis_server, prefix, 4), **rules("1000/s"))
    assert share_of(old) == 1
    new = rk.Limiter(clock=clocks[1], backend=standing_backend(redis_server, prefix, 4), **rules("500/s"))
    # Their parts would not add up to either limit: the new rules wait for the old holders to go.
    assert share_of(new) is None
    clocks[1].advance(TTL_NS / SECOND + 0.001)
    assert share_of(new) == 1
    assert share_of(old) is None
    # A limiter whose rules change claims its share anew (within a span: its next renewal), its keys empty
    # until the share claimed under the old rules would have ended: Redis decides meanwhile.
    clocks[1].advance(3600)
    new.sync_now()
    new.update_rule("api", "400/s")
    assert share_of(new) == 1
    trips = round_trips(new)
    assert new.allow("fresh", "/api")
    assert round_trips(new) == trips + 1
    clocks[1].advance(3600)
    assert share_of(new) == 1
    trips = round_trips(new)
    assert new.allow("fresher", "/api")
    assert round_trips(new) == trips


def test_a_pool_lost_in_a_restart_frees_no_share_before_a_time_to_live(
    own_redis_server: RedisServer, redis_prefix: str
) -> None:
    prefix = f"{redis_prefix}{next(prefixes)}:"
    clock = rk.ManualClock(START)
    limiter = rk.Limiter(clock=clock, backend=standing_backend(own_redis_server, prefix, 1), **rules("1000/s"))
    assert share_of(limiter) == 1  # the pool is made at this reading
    clock.advance(3600)
    assert share_of(limiter) == 1
    trips = round_trips(limiter)
    assert limiter.allow("fresh", "/api")
    assert round_trips(limiter) == trips
    own_redis_server.restart()
    # The pool is made anew: whoever claims a share now (this process or another), another holder from
    # before may spend until a time to live has passed, so the share's keys start empty then and Redis
    # decides meanwhile.
    assert share_of(limiter) == 1
    trips = round_trips(limiter)
    assert limiter.allow("fresher", "/api")
    assert round_trips(limiter) == trips + 1
    clock.advance(3600)
    assert share_of(limiter) == 1
    trips = round_trips(limiter)
    assert all(limiter.allow(f"fresh-{i}", "/api") for i in range(100))
    assert round_trips(limiter) == trips


# Real processes ---------------------------------------------------------------------------------------------


def standing_worker(url: str, prefix: str, rate: str, commands: Connection) -> None:
    """A process with a standing share deciding at the readings the parent sends: ("at", ns), ("sync",)
    (answers the share held), ("allow", n, peer) (answers how many were admitted); until killed."""
    clock = rk.ManualClock(START)
    backend = rk.Redis(url, mode="lease", prefix=prefix, lease_span=0.05, standing_shares=1, timeout=2.0)
    limiter = rk.Limiter(clock=clock, backend=backend, **rules(rate))
    while True:
        command = commands.recv()
        if command[0] == "at":
            clock._advance_to_ns(command[1])
        elif command[0] == "sync":
            limiter.sync_now()
            commands.send(limiter.stats()["standing_share"])
        elif command[0] == "allow":
            commands.send(sum(limiter.allow(command[2], "/api") for _ in range(command[1])))


@contextmanager
def worker(server: RedisServer, prefix: str, rate: str) -> Iterator[tuple[Any, Connection]]:
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(target=standing_worker, args=(server.url, prefix, rate, child), daemon=True)
    process.start()
    try:
        yield process, parent
    finally:
        if process.exitcode is None:
            process.kill()
        process.join(10)


def test_a_holder_killed_frees_its_share_after_its_time_to_live_and_the_next_starts_empty(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    # 100/s, burst 100, one share of half: the share is 50/s with 50 at once, Redis keeps as much.
    prefix = f"{redis_prefix}{next(prefixes)}:"
    options = rules("100/s")
    admissions: list[tuple[int, str]] = []
    now = START_NS + 2 * SECOND
    with worker(redis_server, prefix, "100/s") as (process, pipe):
        pipe.send(("at", START_NS))
        pipe.send(("sync",))
        assert pipe.recv() == 1
        pipe.send(("at", now))
        pipe.send(("sync",))
        assert pipe.recv() == 1
        clock = rk.ManualClock(START + 2)
        survivor = rk.Limiter(clock=clock, backend=standing_backend(redis_server, prefix, 1), **options)
        pipe.send(("allow", 200, "k"))
        spent = pipe.recv()
        admissions += [(now, "k")] * spent
        assert spent == 100  # its share's 50 and Redis's 50
        process.kill()  # SIGKILL: it never gives its share back
        process.join(10)
        assert process.exitcode == -signal.SIGKILL
    clock._advance_to_ns(now)
    # Held until its time to live ends: the survivor has no share, and Redis's part is spent.
    assert share_of(survivor) is None
    assert sum(survivor.allow("k", "/api") for _ in range(100)) == 0
    # Half a second after the dead holder's time to live: the share is the survivor's, its keys empty from
    # where the holder may have spent last (25 units by now), and Redis's part is full again.
    now += TTL_NS + SECOND // 2
    clock._advance_to_ns(now)
    assert share_of(survivor) == 1
    got = sum(survivor.allow("k", "/api") for _ in range(200))
    admissions += [(now, "k")] * got
    assert got == 25 + 50
    assert refused_in_memory(options, admissions) == []


# Settings ---------------------------------------------------------------------------------------------------


def test_standing_shares_are_lease_modes_and_checked(redis_server: RedisServer) -> None:
    backend = rk.Redis(redis_server.url, mode="lease", standing_shares=4)
    assert (backend.standing_shares, backend.standing_fraction) == (4, 0.5)
    assert "standing_shares=4, standing_fraction=0.5" in repr(backend)
    assert rk.Redis(redis_server.url, mode="lease").standing_shares is None
    with pytest.raises(ValueError, match="standing_shares: is lease mode's setting"):
        rk.Redis(redis_server.url, standing_shares=4)
    with pytest.raises(ValueError, match="standing_fraction: needs standing_shares"):
        rk.Redis(redis_server.url, mode="lease", standing_fraction=0.3)
    for bad in (0, 1025, -1):
        with pytest.raises(ValueError, match="standing_shares"):
            rk.Redis(redis_server.url, mode="lease", standing_shares=bad)
    for fraction in (0, 1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"standing_fraction: must be between 0 and 1"):
            rk.Redis(redis_server.url, mode="lease", standing_shares=2, standing_fraction=fraction)
    for wrong in ("half", True):
        with pytest.raises(TypeError, match="standing_fraction"):
            rk.Redis(redis_server.url, mode="lease", standing_shares=2, standing_fraction=wrong)  # type: ignore[arg-type]
