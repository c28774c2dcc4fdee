"""The Redis backend's lease mode (``rk.Redis(mode="lease")``): a process leases part of a key's budget in
one script call and decides against it in memory.

The promise under test: never above the limit, across processes. It is stated the strongest way memory's
own algorithm can state it: every admission that any number of lease-mode limiters made, replayed at its
instant into one limiter in memory with the same rules, is admitted there too. Limiters share a
``ManualClock`` reading (the script decides at the time it is given), so every test is deterministic;
real processes get the same readings through a pipe, and are killed with SIGKILL while they hold leases.
"""

from __future__ import annotations

import itertools
import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import pytest
import ratekeeper as rk
from _redis import RedisServer
from _support import fresh_per_example, run_threads
from hypothesis import given
from hypothesis import strategies as st

SPAWN = multiprocessing.get_context("spawn")

#: Where every clock starts (s): any reading works; the sliding window is aligned to the clock's zero.
START = 1000.0
START_NS = 1_000_000_000_000

#: The algorithms a lease decides; the others go through exact mode.
LEASED: tuple[rk.Algorithm, ...] = ("gcra", "token_bucket", "fixed_window", "sliding_window")

prefixes = itertools.count()


def lease_backend(server: RedisServer, prefix: str, span: float = 0.1) -> rk.Redis:
    return rk.Redis(server.url, mode="lease", prefix=prefix, lease_span=span, on_error="raise", timeout=2.0)


@dataclass
class Fleet:
    """Limiters in lease mode on one key space and one clock reading, with every admission they made."""

    limiters: list[rk.Limiter]
    clock: rk.ManualClock
    options: dict[str, Any]
    admissions: list[tuple[int, int]] = field(default_factory=list)
    now_ns: int = START_NS

    def allow(self, who: int, cost: int = 1, peer: str = "k") -> bool:
        allowed = self.limiters[who].allow(peer, "/api", cost=cost)
        if allowed:
            self.admissions.append((self.now_ns, cost))
        return allowed

    def advance_us(self, us: int) -> None:
        self.now_ns += us * 1000
        self.clock._advance_to_ns(self.now_ns)

    def replayed_in_memory(self) -> list[tuple[int, int]]:
        """The admissions that one limiter in memory, with the same rules, refuses at their instants
        (none, if the fleet kept the promise)."""
        return refused_in_memory(self.options, self.admissions)


