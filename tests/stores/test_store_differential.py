"""One semantics of reconfiguration and quotas for every store.

A differential property: random scripts run on an in-memory limiter and on another store's limiter (Redis
in exact mode, a lone node of Redis in sync mode, a shared-memory region) side by side, each on a
ManualClock of its own moved together, and every step must give the same outcome on both: every field of every decision
(``retry_after`` included) exactly, the same exceptions, the same waits, equal clocks after each blocking
wait, and the same quotas, rules and routes. Memory is the specification (docs/reconfiguration.md):
a change of limits (``update_rule``, a reload, ``set_quota``) moves every state to the new limit at the
instant of the change, keeping what it used, also when a limit's algorithm changed; a group or limit that
comes back after a reload starts empty.

Nothing is left out: every algorithm, one or two rate limits under either policy, checks, ``allow``,
blocking waits, waits cancelled later, reductions, quotas set and cleared, ``update_rule``, and reloads
that change rates, bursts, the number of limits, the algorithms and the policy, or drop a group and add
it back. A failure names the step (the script is listed, the step marked) and both outcomes.

A cancelled wait is the core's ``_reserve`` then ``_refund``, which is what ``throttle`` and ``athrottle``
do when their wait ends early. The public path, cancelling an ``athrottle`` task on a ManualClock, cannot
be timed deterministically against the Redis reply that carries the reservation. Here a waiter is held
across later steps (requests, time, reconfigurations), as a waiting task is, and cancelled before its
deadline.

Below the property, each divergence it found has a regression test of its own, a minimal script.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import pytest
import ratekeeper as rk
from _redis import EngineServers, RedisServer
from _support import ALGORITHMS, removed_with, seen
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ratekeeper._core import _Reservation
from ratekeeper.config import plan_from_config

S = 1_000_000_000
MIN = 60 * S
PEERS = ("alice", "bob")
#: Each group's one path (its rule's pattern is ``^`` + path). A reload keeps the names and the routes.
PATHS = {"g0": "/a", "g1": "/b"}
# Time runs in minutes where the example runs in seconds ("60/min", then 5 s): Redis expires a key
# (PEXPIRE) on its own wall clock once the key's state stops constraining on the limiter's clock, so a
# state left constraining for less than the real milliseconds until the key's next decision would vanish
# in Redis and not in memory, an artefact of the ManualClock that would make the test flaky. With every
# unit of a limit 20 s or more long, a step lands that close to a state's end about once in 20,000.
RATES = ("60/hour", "6/hour", "5/10min", "20/hour", "3/min")
BURSTS = (None, 1, 2, 6)
# Short windows beside long ones: a quota narrowed then widened between two decisions must keep what
# the key used (a sliding log's stamps), in every store.
QUOTAS = (None, "2/10min", "20/hour", "3/min", "100/hour", "10/s", "3/10s")
TIMEOUTS = (None, 0.0, 30.0, 120.0, 600.0)
examples = itertools.count()


def outcome(call: Callable[[], object]) -> object:
    """What a call returned, or the refusal or invalid-argument error it raised. Anything else propagates:
    a Redis that does not answer is an error of the test, not a divergence."""
    try:
        return call()
    except rk.RateLimited as error:
        return ("raised RateLimited", seen(error.decision), error.retry_after)
    except rk.InvalidArgument as error:
        return (f"raised {type(error).__name__}", str(error))


def redis_backend(server: RedisServer, prefix: str, mode: Literal["exact", "sync"] = "exact") -> rk.Redis:
    """Redis under a prefix of its own (each example starts from empty keys).

    Exact mode with a generous timeout: a round trip stalled by a busy machine would raise
    (``on_error="raise"``), not diverge. Sync mode syncing every 50 ms, so that syncs run during the
    scripts: a lone node (nobody else's usage to absorb) must decide as memory does, syncs or not."""
    where = f"{prefix}{next(examples)}:"
    if mode == "sync":
        return rk.Redis(server.url, mode="sync", prefix=where, sync_interval=0.05, timeout=5.0)
    return rk.Redis(server.url, prefix=where, on_error="raise", timeout=5.0)


# --- configurations -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitSpec:
    rate: str
    burst: int | None
    algorithm: rk.Algorithm

    def __repr__(self) -> str:
        return f"LimitSpec({self.rate!r}, {self.burst!r}, {self.algorithm!r})"

    def config(self) -> dict[str, object]:
        table: dict[str, object] = {"rate": self.rate, "algorithm": self.algorithm}
        if self.burst is not None:
            table["burst"] = self.burst
        return table


@dataclass(frozen=True)
class GroupSpec:
    limits: tuple[LimitSpec, ...]
    policy: rk.PolicyName

    def __repr__(self) -> str:
        return f"GroupSpec({self.limits!r}, {self.policy!r})"


def config(groups: dict[str, GroupSpec | None]) -> dict[str, object]:
    """A config mapping (the format of ``Limiter.from_file`` and ``reload``) of the groups not ``None``."""
    return {
        "groups": {
            name: {
                "paths": [f"^{PATHS[name]}"],
                "limits": [limit.config() for limit in spec.limits],
                "policy": spec.policy,
            }
            for name, spec in groups.items()
            if spec is not None
        }
    }


limit_specs = st.builds(LimitSpec, st.sampled_from(RATES), st.sampled_from(BURSTS), st.sampled_from(ALGORITHMS))
group_specs = st.builds(
    GroupSpec, st.lists(limit_specs, min_size=1, max_size=2).map(tuple), st.sampled_from(("all", "fallback"))
)


# --- the two sides and the steps ------------------------------------------------------------------------


@dataclass
class Side:
    """One limiter, its clock, and the waits it holds (reserved, not yet at their deadline or cancelled)."""

    limiter: rk.Limiter
    clock: rk.ManualClock
    held: list[tuple[Wait, _Reservation]] = field(default_factory=list)

    def waiting(self) -> list[tuple[Wait, _Reservation]]:
        """The held waits whose deadline is still ahead: waiters that could still be cancelled."""
        now_ns = round(self.clock.now() * S)
        return [(wait, held) for wait, held in self.held if held.deadline_ns > now_ns]

    def view(self) -> tuple[tuple[str, object], ...]:
        """What a caller reads without deciding: the clock, the rules, each key's quota and route."""
        lim = self.limiter

        def quota(peer: str, group: str) -> object:
            info = lim.quota(peer, group)
            rate = None if info.rate is None else (info.rate.count, info.rate.period)
            return (rate, info.source, info.age, info.fetching, info.failures)

        def route(peer: str, path: str) -> object:
            resolution = lim.resolve(peer, path)
            if resolution is None:
                return None
            return (resolution.group, [repr(limit) for limit in resolution.limits], resolution.policy)

        return (
            ("clock", self.clock.now()),
            ("rules", [repr(rule) for rule in lim.rules]),
            ("quotas", [outcome(functools.partial(quota, p, g)) for p in PEERS for g in PATHS]),
            ("routes", [route(p, path) for p in PEERS for path in PATHS.values()]),
        )


class Step:
    def run(self, side: Side) -> object:
        raise NotImplementedError


@dataclass(frozen=True)
class Advance(Step):
    ns: int

    def run(self, side: Side) -> object:
        side.clock.advance(self.ns / S)
        return None


@dataclass(frozen=True)
class Check(Step):
    peer: str
    path: str
    cost: int

    def run(self, side: Side) -> object:
        return seen(side.limiter.check(self.peer, self.path, cost=self.cost))


@dataclass(frozen=True)
class Allow(Step):
    peer: str
    path: str
    cost: int

    def run(self, side: Side) -> object:
        return side.limiter.allow(self.peer, self.path, cost=self.cost)


@dataclass(frozen=True)
class Throttle(Step):
    """A blocking wait: on a ManualClock ``throttle`` moves the clock to the slot it reserved."""

    peer: str
    path: str
    cost: int
    timeout: float | None

    def run(self, side: Side) -> object:
        lim = side.limiter
        return outcome(lambda: seen(lim.throttle(self.peer, self.path, cost=self.cost, timeout=self.timeout)))


@dataclass(frozen=True)
class Wait(Step):
    """A waiter (``athrottle`` in a task) reserves its slot; it waits until a ``Cancel`` gives it back or
    the clock passes its deadline (it was served)."""

    peer: str
    path: str
    cost: int

    def run(self, side: Side) -> object:
        reservation = side.limiter._reserve(self.peer, self.path, cost=self.cost, timeout=None)
        if reservation.decision.allowed:
            side.held.append((self, reservation))
        return (seen(reservation.decision), reservation.wait, reservation.deadline_ns)


@dataclass(frozen=True)
class Cancel(Step):
    """Waiter number ``which`` (of those still waiting, modulo their number) is cancelled: its slot is
    given back. Nothing happens when nobody waits."""

    which: int

    def run(self, side: Side) -> object:
        waiting = side.waiting()
        if not waiting:
            return "nobody waits"
        wait, reservation = waiting[self.which % len(waiting)]
        side.held.remove((wait, reservation))
        side.limiter._refund(reservation)
        return ("cancelled", wait)


@dataclass(frozen=True)
class UpdateRule(Step):
    group: str
    rate: str | None
    burst: int | None

    def run(self, side: Side) -> object:
        return outcome(lambda: side.limiter.update_rule(self.group, rate=self.rate, burst=self.burst))


@dataclass(frozen=True)
class Reload(Step):
    """Installs new groups of the same names, as ``reload`` does (a config plan applied to the running
    limiter): new rates, bursts, number of limits, algorithms, policy; ``None`` drops the group."""

    g0: GroupSpec | None
    g1: GroupSpec | None

    def run(self, side: Side) -> object:
        plan = plan_from_config(config({"g0": self.g0, "g1": self.g1}))
        return outcome(lambda: plan.apply(side.limiter))


@dataclass(frozen=True)
class SetQuota(Step):
    peer: str
    group: str
    rate: str | None

    def run(self, side: Side) -> object:
        return outcome(lambda: side.limiter.set_quota(self.peer, self.group, self.rate))


@dataclass(frozen=True)
class Reduce(Step):
    peer: str
    path: str
    n: int

    def run(self, side: Side) -> object:
        return side.limiter.reduce(self.peer, self.path, self.n)


peers = st.sampled_from(PEERS)
paths = st.sampled_from(tuple(PATHS.values()))
group_names = st.sampled_from(tuple(PATHS))
costs = st.integers(1, 4)
# A reloaded group is kept three times in four (shrinking towards kept), else dropped.
reloaded = st.tuples(group_specs, st.integers(0, 3)).map(lambda kept: kept[0] if kept[1] < 3 else None)
steps = st.one_of(
    st.builds(Advance, st.integers(0, 3 * MIN)),
    st.builds(Check, peers, paths, costs),
    st.builds(Allow, peers, paths, costs),
    st.builds(UpdateRule, group_names, st.sampled_from((None, *RATES)), st.sampled_from(BURSTS)),
    st.builds(SetQuota, peers, group_names, st.sampled_from(QUOTAS)),
    st.builds(Reload, reloaded, reloaded),
    st.builds(Reduce, peers, paths, costs),
    st.builds(Throttle, peers, paths, costs, st.sampled_from(TIMEOUTS)),
    st.builds(Wait, peers, paths, costs),
    st.builds(Cancel, st.integers(0, 3)),
)


def probes() -> Iterator[Step]:
    """After the script, one request of each key: a state that diverged with no decision showing it yet."""
    for peer in PEERS:
        for path in PATHS.values():
            yield Check(peer, path, 1)


def play(memory: Side, redis: Side, script: list[Step], name: str = "redis") -> None:
    """Runs each step on both sides and compares what it gave, then what each side shows (the other
    store is called ``name`` in a failure's text)."""
    listing = [*script, *probes()]
    for index, step in enumerate(listing):
        expected, got = step.run(memory), step.run(redis)
        expected_view, got_view = memory.view(), redis.view()
        if (expected, expected_view) == (got, got_view):
            continue
        lines = [f"  {'>' if i == index else ' '} {i}: {s!r}" for i, s in enumerate(listing[: index + 1])]
        if index >= len(script):
            lines.insert(len(script), "    (the script ends; one request of each key follows)")
        views = [
            f"\n  memory {what}: {mine!r}\n  {name:<6} {what}: {theirs!r}"
            for (what, mine), (_, theirs) in zip(expected_view, got_view, strict=True)
            if mine != theirs
        ]
        raise AssertionError(
            f"memory and {name} differ at {'final probe' if index >= len(script) else 'step'} {index}: {step!r}\n"
            + "\n".join(lines)
            + f"\n  memory: {expected!r}\n  {name}:  {got!r}"
            + "".join(views)
        )


OtherStore = Callable[[list[rk.Rule], rk.ManualClock], rk.Limiter]


@pytest.fixture(params=["redis_exact", "redis_sync", "valkey_exact", "valkey_sync", "shared"])
def other_store(request: pytest.FixtureRequest) -> OtherStore:
    """``other_store(rules, clock)``: a limiter on the store held to memory, with fresh states at each call:
    Redis in exact mode or in sync mode (one node alone) under a prefix of its own, or a shared-memory
    region of its own (its file removed when the limiter is collected)."""
    if request.param == "shared":
        folder = request.getfixturevalue("tmp_path")
        regions = itertools.count()

        def shared(rules: list[rk.Rule], clock: rk.ManualClock) -> rk.Limiter:
            path = folder / f"region-{next(regions)}"
            # Room for every sliding log of a script (its keys share shards).
            backend = rk.Shared(path=path, log_entries=100_000)
            return removed_with(rk.Limiter(rules=rules, clock=clock, backend=backend, max_keys=10_000), path)

        return shared
    servers: EngineServers = request.getfixturevalue("engine_servers")
    server = servers.get("valkey" if request.param.startswith("valkey") else "redis")
    prefix: str = request.getfixturevalue("redis_prefix")

    mode: Literal["exact", "sync"] = "sync" if request.param.endswith("_sync") else "exact"

    def redis(rules: list[rk.Rule], clock: rk.ManualClock) -> rk.Limiter:
        return rk.Limiter(rules=rules, clock=clock, backend=redis_backend(server, prefix, mode))

    return redis


@pytest.fixture
def sides(other_store: OtherStore) -> Callable[[dict[str, GroupSpec], int], tuple[Side, Side]]:
    """``sides(groups, start_ns)``: a memory limiter and one on the other store, fresh keys at each call."""

    def build(groups: dict[str, GroupSpec], start: int) -> tuple[Side, Side]:
        rules = plan_from_config(config(dict(groups))).rules
        memory_clock, other_clock = rk.ManualClock(start / S), rk.ManualClock(start / S)
        return (
            Side(rk.Limiter(rules=rules, clock=memory_clock), memory_clock),
            Side(other_store(rules, other_clock), other_clock),
        )

    return build


# Four times the profile's examples (200 by default, 1,200 with HYPOTHESIS_PROFILE=ci): an example costs
# 2-5 ms, and a divergence needs several steps to line up (a request, a change, time, a request of the
# same key), which the profile's 50 examples missed about once in ten runs.
@settings(
    max_examples=4 * settings().max_examples,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    groups=st.tuples(group_specs, group_specs).map(lambda specs: dict(zip(PATHS, specs, strict=True))),
    start=st.integers(0, 10**6 * S),
    script=st.lists(steps, min_size=1, max_size=40),
)
def test_memory_and_every_store_agree_on_every_script(
    request: pytest.FixtureRequest,
    sides: Callable[[dict[str, GroupSpec], int], tuple[Side, Side]],
    groups: dict[str, GroupSpec],
    start: int,
    script: list[Step],
) -> None:
    memory, other = sides(groups, start)
    play(memory, other, script, request.node.callspec.params["other_store"])


# --- regression tests: one per divergence the property found ------------------------------------------


Pair = tuple[rk.Limiter, rk.Limiter, rk.ManualClock, rk.ManualClock]


@pytest.fixture
def pair(other_store: OtherStore) -> Callable[..., Pair]:
    """``pair(rules=..., start=...)``: a memory limiter and one on the other store, each on a ManualClock
    at ``start``."""

    def build(rules: list[rk.Rule], start: float = 10.0) -> Pair:
        memory_clock, other_clock = rk.ManualClock(start), rk.ManualClock(start)
        memory = rk.Limiter(rules=rules, clock=memory_clock)
        return memory, other_store(rules, other_clock), memory_clock, other_clock

    return build


def same(memory: rk.Decision, redis: rk.Decision) -> None:
    """Redis decided as memory did; the message shows both decisions whole."""
    assert seen(redis) == seen(memory), f"\n  memory: {seen(memory)}\n  redis:  {seen(redis)}"


def reconfigure(limiter: rk.Limiter, how: str) -> None:
    """60/min becomes 6/min, by each of the three ways of changing a limit."""
    if how == "update_rule":
        limiter.update_rule("g", rate="6/min")
    elif how == "set_quota":
        limiter.set_quota("alice", "g", "6/min")
    else:
        plan_from_config({"groups": {"g": {"paths": ["^/"], "rate": "6/min"}}}).apply(limiter)


@pytest.mark.parametrize("how", ["update_rule", "set_quota", "reload"])
def test_a_changed_rate_applies_at_the_instant_of_the_change(pair: Callable[..., Pair], how: str) -> None:
    # The example. 10 used of 60/min are 10 used of 6/min from the change on, a minute and a half
    # of debt, so 5 s later the next request waits 45 s. Redis rescaled the key only at its next decision,
    # reading its usage there: 5 of the 10 had drained at 60/min by then, and the request was admitted.
    memory, redis, memory_clock, redis_clock = pair([rk.Rule("^/", "g", "60/min")])
    for lim in (memory, redis):
        assert sum(lim.allow("alice", "/") for _ in range(10)) == 10
        reconfigure(lim, how)
    memory_clock.advance(5)
    redis_clock.advance(5)
    expected = memory.check("alice", "/")
    assert (expected.allowed, expected.retry_after) == (False, 45.0)
    same(expected, redis.check("alice", "/"))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_reload_that_changes_an_algorithm_keeps_the_usage(pair: Callable[..., Pair], algorithm: rk.Algorithm) -> None:
    # docs/reconfiguration.md: what a key used under the old algorithm is charged to the new one. Redis started the new
    # algorithm's state from scratch: 59 left instead of 49.
    after = ALGORITHMS[(ALGORITHMS.index(algorithm) + 1) % len(ALGORITHMS)]
    memory, redis, _, _ = pair([rk.Rule("^/", "g", "60/min", algorithm=algorithm)])
    for lim in (memory, redis):
        assert sum(lim.allow("alice", "/") for _ in range(10)) == 10
        lim._reconfigure([rk.Rule("^/", "g", "60/min", algorithm=after)])
    expected = memory.check("alice", "/")
    assert expected.remaining == 49
    same(expected, redis.check("alice", "/"))


def test_a_group_dropped_by_a_reload_and_added_back_starts_empty(pair: Callable[..., Pair]) -> None:
    # docs/reconfiguration.md: new groups start empty, also a group removed and added back. Redis found the old keys.
    both = [rk.Rule("^/a", "g", "60/min"), rk.Rule("^/b", "h", "60/min")]
    memory, redis, _, _ = pair(both)
    for lim in (memory, redis):
        assert sum(lim.allow("alice", "/a") for _ in range(10)) == 10
        lim._reconfigure(both[1:])
        lim._reconfigure(both)
    expected = memory.check("alice", "/a")
    assert expected.remaining == 59
    same(expected, redis.check("alice", "/a"))


def test_a_limit_dropped_by_a_reload_and_added_back_starts_empty(pair: Callable[..., Pair]) -> None:
    # Two limits, then the first alone, then both again under "fallback": the second is a new limit and
    # takes no part of the 10 requests; Redis found its old key (99 left of 120 instead of 109).
    limits = [rk.Limit("60/min"), rk.Limit("60/min", algorithm="sliding_window")]
    memory, redis, _, _ = pair([rk.Rule("^/", "g", limits=limits)])
    for lim in (memory, redis):
        assert sum(lim.allow("alice", "/") for _ in range(10)) == 10
        lim._reconfigure([rk.Rule("^/", "g", limits=limits[:1])])
        lim._reconfigure([rk.Rule("^/", "g", limits=limits, policy="fallback")])
    same(memory.check("alice", "/"), redis.check("alice", "/"))


def test_a_limit_dropped_then_a_quota_set_then_the_limit_added_back_starts_empty(pair: Callable[..., Pair]) -> None:
    # Setting a quota sends Redis the key's moves so far; the dropped limit's key must go with them, or it
    # comes back with its old usage when the limit does (remaining 117 instead of 118).
    limits = [rk.Limit("60/hour"), rk.Limit("60/hour")]
    memory, redis, _, _ = pair([rk.Rule("^/", "g", limits=limits)])
    for lim in (memory, redis):
        assert lim.allow("alice", "/")
        lim._reconfigure([rk.Rule("^/", "g", limits=limits[:1])])
        lim.set_quota("alice", "g", None)
        lim._reconfigure([rk.Rule("^/", "g", limits=limits, policy="fallback")])
    same(memory.check("alice", "/"), redis.check("alice", "/"))


@pytest.mark.parametrize("how", ["update_rule", "reload"])
def test_a_sliding_window_holding_a_waiter_moves_to_a_new_window_as_in_memory(
    pair: Callable[..., Pair], how: str
) -> None:
    # A waiter's unit lies in a window ahead when the window shrinks from an hour to 6 minutes, at once (no
    # time passes): memory then asks the next request to wait 7,200 s, Redis 14,400 s.
    memory, redis, _, _ = pair([rk.Rule("^/", "g", "1/hour", algorithm="sliding_window")], start=0.0)
    for lim in (memory, redis):
        assert lim.allow("bob", "/")
        assert lim._reserve("bob", "/", timeout=None).wait == 7200.0
        if how == "update_rule":
            lim.update_rule("g", rate="10/hour", burst=1)
        else:
            lim._reconfigure([rk.Rule("^/", "g", "10/hour", burst=1, algorithm="sliding_window")])
    same(memory.check("bob", "/"), redis.check("bob", "/"))


@pytest.mark.parametrize("algorithm", ["token_bucket", "fixed_window"])
def test_a_reduction_of_a_drained_key_keeps_its_window(pair: Callable[..., Pair], algorithm: rk.Algorithm) -> None:
    # One request at t=0, then 1 ns past the minute (its window ended), a reduction, a request: the window
    # starts at that request in both (memory kept the old grid, ending at 120 s, while Redis, whose key had
    # expired, started afresh: a key idle for a window now starts afresh everywhere).
    memory, redis, memory_clock, redis_clock = pair([rk.Rule("^/", "g", "3/min", algorithm=algorithm)], start=0.0)
    for lim, clock in ((memory, memory_clock), (redis, redis_clock)):
        assert lim.allow("alice", "/")
        clock._advance_to_ns(60 * S + 1)
        assert lim.reduce("alice", "/", 1)
    same(memory.check("alice", "/"), redis.check("alice", "/"))


def test_a_reduction_of_a_sliding_log_with_a_waiter_gives_back_what_memory_gives_back(
    pair: Callable[..., Pair],
) -> None:
    # 60/min with a burst of 1: one admitted, one waiting for its slot a minute ahead, then one unit
    # reduced: the newest stamp goes, the waiter's (the next request waits 60 s). Redis took the admitted
    # one (120 s).
    memory, redis, _, _ = pair([rk.Rule("^/", "g", "60/min", burst=1, algorithm="sliding_log")])
    for lim in (memory, redis):
        assert lim.allow("bob", "/")
        assert lim._reserve("bob", "/", timeout=None).wait == 60.0
        assert lim.reduce("bob", "/", 1)
    same(memory.check("bob", "/"), redis.check("bob", "/"))


def test_a_cancelled_wait_at_clock_zero_gives_back_what_it_gives_back_later(pair: Callable[..., Pair]) -> None:
    # Policy "all", 60/hour with bursts 60 and 1: one admitted, one waiting a minute for the second limit,
    # then cancelled. From any start but 0 both stores give back the waiter's unit of the first limit too
    # (reset_after 60 s). With the clock at 0 memory kept it (120 s: its newest slot, before zero, was
    # read as zero): the property found it by shrinking the start to 0, memory the odd one out.
    limits = [rk.Limit("60/hour"), rk.Limit("60/hour", burst=1)]

    def cancelled_wait(lim: rk.Limiter) -> tuple[object, ...]:
        assert lim.allow("alice", "/")
        reservation = lim._reserve("alice", "/", timeout=None)
        assert reservation.wait == 60.0
        lim._refund(reservation)
        return seen(lim.check("alice", "/"))

    later, _, _, _ = pair([rk.Rule("^/", "g", limits=limits)], start=10.0)
    expected = cancelled_wait(later)
    memory, redis, _, _ = pair([rk.Rule("^/", "g", limits=limits)], start=0.0)
    assert cancelled_wait(redis) == expected
    at_zero = cancelled_wait(memory)
    assert at_zero == expected, f"\n  memory from 0: {at_zero}\n  memory from 10 s: {expected}"


def test_two_quota_changes_between_decisions_keep_a_sliding_logs_stamps(pair: Callable[..., Pair]) -> None:
    # "60/min", then 10/s and 3/10s at one instant: the Redis script dropped the stamps older than the
    # 1 s window when it wrote the first move, so 3/10s admitted what the stamps of 7 s before refuse.
    rules = [rk.Rule("^/", "g", "60/min", algorithm="sliding_log")]
    memory, other, memory_clock, other_clock = pair(rules, start=1000.0)
    script: list[tuple[float, int]] = [(0, 1), (5.1, 1), (0, 1), (0, 1), (10, 1), (0, 1), (0, 1), (0, 2), (0.1, 1)]
    script += [(0.5, 1)] * 1 + [(0, 1)] * 3 + [(21, 2), (0, 2), (6, 1)]
    for lim, clock in ((memory, memory_clock), (other, other_clock)):
        for seconds, cost in script:
            clock.advance(seconds)
            lim.check("k", "/", cost=cost)
        lim.set_quota("k", "g", "10/s")
        lim.set_quota("k", "g", "3/10s")
        clock.advance(1)
    for _ in range(2):
        told = other.check("k", "/")
        assert seen(told) == seen(memory.check("k", "/"))
        assert (told.allowed, told.retry_after) == (False, pytest.approx(3.0))


def test_a_short_limit_between_two_long_ones_keeps_the_moves_after_it(
    sides: Callable[[dict[str, GroupSpec], int], tuple[Side, Side]], request: pytest.FixtureRequest
) -> None:
    # g1 goes gcra 60/hour -> burst 1 -> burst 2 -> a sliding window; bob's wait moves the clock past the
    # burst-1 move's horizon, and g0's change then dropped that move alone: alice's state, written before
    # all three, was moved straight to the window at its next request, losing what it used.
    gcra = GroupSpec((LimitSpec("60/hour", None, "gcra"),), "all")
    window = GroupSpec((LimitSpec("60/hour", 6, "sliding_window"),), "all")
    script: list[Step] = [
        Check("alice", "/b", 1),
        Check("bob", "/b", 1),
        Check("bob", "/b", 3),
        UpdateRule("g1", None, 1),
        UpdateRule("g1", None, 2),
        Reload(g0=gcra, g1=window),
        Throttle("bob", "/b", 3, None),
        UpdateRule("g0", None, 1),
    ]
    memory, other = sides({"g0": gcra, "g1": gcra}, 0)
    play(memory, other, script, request.node.callspec.params["other_store"])


def test_a_reduction_that_gives_nothing_back_keeps_the_ledger_of_a_wait(
    sides: Callable[[dict[str, GroupSpec], int], tuple[Side, Side]], request: pytest.FixtureRequest
) -> None:
    # A sliding window of 1 an hour: alice's check fills this window, her wait reserves a slot two windows on,
    # and her reduction, older than the key's windows, gives nothing back. Redis wrote the unchanged state
    # anyway, dropping the ledger of the wait, so the cancelled wait gave back by the window's own rule: the
    # check's unit was lost, and the next check was refused with 1 remaining and no wait.
    window = GroupSpec((LimitSpec("60/hour", 1, "sliding_window"),), "all")
    gcra = GroupSpec((LimitSpec("60/hour", None, "gcra"),), "all")
    script: list[Step] = [Check("alice", "/a", 1), Wait("alice", "/a", 1), Reduce("alice", "/a", 1), Cancel(0)]
    memory, other = sides({"g0": window, "g1": gcra}, 0)
    play(memory, other, script, request.node.callspec.params["other_store"])
