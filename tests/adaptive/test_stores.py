"""Adaptive limits on every store: memory; a shared region, where every process of the machine decides on
one gate (and the permits of a process that died are given back); Redis, where each machine decides its
adaptive limit itself, from the latency it sees (the store's other limits still decided in Redis)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
import ratekeeper as rk
import redis
from _redis import RedisServer
from _support import MakeLimiter

FORK = multiprocessing.get_context("fork")
SCRIPT_CALLS = {f"cmdstat_{c}" for c in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")}


def rules(limit: rk.Limit, *more: rk.Limit) -> list[rk.Rule]:
    return [rk.Rule("^/api", "api", limits=[limit, *more])]


def gate(lim: rk.Limiter) -> rk.AdaptiveStats:
    return lim.stats()["groups"]["api"]["adaptive"][0]


def test_an_adaptive_limit_decides_and_learns_on_every_store(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock(100.0)
    limit = rk.Limit(adaptive="aimd", probe_samples=2, window=0.05)
    lim = make_limiter(rules=rules(limit, rk.Limit("1000/s")), clock=clock)
    with lim.concurrent("a", "/api") as first:
        assert first.permits_held
        with pytest.raises(rk.RateLimited) as refused:
            lim.concurrent("b", "/api").__enter__()
        assert refused.value.decision.refused_by == "concurrency"
        clock.advance(0.02)
    with lim.concurrent("a", "/api"):
        clock.advance(0.02)
    # The probe of 2 samples ended: the limit opens to its initial 10.
    held = [lim.concurrent(f"p{i}", "/api") for i in range(10)]
    for permit in held:
        permit.__enter__()
    with pytest.raises(rk.RateLimited):
        lim.concurrent("eleventh", "/api").__enter__()
    clock.advance(0.02)
    for permit in held:
        permit.__exit__(None)
    stats = gate(lim)
    assert stats["in_flight"] == 0
    assert stats["samples"] == 12
    assert stats["baseline_latency"] == pytest.approx(0.02)
    assert lim.stats()["groups"]["api"]["refused"] == 2


def shared(path: Path) -> rk.Limiter:
    return rk.Limiter(rules=rules(rk.Limit(adaptive="gradient")), backend=rk.Shared(path=path), max_keys=1000)


def test_the_processes_of_a_machine_share_one_gate(tmp_path: Path) -> None:
    one, two = shared(tmp_path / "region"), shared(tmp_path / "region")
    with one.concurrent("a", "/api"):  # the first probe: one permit for the machine
        with pytest.raises(rk.RateLimited):
            two.concurrent("b", "/api").__enter__()
        assert gate(two)["in_flight"] == 1
    assert gate(two)["in_flight"] == 0
    assert gate(two)["samples"] == 1


def test_a_groups_limit_is_the_machines_however_many_keys_limits_came_first(tmp_path: Path) -> None:
    """The region's table of limits keeps room for the groups' own: per-key limits past their share live in
    each process, a group's one limit for the machine still finds a slot."""
    api = rk.Rule("^/api", "api", limits=[rk.Limit(adaptive="gradient")])
    keys = rk.Rule("^/keys", "keys", limits=[rk.Limit(adaptive="aimd", per="key")])

    def worker() -> rk.Limiter:
        return rk.Limiter(rules=[keys, api], backend=rk.Shared(path=tmp_path / "region"), max_keys=1000)

    one, two = worker(), worker()
    for i in range(200):
        with one.concurrent(f"peer{i}", "/keys"):
            pass
    # The first probe: one permit for the machine.
    with one.concurrent("a", "/api"), pytest.raises(rk.RateLimited):
        two.concurrent("b", "/api").__enter__()


def take_a_permit_and_die(path: Path) -> None:
    limiter = shared(path)
    limiter.concurrent("child", "/api").__enter__()
    os._exit(0)  # killed holding it: never released


def test_the_permits_of_a_process_that_died_are_given_back(tmp_path: Path) -> None:
    path = tmp_path / "region"
    parent = shared(path)
    child = FORK.Process(target=take_a_permit_and_die, args=(path,))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert gate(parent)["in_flight"] == 1
    with parent.concurrent("parent", "/api") as decision:
        assert decision.allowed
        assert gate(parent)["in_flight"] == 1


@pytest.mark.parametrize("mode", ["exact", "lease"])
def test_a_group_of_adaptive_limits_alone_never_waits_on_redis(
    mode: str, redis_server: RedisServer, redis_prefix: str
) -> None:
    """Each machine decides its adaptive limit itself: a group with no other limit sends nothing to Redis
    (no round trip per request or release), and one machine's permits never count against another's, even
    for the same key."""

    def machine() -> rk.Limiter:
        backend = rk.Redis(redis_server.url, mode=mode, prefix=redis_prefix, on_error="raise", timeout=2.0)
        return rk.Limiter(rules=rules(rk.Limit(adaptive="aimd", initial=1, max_limit=1)), backend=backend)

    one, two = machine(), machine()
    with redis.Redis(port=redis_server.port) as client:
        client.config_resetstat()
        with one.concurrent("a", "/api") as first, two.concurrent("a", "/api") as second:
            assert first.allowed
            assert second.allowed
            with pytest.raises(rk.RateLimited):
                one.concurrent("c", "/api").__enter__()
        for _ in range(20):
            with one.concurrent("a", "/api"):
                pass
        scripts = {k: v for k, v in client.info("commandstats").items() if k.split("|")[0] in SCRIPT_CALLS}
        assert scripts == {}
        assert client.keys(f"{redis_prefix}*") == []
    assert gate(one)["in_flight"] == gate(two)["in_flight"] == 0
    assert gate(one)["samples"] == 21