def refused_in_memory(options: dict[str, Any], admissions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    clock = rk.ManualClock(START)
    memory = rk.Limiter(clock=clock, **options)
    refused = []
    for at_ns, cost in sorted(admissions):
        clock._advance_to_ns(at_ns)
        if not memory.allow("k", "/api", cost=cost):
            refused.append((at_ns, cost))
    return refused


@pytest.fixture
def fleet(redis_server: RedisServer, redis_prefix: str) -> Callable[..., Fleet]:
    """``fleet(n, span=..., **limiter_options)``: n lease-mode limiters sharing a key space and a clock (kept
    by the caller only: a hypothesis example's go with it, their clients and sweepers too)."""

    def build(n: int, span: float = 0.1, **options: Any) -> Fleet:
        prefix = f"{redis_prefix}{next(prefixes)}:"
        clock = rk.ManualClock(START)
        backends = [lease_backend(redis_server, prefix, span) for _ in range(n)]
        limiters = [rk.Limiter(clock=clock, backend=backend, **options) for backend in backends]
        return Fleet(limiters, clock, options)

    return build


def rules(rate: str | list[str], algorithm: rk.Algorithm) -> dict[str, Any]:
    limits = [rk.Limit(r, algorithm=algorithm) for r in ([rate] if isinstance(rate, str) else rate)]
    return {"rules": [rk.Rule("^/api", "api", limits=limits)]}


# One process ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", LEASED)
def test_a_lone_limiter_admits_its_limit_each_window(fleet: Callable[..., Fleet], algorithm: rk.Algorithm) -> None:
    lone = fleet(1, **rules("10/min", algorithm))
    assert sum(lone.allow(0) for _ in range(15)) == 10
    lone.advance_us(120_000_000)
    assert sum(lone.allow(0) for _ in range(15)) == 10
    assert lone.replayed_in_memory() == []


@pytest.mark.parametrize("algorithm", LEASED)
def test_a_busy_key_decides_without_a_round_trip_per_decision(
    fleet: Callable[..., Fleet], algorithm: rk.Algorithm
) -> None:
    busy = fleet(1, **rules("100000/min", algorithm))
    for _ in range(2000):
        assert busy.allow(0)
        busy.advance_us(1)
    # Leases double with what the key spent, a round trip each (prefetches included): at least 20 times
    # fewer round trips than exact mode's one per decision.
    round_trips = busy.limiters[0].stats()["backend_seconds"]["count"]
    assert round_trips <= 100, round_trips


def test_a_refusal_names_the_servers_retry_and_asks_again_only_after_a_span(fleet: Callable[..., Fleet]) -> None:
    one = fleet(1, span=1.0, **rules("10/min", "fixed_window"))
    assert sum(one.allow(0) for _ in range(10)) == 10
    before = one.limiters[0].stats()["backend_seconds"]["count"]
    refusals = [one.limiters[0].check("k", "/api") for _ in range(50)]
    assert not any(refusals)
    assert all(50 < r.retry_after <= 60 for r in refusals)
    # Refused here, from what Redis said: at most one more round trip for the 50.
    assert one.limiters[0].stats()["backend_seconds"]["count"] - before <= 1


@pytest.mark.parametrize("algorithm", ["sliding_log", "leaky_bucket"])
def test_algorithms_a_lease_cannot_carry_are_decided_in_redis_exactly(
    fleet: Callable[..., Fleet], algorithm: rk.Algorithm
) -> None:
    pair = fleet(2, **rules("10/min", algorithm))
    admitted = sum(pair.allow(i % 2) for i in range(30))
    assert admitted == 10
    # One round trip per decision: exact mode's.
    assert sum(lim.stats()["backend_seconds"]["count"] for lim in pair.limiters) == 30


def test_waits_and_permits_go_through_exact_mode(fleet: Callable[..., Fleet]) -> None:
    pair = fleet(
        2, rules=[rk.Rule("^/api", "api", limits=["2/s", rk.Limit(concurrency=1)]), rk.Rule("^/slow", "slow", "1/s")]
    )
    a, b = pair.limiters
    with a.concurrent("k", "/api"), pytest.raises(rk.RateLimited), b.concurrent("k", "/api"):
        pass
    with b.concurrent("k", "/api"):
        pass
    assert a.allow("k", "/slow")
    # A wait reserves the next slot in Redis: 1 s on the shared clock, which the wait advances.
    assert b.throttle("k", "/slow", timeout=5.0).allowed
    assert pair.clock.now() == pytest.approx(START + 1.0)


# Many processes on one clock: never above the limit --------------------------------------------------------

step = st.tuples(
    st.integers(0, 2),  # which limiter decides
    st.one_of(st.sampled_from([0, 1, 999, 100_000, 1_000_000, 6_000_000, 60_000_000]), st.integers(0, 90_000_000)),
    st.integers(1, 3),  # the request's cost
    st.integers(0, 15),  # 0: that limiter gives back its idle leases first (sync_now)
)


@fresh_per_example
@given(
    algorithm=st.sampled_from(LEASED),
    rate=st.sampled_from(["10/min", "5/s", "3/s", ["5/s", "20/min"], ["2/s", "7/10s"]]),
    span=st.sampled_from([0.001, 1.0, 3600.0]),
    steps=st.lists(step, max_size=60),
)
def test_admissions_of_three_lease_holders_are_what_one_limiter_in_memory_admits(
    fleet: Callable[..., Fleet],
    algorithm: rk.Algorithm,
    rate: str | list[str],
    span: float,
    steps: list[tuple[int, int, int, int]],
) -> None:
    three = fleet(3, span=span, **rules(rate, algorithm))
    for who, gap_us, cost, sweep in steps:
        three.advance_us(gap_us)
        if sweep == 0:
            three.limiters[who].sync_now()
        three.allow(who, cost)
    assert three.replayed_in_memory() == []


@pytest.mark.parametrize("algorithm", LEASED)
def test_a_limit_lowered_while_leases_are_out_holds_from_the_change(
    fleet: Callable[..., Fleet], algorithm: rk.Algorithm
) -> None:
    # Rolling out a lower limit: each process takes it; the units they leased under the old one go back
    # if the state is still the lease's, else they count as used. Never more admitted than memory would.
    pair = fleet(2, **rules("100/min", algorithm))
    for i in range(20):
        assert pair.allow(i % 2)
        pair.advance_us(100_000)
    for limiter in pair.limiters:
        limiter.update_rule("api", "10/min")
    # Memory moves a key's usage to the new limit: 20 used of 100/min leave nothing of 10/min for two
    # minutes; what the leases held at the change may add to that, never take from it.
    assert sum(pair.allow(i % 2) for i in range(40)) == 0
    pair.advance_us(300_000_000)
    assert sum(pair.allow(i % 2) for i in range(40)) == 10


def test_a_servers_word_caps_what_a_process_holds_as_exact_mode_caps_redis(fleet: Callable[..., Fleet]) -> None:
    # An outgoing transport's reply says 2 are left until the window's end: this process keeps at most 2 of
    # the units it leased, Redis is capped to the rest, and a lease asked for before it lands dropped, so at
    # most 2 more are admitted, however many the lease held; the other process leases only what is left.
    pair = fleet(2, span=10.0, **rules("100/min", "fixed_window"))
    for _ in range(30):
        assert pair.allow(0)
        pair.advance_us(1_000)
    assert pair.limiters[0].cap("k", group="api", remaining=2, reset_after=30.0)
    # At most 2 (a lease on its way may land dropped: a unit short, never one over).
    assert 1 <= sum(pair.allow(i % 2) for i in range(20)) <= 2
    # The window ends (the clock's, 60 s): the key counts afresh.
    pair.advance_us(60_000_000)
    assert sum(pair.allow(i % 2) for i in range(20)) == 20
    assert pair.replayed_in_memory() == []


@pytest.mark.parametrize("ends_in", [10.0, 120.0])
def test_units_held_at_a_word_lapse_where_the_word_ends_the_window(fleet: Callable[..., Fleet], ends_in: float) -> None:
    # A word moves the key's window end (the server's: sooner or later than the key's own, 60 s from its first
    # request): the units this process holds then belong to the window it ends, never to the next, which
    # counts afresh from 100.
    one = fleet(1, span=300.0, **rules("100/min", "fixed_window"))
    for _ in range(40):
        assert one.allow(0)
        one.advance_us(1_000)
    assert one.limiters[0].cap("k", group="api", remaining=50, reset_after=ends_in)
    assert sum(one.allow(0) for _ in range(100)) <= 50
    one.advance_us(int(ends_in * 1e6) + 500_000)
    assert sum(one.allow(0) for _ in range(300)) <= 100


def test_a_cap_taken_while_threads_spend_the_lease_holds_after_it_returns(fleet: Callable[..., Fleet]) -> None:
    # Threads spend the key's lease (prefetches on their way) while another takes a word of 5 left: of the
    # decisions begun once the cap returned, at most 5 are admitted, whatever was held or asked for before.
    one = fleet(1, span=10.0, **rules("100000/min", "fixed_window"))
    limiter, capped, after = one.limiters[0], threading.Event(), []

    def work(i: int) -> None:
        if i == 0:
            for _ in range(200):
                limiter.allow("k", "/api")
            assert limiter.cap("k", group="api", remaining=5, reset_after=30.0)
            capped.set()
            return
        for _ in range(400):
            begun_after = capped.is_set()
            allowed = limiter.allow("k", "/api")
            if begun_after:
                after.append(allowed)

    run_threads(4, work)
    assert sum(after) <= 5, sum(after)


def test_a_cap_of_a_group_without_a_fixed_window_is_refused_and_leaves_the_lease(fleet: Callable[..., Fleet]) -> None:
    one = fleet(1, span=10.0, **rules("100/min", "sliding_window"))
    for _ in range(10):
        assert one.allow(0)
    with pytest.raises(rk.InvalidValue, match="no fixed_window or gcra"):
        one.limiters[0].cap("k", group="api", remaining=0, reset_after=30.0)
    assert sum(one.allow(0) for _ in range(10)) == 10


def test_a_gcra_key_keeps_no_more_of_its_lease_than_a_word_leaves(fleet: Callable[..., Fleet]) -> None:
    # A GCRA takes a word as a server's bucket (OpenAI's): the units this process leased before it are kept only
    # as far as the word leaves, the rest counted as used in Redis.
    one = fleet(1, span=10.0, **rules("100/min", "gcra"))
    for _ in range(10):
        assert one.allow(0)
    assert one.limiters[0].cap("k", group="api", remaining=3, reset_after=30.0)
    assert sum(one.allow(0) for _ in range(10)) == 3


def test_demand_moving_between_processes_is_short_at_most_what_the_idle_one_held(
    fleet: Callable[..., Fleet],
) -> None:
    # A is busy at 100 a second for 2 s on a 100/s GCRA key, then stops; B takes over. B is refused only
    # the units A leased and had not spent, which lapse at their instants (at most a span of the rate).
    pair = fleet(2, span=0.05, **rules("100/s", "gcra"))
    for _ in range(200):
        assert pair.allow(0)
        pair.advance_us(10_000)
    b_admitted = 0
    for _ in range(100):
        b_admitted += pair.allow(1)
        pair.advance_us(10_000)
    # A span of 50 ms at 100/s is 5 units; A's lease was twice its span's demand: at most 10 short.
    assert b_admitted >= 90, b_admitted
    assert pair.replayed_in_memory() == []


def test_a_swept_lease_gives_back_its_units_to_the_others(fleet: Callable[..., Fleet]) -> None:
    pair = fleet(2, span=1.0, **rules("100/h", "fixed_window"))
    a = pair.limiters[0]
    for _ in range(10):
        pair.allow(0)
        pair.advance_us(1)
    # A leased more than it used: B finds less than the 90 left until A's lease goes back.
    held_by_a = 90 - sum(pair.allow(1) for _ in range(100))
    assert held_by_a > 0
    pair.advance_us(2_000_000)
    assert a.sync_now()[1] == held_by_a  # given back: the units A held
    assert sum(pair.allow(1) for _ in range(100)) == held_by_a
    assert pair.replayed_in_memory() == []


# Real processes, SIGKILL -----------------------------------------------------------------------------------


def lease_worker(url: str, prefix: str, rule: tuple[str | list[str], rk.Algorithm], commands: Connection) -> None:
    """A process deciding in lease mode under ``rules(*rule)`` at the readings the parent sends: ("at", ns)
    then ("allow", n) (answers how many were admitted) until it is killed or told ("stop",)."""
    clock = rk.ManualClock(START)
    backend = rk.Redis(url, mode="lease", prefix=prefix, lease_span=0.05, timeout=2.0)
    limiter = rk.Limiter(clock=clock, backend=backend, **rules(*rule))
    while True:
        command = commands.recv()
        if command[0] == "at":
            clock._advance_to_ns(command[1])
        elif command[0] == "allow":
            commands.send(sum(limiter.allow("k", "/api") for _ in range(command[1])))
        else:
            return


@contextmanager
def worker(
    server: RedisServer, prefix: str, rule: tuple[str | list[str], rk.Algorithm]
) -> Iterator[tuple[Any, Connection]]:
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(target=lease_worker, args=(server.url, prefix, rule, child), daemon=True)
    process.start()
    try:
        yield process, parent
    finally:
        if process.exitcode is None:
            process.kill()
        process.join(10)


@pytest.mark.parametrize("algorithm", ["gcra", "fixed_window"])
def test_a_holder_killed_with_its_lease_loses_only_that_lease(
    redis_server: RedisServer, redis_prefix: str, algorithm: rk.Algorithm
) -> None:
    rule: tuple[str, rk.Algorithm] = ("100/s", algorithm)
    options = rules(*rule)
    prefix = f"{redis_prefix}{next(prefixes)}:"
    clock = rk.ManualClock(START)
    survivor = rk.Limiter(clock=clock, backend=lease_backend(redis_server, prefix, span=0.05), **options)
    admissions: list[tuple[int, int]] = []
    now = START_NS
    with worker(redis_server, prefix, rule) as (process, pipe):
        # The worker is busy: 10 decisions every 100 ms for 1 s, at the same readings as the survivor's.
        for _ in range(10):
            pipe.send(("at", now))
            pipe.send(("allow", 10))
            admissions += [(now, 1)] * pipe.recv()
            now += 100_000_000
            clock._advance_to_ns(now)
        process.kill()  # SIGKILL: it never gives its lease back
        process.join(10)
        assert process.exitcode == -signal.SIGKILL
    # Within a second the dead worker's units are spent in Redis's eyes (its window ended, its GCRA
    # instants passed): the survivor gets the full rate.
    now += 1_000_000_000
    clock._advance_to_ns(now)
    got = sum(survivor.allow("k", "/api") for _ in range(150))
    admissions += [(now, 1)] * got
    assert got == 100
    assert refused_in_memory(options, admissions) == []


@pytest.mark.parametrize("algorithm", LEASED)
def test_two_processes_together_never_exceed_the_limit(
    redis_server: RedisServer, redis_prefix: str, algorithm: rk.Algorithm
) -> None:
    rule: tuple[list[str], rk.Algorithm] = (["20/s", "50/10s"], algorithm)
    options = rules(*rule)
    prefix = f"{redis_prefix}{next(prefixes)}:"
    admissions: list[tuple[int, int]] = []
    now = START_NS
    offered: list[tuple[int, int]] = []
    with worker(redis_server, prefix, rule) as (_, a), worker(redis_server, prefix, rule) as (_, b):
        for tick in range(60):
            for pipe, n in ((a, 7 + tick % 5), (b, 11 - tick % 3)):
                pipe.send(("at", now))
                pipe.send(("allow", n))
                admissions += [(now, 1)] * pipe.recv()
                offered += [(now, 1)] * n
            now += 250_000_000 if tick % 4 else 37_000_000
        for pipe in (a, b):
            pipe.send(("stop",))
    assert refused_in_memory(options, admissions) == []
    # And they use the limit: what one limiter in memory admits of the same offers, less what leases held.
    in_memory = len(offered) - len(refused_in_memory(options, offered))
    assert len(admissions) >= 0.8 * in_memory, (len(admissions), in_memory)


def test_a_redis_restart_loses_the_states_as_exact_mode_does_and_decisions_go_on(
    own_redis_server: RedisServer, redis_prefix: str
) -> None:
    # Without persistence a restart forgets every state (exact mode's policy too); a lease-mode limiter
    # keeps deciding, and over-admits at most the units it held at the restart.
    options = rules("100/min", "fixed_window")
    clock = rk.ManualClock(START)
    limiter = rk.Limiter(clock=clock, backend=lease_backend(own_redis_server, f"{redis_prefix}r:", 60.0), **options)
    before = sum(limiter.allow("k", "/api") for _ in range(30))
    assert before == 30
    own_redis_server.restart()
    after = sum(limiter.allow("k", "/api") for _ in range(200))
    assert 70 <= after <= 100 + 70
    clock.advance(120)
    assert sum(limiter.allow("k", "/api") for _ in range(200)) == 100


# Concurrency permits as leased permits ---------------------------------------------------------------------


def permits(n: int) -> dict[str, Any]:
    return {"rules": [rk.Rule("^/api", "api", limits=[rk.Limit(concurrency=n)])]}


def test_permits_come_from_leases_and_never_more_are_in_flight_than_the_limit(fleet: Callable[..., Fleet]) -> None:
    pair = fleet(2, **permits(3))
    a, b = pair.limiters
    held = [a.concurrent("k", "/api"), b.concurrent("k", "/api"), b.concurrent("k", "/api")]
    for permit in held:
        permit.__enter__()
    with pytest.raises(rk.RateLimited) as refused:
        a.concurrent("k", "/api").__enter__()
    assert refused.value.decision.refused_by == "concurrency"
    for permit in held[1:]:
        permit.__exit__(None, None, None)
    # B's permits are back with B: B takes them again without asking Redis; A gets them once B's lease
    # has been idle for a span and went back.
    before = b.stats()["backend_seconds"]["count"]
    with b.concurrent("k", "/api"), b.concurrent("k", "/api"):
        assert b.stats()["backend_seconds"]["count"] == before
    pair.advance_us(200_000)
    assert b.sync_now() == (2, 2)
    with a.concurrent("k", "/api"), a.concurrent("k", "/api"):
        pass
    held[0].__exit__(None, None, None)


def test_threads_of_two_processes_never_hold_more_permits_than_the_limit(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    prefix = f"{redis_prefix}{next(prefixes)}:"
    limiters = [rk.Limiter(backend=lease_backend(redis_server, prefix, span=0.001), **permits(4)) for _ in range(2)]
    lock = threading.Lock()
    in_flight, most, admitted = 0, 0, 0

    def work(i: int) -> None:
        nonlocal in_flight, most, admitted
        limiter = limiters[i % 2]
        for _ in range(300):
            try:
                with limiter.concurrent("k", "/api"):
                    with lock:
                        in_flight += 1
                        most = max(most, in_flight)
                        admitted += 1
                    with lock:
                        in_flight -= 1
            except rk.RateLimited:
                pass

    run_threads(8, work)
    assert most <= 4
    assert admitted > 0


def permits_worker(url: str, prefix: str, commands: Connection) -> None:
    """A process holding lease-mode permits at the readings the parent sends: ("at", ns), ("hold", n)
    (answers how many it took and keeps them) until it is killed."""
    clock = rk.ManualClock(START)
    backend = rk.Redis(url, mode="lease", prefix=prefix, lease_span=0.05, lease_ttl=30.0, timeout=2.0)
    limiter = rk.Limiter(clock=clock, backend=backend, **permits(3))
    held = []
    while True:
        command = commands.recv()
        if command[0] == "at":
            clock._advance_to_ns(command[1])
        else:
            taken = 0
            for _ in range(command[1]):
                permit = limiter.concurrent("k", "/api")
                try:
                    permit.__enter__()
                except rk.RateLimited:
                    continue
                held.append(permit)
                taken += 1
            commands.send(taken)


def test_a_holder_of_permits_killed_loses_them_only_until_their_lease_expires(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    prefix = f"{redis_prefix}{next(prefixes)}:"
    clock = rk.ManualClock(START)
    backend = rk.Redis(redis_server.url, mode="lease", prefix=prefix, lease_ttl=30.0, on_error="raise", timeout=2.0)
    survivor = rk.Limiter(clock=clock, backend=backend, **permits(3))
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(target=permits_worker, args=(redis_server.url, prefix, child), daemon=True)
    process.start()
    try:
        parent.send(("at", START_NS))
        parent.send(("hold", 2))
        assert parent.recv() == 2
        process.kill()
        process.join(10)
    finally:
        if process.exitcode is None:
            process.kill()
    # The dead process's two permits still count: one is left, until their lease (30 s) expires.
    with survivor.concurrent("k", "/api"), pytest.raises(rk.RateLimited), survivor.concurrent("k", "/api"):
        pass
    clock.advance(31.0)
    with survivor.concurrent("k", "/api"), survivor.concurrent("k", "/api"), survivor.concurrent("k", "/api"):
        pass


# Groups of rates and permits: both leased, decided all or nothing -------------------------------------------


def rates_and_permits(rate: str, n: int, algorithm: rk.Algorithm = "gcra") -> dict[str, Any]:
    return {"rules": [rk.Rule("^/api", "api", limits=[rk.Limit(rate, algorithm=algorithm), rk.Limit(concurrency=n)])]}


def round_trips(limiter: rk.Limiter) -> int:
    return int(limiter.stats()["backend_seconds"]["count"])


def test_a_group_of_rates_and_permits_decides_from_leases_of_both(fleet: Callable[..., Fleet]) -> None:
    pair = fleet(2, **rates_and_permits("100000/min", 3))
    a, b = pair.limiters
    # The key's first request is decided in Redis (no demand known yet); the next takes leases of units
    # and of permits, and those after it decide here: requests, and rate checks alone.
    for _ in range(2):
        with a.concurrent("k", "/api"):
            pass
    before = round_trips(a)
    for _ in range(300):
        with a.concurrent("k", "/api"):
            assert a.allow("k", "/api")
        pair.advance_us(100)
    # 600 decisions (300 requests and 300 rate checks): the leases double with what the key spent, a round
    # trip each, prefetches included: at least 20 times fewer round trips than exact mode's one per decision.
    assert round_trips(a) - before <= 30, round_trips(a) - before
    # Never more in flight than the permits, across both processes; a refusal names them.
    held = [a.concurrent("k", "/api"), a.concurrent("k", "/api"), b.concurrent("k", "/api")]
    for permit in held:
        permit.__enter__()
    for limiter in (a, b):
        with pytest.raises(rk.RateLimited) as refused:
            limiter.concurrent("k", "/api").__enter__()
        assert refused.value.decision.refused_by == "concurrency"
    for permit in held:
        permit.__exit__(None, None, None)
    # A refused lease of permits quiets the key for a span (no round trip per refusal); then all three again.
    pair.advance_us(200_000)
    with a.concurrent("k", "/api"), a.concurrent("k", "/api"), a.concurrent("k", "/api"):
        pass


def test_a_rate_refusal_takes_no_permit_and_a_permit_refusal_takes_no_unit(fleet: Callable[..., Fleet]) -> None:
    one = fleet(1, span=1.0, **rates_and_permits("5/min", 1, "fixed_window"))
    lim = one.limiters[0]
    outer = lim.concurrent("k", "/api")
    outer.__enter__()  # one unit, the only permit
    for _ in range(3):
        with pytest.raises(rk.RateLimited) as refused:
            lim.concurrent("k", "/api").__enter__()
        assert refused.value.decision.refused_by == "concurrency"
    outer.__exit__(None, None, None)
    # The three refusals by the permit spent no unit: four are left of the window's five.
    for _ in range(4):
        with lim.concurrent("k", "/api"):
            pass
    for _ in range(3):
        with pytest.raises(rk.RateLimited) as refused:
            lim.concurrent("k", "/api").__enter__()
        assert refused.value.decision.refused_by == "rate"
    # Refused by the rate, the permit was not taken: it is free for a request that takes permits alone.
    with lim.concurrent("k", "/api", rates=False):
        pass


@pytest.mark.asyncio
async def test_asyncio_requests_of_rates_and_permits_use_the_leases_too(fleet: Callable[..., Fleet]) -> None:
    one = fleet(1, **rates_and_permits("100000/min", 2))
    lim = one.limiters[0]
    for _ in range(3):
        async with lim.concurrent("k", "/api"):
            pass
    before = round_trips(lim)
    for _ in range(100):
        async with lim.concurrent("k", "/api"), lim.concurrent("k", "/api"):
            pass
        one.advance_us(100)
    # 200 requests: at least 10 times fewer round trips than exact mode's one each.
    assert round_trips(lim) - before <= 20, round_trips(lim) - before


mixed_step = st.tuples(
    st.integers(0, 2),  # which limiter
    st.one_of(st.sampled_from([0, 1, 999, 100_000, 1_000_000, 6_000_000]), st.integers(0, 30_000_000)),
    st.sampled_from(["enter", "enter", "exit", "allow", "sync"]),
)


@fresh_per_example
@given(
    algorithm=st.sampled_from(LEASED),
    rate=st.sampled_from(["10/min", "3/s"]),
    permits_n=st.integers(1, 3),
    steps=st.lists(mixed_step, max_size=60),
)
def test_three_holders_of_rates_and_permits_never_exceed_either(
    redis_server: RedisServer,
    redis_prefix: str,
    algorithm: rk.Algorithm,
    rate: str,
    permits_n: int,
    steps: list[tuple[int, int, str]],
) -> None:
    # Permits outlive any run here (a permit held past lease_ttl expires in Redis: exact mode's policy).
    prefix = f"{redis_prefix}{next(prefixes)}:"
    clock = rk.ManualClock(START)
    options = rates_and_permits(rate, permits_n, algorithm)
    limiters = [
        rk.Limiter(
            clock=clock,
            backend=rk.Redis(
                redis_server.url, mode="lease", prefix=prefix, lease_span=0.05, lease_ttl=1e6, on_error="raise"
            ),
            **options,
        )
        for _ in range(3)
    ]
    now = START_NS
    held: list[list[rk.Permit]] = [[], [], []]
    admissions: list[tuple[int, int]] = []
    for who, gap_us, op in steps:
        now += gap_us * 1000
        clock._advance_to_ns(now)
        limiter = limiters[who]
        if op == "enter":
            permit = limiter.concurrent("k", "/api")
            try:
                permit.__enter__()
            except rk.RateLimited:
                continue
            held[who].append(permit)
            admissions.append((now, 1))
            assert sum(map(len, held)) <= permits_n
        elif op == "exit" and held[who]:
            held[who].pop().__exit__(None, None, None)
        elif op == "allow" and limiter.allow("k", "/api"):
            admissions.append((now, 1))
        elif op == "sync":
            limiter.sync_now()
    # Every unit taken (by a request with its permit, or a rate check alone) is one memory admits.
    assert refused_in_memory(options, admissions) == []
