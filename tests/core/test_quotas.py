"""Per-key quotas: a provider's rate replaces the group's first rate for one (peer, group) key.

The first request of a key is decided on the failsafe and starts one background fetch; requests never wait
for it unless ``Quotas(wait=...)`` says so. Failures keep the last good quota (or the failsafe), are counted, logged
once per run of failures and retried with exponential backoff on the limiter clock. Every timing here runs on
a ``ManualClock``: the tests wait for background fetches with ``wait_quotas``, never by sleeping. Providers
that must stay in flight block on the ``gate`` fixture, which is released before their limiter is closed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest
import ratekeeper as rk
from _support import admitted, assert_within_limits_in_force, run_threads
from hypothesis import given
from hypothesis import strategies as st

WORKER_PREFIX = "ratekeeper-quota"


class Provider:
    """A sync quota provider that answers from a script and records its calls.

    Call ``i`` gets ``answers[i]`` (the last answer repeats); an exception class is raised instead of
    returned. While ``gate`` is an Event, each call blocks until it is set.
    """

    def __init__(self, *answers: object, gate: threading.Event | None = None) -> None:
        self.answers = answers or ("100/min",)
        self.gate = gate
        self.calls: list[tuple[str, str]] = []
        self._called = threading.Condition()

    def __call__(self, peer: str, group: str) -> object:
        with self._called:
            index = len(self.calls)
            self.calls.append((peer, group))
            gate = self.gate
            self._called.notify_all()
        if gate is not None:
            gate.wait(timeout=30.0)
        answer = self.answers[min(index, len(self.answers) - 1)]
        if isinstance(answer, type) and issubclass(answer, BaseException):
            raise answer("quota service unavailable")
        return answer

    def wait_for_calls(self, count: int) -> None:
        """Blocks until the provider has been entered ``count`` times."""
        with self._called:
            entered = self._called.wait_for(lambda: len(self.calls) >= count, timeout=5.0)
        assert entered, f"the provider was called {len(self.calls)} times, expected {count}"


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An Event that gated providers wait on; a safety timer sets it after 10 s so no test can hang on it."""
    event = threading.Event()
    timer = threading.Timer(10.0, event.set)
    timer.daemon = True
    timer.start()
    yield event
    event.set()
    timer.cancel()


@pytest.fixture
def limiters(clock: rk.ManualClock, gate: threading.Event) -> Iterator[Callable[..., rk.Limiter]]:
    """Builds limiters on the test's clock (catch-all ``"10/min"`` unless given); closes them all afterwards."""
    made: list[rk.Limiter] = []

    def make(rate: str | None = "10/min", **options: Any) -> rk.Limiter:
        options.setdefault("clock", clock)
        limiter = rk.Limiter(rate, **options)
        made.append(limiter)
        return limiter

    yield make
    gate.set()
    for limiter in made:
        limiter.close()


def info_of(limiter: rk.Limiter, peer: str = "alice", group: str = "default") -> tuple[object, ...]:
    info = limiter.quota(peer, group)
    return (info.source, info.rate, info.age, info.fetching, info.failures)


def group_stats(limiter: rk.Limiter, group: str = "default") -> tuple[int, int]:
    stats = limiter.stats()["groups"][group]
    return (stats["quota_fetches"], stats["quota_failures"])


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ratekeeper" and r.levelno == logging.WARNING]


def worker_threads(excluding: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX) and t not in excluding]


# --- a provider's quota ----------------------------------------------------------------------------------------


def test_first_request_runs_on_the_failsafe_and_the_fetched_quota_decides_the_next(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    provider = Provider("5/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min"))
    first = limiter.check("alice")
    assert (first.allowed, first.group, first.limit, first.remaining) == (True, "default", 1, 0)
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert provider.calls == [("alice", "default")]
    assert info_of(limiter) == ("provider", rk.Rate("5/min"), 0.0, False, 0)
    # The request made on the failsafe still counts: 4 of the 5 are left.
    decisions = [limiter.check("alice") for _ in range(5)]
    assert [d.allowed for d in decisions] == [True, True, True, True, False]
    assert (decisions[0].limit, decisions[0].remaining) == (5, 3)
    assert decisions[-1].retry_after == 12.0
    assert group_stats(limiter) == (1, 0)


def test_each_peer_and_group_gets_its_own_quota(limiters: Callable[..., rk.Limiter]) -> None:
    quotas = {("alice", "api"): "4/min", ("alice", "login"): "2/min", ("bob", "api"): "6/min"}
    calls: list[tuple[str, str]] = []

    def provider(peer: str, group: str) -> str | None:
        calls.append((peer, group))
        return quotas.get((peer, group))

    limiter = limiters(
        None,
        rules=[rk.Rule("^/login", "login", "10/min"), rk.Rule("^/api", "api", "10/min")],
        quotas=rk.Quotas(provider),
    )
    for peer, path in (("alice", "/api"), ("alice", "/login"), ("bob", "/api")):
        limiter.check(peer, path)
    assert limiter.wait_quotas(timeout=5.0)
    assert sorted(calls) == sorted(quotas)
    for (peer, group), rate in quotas.items():
        assert limiter.quota(peer, group).rate == rk.Rate(rate)
        assert limiter.quota(peer, group).source == "provider"
    # One request each was made on the rule's rate (no failsafe given), the rest of the quota is left.
    assert admitted(limiter, "alice", 10, "/api") == 3
    assert admitted(limiter, "alice", 10, "/login") == 1
    assert admitted(limiter, "bob", 10, "/api") == 5
    assert admitted(limiter, "carol", 20, "/api") == 10  # no quota for carol: the rule's rate


def test_requests_never_wait_for_a_slow_provider(limiters: Callable[..., rk.Limiter], gate: threading.Event) -> None:
    provider = Provider("100/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min"))
    decisions = [limiter.check("alice") for _ in range(5)]
    # Had a check waited for the provider, only the safety timer could have released it.
    assert not gate.is_set()
    assert [d.allowed for d in decisions] == [True, True, False, False, False]
    assert {d.limit for d in decisions} == {2}
    provider.wait_for_calls(1)
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("failsafe", rk.Rate("2/min"), True, 0)
    assert group_stats(limiter) == (1, 0)
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("alice", "default").source == "provider"
    assert provider.calls == [("alice", "default")]


@pytest.mark.parametrize("answer", ["100/min", rk.Rate("100/min"), rk.Rate(100, per=60.0)])
def test_provider_may_answer_a_rate_string_or_a_rate(limiters: Callable[..., rk.Limiter], answer: object) -> None:
    limiter = limiters(quotas=rk.Quotas(Provider(answer), failsafe="1/min"))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    info = limiter.quota("alice", "default")
    assert (info.source, info.rate.count, info.rate.period) == ("provider", 100, 60.0)
    assert admitted(limiter, "alice", 200) == 99


def test_provider_answering_none_puts_the_key_on_the_rules_rate(limiters: Callable[..., rk.Limiter]) -> None:
    limiter = limiters("3/min", quotas=rk.Quotas(Provider(None), failsafe="1/min"))
    assert limiter.check("alice").limit == 1
    assert limiter.wait_quotas(timeout=5.0)
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("rule", rk.Rate("3/min"), False, 0)
    decision = limiter.check("alice")
    assert (decision.allowed, decision.limit, decision.remaining) == (True, 3, 1)
    assert admitted(limiter, "alice", 5) == 1
    assert group_stats(limiter) == (1, 0)


def test_async_provider_is_awaited(limiters: Callable[..., rk.Limiter]) -> None:
    calls: list[tuple[str, str]] = []

    async def provider(peer: str, group: str) -> str:
        await asyncio.sleep(0)
        calls.append((peer, group))
        return "7/min"

    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min"))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert calls == [("alice", "default")]
    assert info_of(limiter) == ("provider", rk.Rate("7/min"), 0.0, False, 0)
    assert admitted(limiter, "alice", 10) == 6


def test_failsafe_none_runs_a_new_key_on_the_rules_rate(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    limiter = limiters("3/min", quotas=rk.Quotas(Provider("100/min", gate=gate)))
    assert admitted(limiter, "alice", 5) == 3
    assert limiter.check("alice").limit == 3
    assert limiter.quota("alice", "default").rate == rk.Rate("3/min")
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("alice", "default").rate == rk.Rate("100/min")


# --- failures ----------------------------------------------------------------------------------------------------


def test_a_raising_provider_is_counted_logged_once_and_never_raised(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ratekeeper")
    provider = Provider(RuntimeError)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min"))
    assert limiter.check("alice").allowed
    assert limiter.wait_quotas(timeout=5.0)
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("failsafe", rk.Rate("2/min"), False, 1)
    assert group_stats(limiter) == (1, 1)
    assert len(warnings_logged(caplog)) == 1
    # The key keeps running on the failsafe: one of its 2 is left.
    assert admitted(limiter, "alice", 5) == 1
    # The retry fails too: counted, but the same run of failures is not logged again.
    clock.advance(1.5)
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 2
    assert limiter.quota("alice", "default").failures == 2
    assert group_stats(limiter) == (2, 2)
    assert len(warnings_logged(caplog)) == 1
    # Another key's failure is logged: once per key.
    limiter.check("bob")
    assert limiter.wait_quotas(timeout=5.0)
    assert group_stats(limiter) == (3, 3)
    assert len(warnings_logged(caplog)) == 2


def test_a_failure_after_a_good_fetch_keeps_the_quota_as_stale(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock
) -> None:
    provider = Provider("5/min", RuntimeError)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min", ttl=60.0))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert info_of(limiter) == ("provider", rk.Rate("5/min"), 0.0, False, 0)
    clock.advance(61)
    assert limiter.check("alice").limit == 5
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 2
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("stale", rk.Rate("5/min"), False, 1)
    assert group_stats(limiter) == (2, 1)
    # Decisions keep using the stale quota: one used at 61 s, 4 left.
    assert admitted(limiter, "alice", 10) == 4


def test_a_new_run_of_failures_after_a_success_is_logged_again(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ratekeeper")
    provider = Provider(RuntimeError, "5/min", RuntimeError)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min", ttl=60.0))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(warnings_logged(caplog)) == 1
    clock.advance(1.5)
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("alice", "default").source == "provider"
    assert limiter.quota("alice", "default").failures == 0
    clock.advance(61)
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 3
    assert limiter.quota("alice", "default").source == "stale"
    assert len(warnings_logged(caplog)) == 2


@pytest.mark.parametrize("answer", [42, 3.5, b"100/min", ["100/min"], "10/fortnight", "0/min", object()])
def test_a_provider_answering_anything_else_is_a_failure(
    limiters: Callable[..., rk.Limiter], caplog: pytest.LogCaptureFixture, answer: object
) -> None:
    caplog.set_level(logging.WARNING, logger="ratekeeper")
    limiter = limiters(quotas=rk.Quotas(Provider(answer), failsafe="2/min"))
    assert limiter.check("alice").allowed
    assert limiter.wait_quotas(timeout=5.0)
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("failsafe", rk.Rate("2/min"), False, 1)
    assert group_stats(limiter) == (1, 1)
    assert len(warnings_logged(caplog)) == 1
    assert admitted(limiter, "alice", 5) == 1


def test_an_async_provider_that_raises_is_a_failure(limiters: Callable[..., rk.Limiter]) -> None:
    async def provider(peer: str, group: str) -> str:
        raise ConnectionError("quota service unavailable")

    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min"))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("alice", "default").failures == 1
    assert limiter.quota("alice", "default").source == "failsafe"
    assert group_stats(limiter) == (1, 1)


class ProviderAbort(BaseException):
    """An exception outside ``Exception``, as a provider's own code might define."""


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, GeneratorExit, ProviderAbort])
def test_a_provider_raising_outside_exception_is_a_failure_and_the_worker_serves_on(
    limiters: Callable[..., rk.Limiter], raised: type[BaseException]
) -> None:
    # Once, such an exception ended the only worker: the failure went uncounted, the key stayed
    # "fetching" and every later fetch waited in the queue for ever.
    provider = Provider(raised, "5/min")
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min", workers=1))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("failsafe", rk.Rate("2/min"), False, 1)
    assert group_stats(limiter) == (1, 1)
    limiter.check("bob")
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("bob", "default").source == "provider"
    assert limiter.check("bob").limit == 5


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, ProviderAbort])
def test_an_async_provider_raising_outside_exception_is_a_failure_and_later_fetches_still_run(
    limiters: Callable[..., rk.Limiter], raised: type[BaseException]
) -> None:
    # SystemExit and KeyboardInterrupt escaping a task also stop asyncio's loop, which every async fetch needs.
    async def provider(peer: str, group: str) -> str:
        if peer == "alice":
            raise raised("quota service unavailable")
        return "5/min"

    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min", workers=1))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("alice", "default").failures == 1
    assert group_stats(limiter) == (1, 1)
    limiter.check("bob")
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("bob", "default").source == "provider"


# --- timeouts ----------------------------------------------------------------------------------------------------


def test_a_fetch_running_past_quota_timeout_fails_on_the_next_use_and_its_late_result_is_ignored(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock, gate: threading.Event
) -> None:
    provider = Provider("100/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min", timeout=5.0))
    limiter.check("alice")
    provider.wait_for_calls(1)
    clock.advance(4.9)
    limiter.check("alice")
    assert limiter.quota("alice", "default").fetching
    assert limiter.quota("alice", "default").failures == 0
    clock.advance(0.2)  # 5.1 s after the fetch started
    limiter.check("alice")
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("failsafe", rk.Rate("2/min"), False, 1)
    assert group_stats(limiter) == (1, 1)
    gate.set()  # the provider answers at last
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("alice", "default").source == "failsafe"
    assert limiter.quota("alice", "default").rate == rk.Rate("2/min")
    assert limiter.check("alice").limit == 2
    # The retry comes 1 s after the failure and succeeds.
    clock.advance(1.1)
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 2
    assert limiter.quota("alice", "default").source == "provider"
    assert limiter.quota("alice", "default").rate == rk.Rate("100/min")


def test_an_async_fetch_is_timed_out_in_real_time_by_the_worker(limiters: Callable[..., rk.Limiter]) -> None:
    async def provider(peer: str, group: str) -> str:
        await asyncio.sleep(3600)
        return "100/min"

    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min", timeout=0.2))
    limiter.check("alice")
    # The limiter clock never moves: only the worker's real-time timeout can end this fetch.
    assert limiter.wait_quotas(timeout=5.0)
    source, rate, _, fetching, failures = info_of(limiter)
    assert (source, rate, fetching, failures) == ("failsafe", rk.Rate("2/min"), False, 1)
    assert group_stats(limiter) == (1, 1)


def test_a_fetch_waiting_for_a_worker_is_never_failed_nor_queued_twice(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock, gate: threading.Event
) -> None:
    # Once, the timeout counted from when the fetch was queued, so a fetch still waiting behind
    # others was failed at the key's next use, and a retry queued on top while the first still ran later.
    provider = Provider("5/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min", timeout=2.0, workers=1))
    limiter.check("alice")
    provider.wait_for_calls(1)  # the only worker is held by alice's fetch
    limiter.check("bob")
    # Bob's fetch waits far past the timeout, through uses that would retry a failed fetch after its backoff.
    for _ in range(10):
        clock.advance(5.0)
        limiter.check("bob")
    assert limiter.stats()["quota_queue"] == 1
    source, rate, _, fetching, failures = info_of(limiter, "bob")
    assert (source, rate, fetching, failures) == ("failsafe", rk.Rate("2/min"), True, 0)
    assert group_stats(limiter) == (2, 0)
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert provider.calls == [("alice", "default"), ("bob", "default")]
    assert limiter.quota("bob", "default").source == "provider"
    assert group_stats(limiter) == (2, 0)


def test_a_queued_fetch_superseded_by_set_quota_never_calls_the_provider(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    provider = Provider("5/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min", workers=1))
    limiter.check("alice")
    provider.wait_for_calls(1)
    limiter.check("bob")
    limiter.set_quota("bob", "default", "3/min")
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert provider.calls == [("alice", "default")]
    assert limiter.quota("bob", "default").source == "set"


# --- single flight, TTL, backoff ---------------------------------------------------------------------------------


def test_concurrent_first_requests_of_a_key_start_a_single_fetch(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    provider = Provider("100/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="10/min"))
    decisions: list[rk.Decision | None] = [None] * 50

    def work(i: int) -> None:
        decisions[i] = limiter.check("alice")

    run_threads(50, work)
    # All 50 were decided on the failsafe while the fetch was held.
    assert sum(d is not None and d.allowed for d in decisions) == 10
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert provider.calls == [("alice", "default")]
    assert group_stats(limiter) == (1, 0)


def test_a_quota_is_refetched_on_the_first_use_after_its_ttl_and_serves_until_then(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock, gate: threading.Event
) -> None:
    provider = Provider("5/min", "7/min")
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min", ttl=300.0))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    clock.advance(299)
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 1
    assert info_of(limiter) == ("provider", rk.Rate("5/min"), 299.0, False, 0)
    # Past the TTL: the next use starts one re-fetch, and the old quota serves while it runs.
    provider.gate = gate
    clock.advance(2)
    assert limiter.check("alice").limit == 5
    provider.wait_for_calls(2)
    assert info_of(limiter) == ("provider", rk.Rate("5/min"), 301.0, True, 0)
    assert [limiter.check("alice").limit for _ in range(3)] == [5, 5, 5]
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 2
    assert info_of(limiter) == ("provider", rk.Rate("7/min"), 0.0, False, 0)
    assert limiter.check("alice").limit == 7
    # The new quota has a fresh TTL.
    clock.advance(299)
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 2
    assert group_stats(limiter) == (2, 0)


def test_no_fetch_happens_without_a_use(limiters: Callable[..., rk.Limiter], clock: rk.ManualClock) -> None:
    provider = Provider("5/min")
    limiter = limiters(quotas=rk.Quotas(provider, ttl=10.0))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    clock.advance(1_000)
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 1
    assert limiter.quota("alice", "default").age == 1_000.0


BACKOFFS = {
    # Quotas' ttl: the waits after the 1st, 2nd, ... consecutive failures, in ms: doubling, capped at min(ttl, 300 s).
    300.0: [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000, 300_000],
    10_000.0: [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000],
    2.5: [1_000, 2_000, 2_500, 2_500, 2_500],
}


@pytest.mark.parametrize("ttl", sorted(BACKOFFS))
def test_failed_fetches_are_retried_with_exponential_backoff_on_the_next_use(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock, ttl: float
) -> None:
    provider = Provider(RuntimeError)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="100/min", ttl=ttl))
    now_ms = 0

    def use_at(at_ms: int) -> int:
        nonlocal now_ms
        clock.advance((at_ms - now_ms) / 1_000)
        now_ms = at_ms
        limiter.check("alice")
        assert limiter.wait_quotas(timeout=5.0)
        return len(provider.calls)

    assert use_at(0) == 1
    failed_at = 0
    for failures, wait_ms in enumerate(BACKOFFS[ttl], start=1):
        assert limiter.quota("alice", "default").failures == failures
        assert use_at(failed_at + wait_ms - 10) == failures, f"re-fetched before {wait_ms} ms"
        failed_at += wait_ms + 10
        assert use_at(failed_at) == failures + 1, f"not re-fetched after {wait_ms} ms"
    assert group_stats(limiter) == (len(BACKOFFS[ttl]) + 1, len(BACKOFFS[ttl]) + 1)


def test_retries_wait_for_a_use_of_the_key(limiters: Callable[..., rk.Limiter], clock: rk.ManualClock) -> None:
    provider = Provider(RuntimeError, "5/min")
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min"))
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    clock.advance(30)
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 1
    limiter.check("alice")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 2
    assert limiter.quota("alice", "default").source == "provider"


# --- close -------------------------------------------------------------------------------------------------------


def test_close_stops_the_workers(clock: rk.ManualClock) -> None:
    before = set(threading.enumerate())
    limiter = rk.Limiter("10/min", quotas=rk.Quotas(Provider("5/min"), workers=3), clock=clock)
    try:
        for peer in ("alice", "bob", "carol", "dave"):
            limiter.check(peer)
        assert limiter.wait_quotas(timeout=5.0)
        workers = worker_threads(before)
        assert 1 <= len(workers) <= 3
    finally:
        limiter.close()
    assert limiter.wait_quotas(timeout=5.0)
    for worker in workers:
        worker.join(timeout=5.0)
    assert [w.name for w in workers if w.is_alive()] == []
    assert worker_threads(before) == []
    limiter.close()  # idempotent


def test_with_statement_closes_the_limiter(clock: rk.ManualClock) -> None:
    before = set(threading.enumerate())
    provider = Provider("5/min")
    with rk.Limiter("10/min", quotas=rk.Quotas(provider), clock=clock) as limiter:
        assert isinstance(limiter, rk.Limiter)
        limiter.check("alice")
        assert limiter.wait_quotas(timeout=5.0)
        assert limiter.quota("alice", "default").source == "provider"
        workers = worker_threads(before)
        assert workers
    for worker in workers:
        worker.join(timeout=5.0)
    assert worker_threads(before) == []
    assert limiter.wait_quotas(timeout=5.0)


EXIT_WITHOUT_CLOSE = """
import asyncio, threading, ratekeeper as rk
hang = threading.Event()
def stuck(peer, group):
    hang.wait()  # a provider that never answers
async def stuck_async(peer, group):
    await asyncio.Event().wait()
a = rk.Limiter("10/min", quotas=rk.Quotas(stuck, workers=2))
b = rk.Limiter("10/min", quotas=rk.Quotas(stuck_async, timeout=60.0))
assert a.allow("alice") and b.allow("bob")
print("decided")
"""


@pytest.mark.parametrize("collect", [False, True])
def test_the_interpreter_exits_with_workers_running_and_providers_stuck(collect: bool) -> None:
    # Neither limiter is closed; both have a fetch stuck in the provider. With `collect`, the limiters are
    # dropped first (their collection closes the queues); otherwise atexit stops the workers.
    code = EXIT_WITHOUT_CLOSE + ("del a, b\nimport gc; gc.collect()\n" if collect else "")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "decided", "")


# --- Quotas(wait=...) --------------------------------------------------------------------------------------------


def test_quota_wait_decides_the_first_request_on_the_fetched_quota(limiters: Callable[..., rk.Limiter]) -> None:
    provider = Provider("5/min")
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min", wait=5.0))
    first = limiter.check("alice")
    assert (first.allowed, first.limit, first.remaining) == (True, 5, 4)
    assert limiter.quota("alice", "default").source == "provider"
    assert provider.calls == [("alice", "default")]
    assert admitted(limiter, "alice", 10) == 4


def test_quota_wait_gives_up_after_its_time_and_decides_on_the_failsafe(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    provider = Provider("5/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min", wait=0.2))
    started = time.monotonic()
    first = limiter.check("alice")
    waited = time.monotonic() - started
    assert (first.allowed, first.limit, first.remaining) == (True, 1, 0)
    assert 0.19 <= waited < 5.0
    assert not gate.is_set()
    assert limiter.quota("alice", "default").source == "failsafe"
    assert limiter.quota("alice", "default").fetching
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.quota("alice", "default").source == "provider"


@pytest.mark.asyncio
async def test_athrottle_waits_for_the_first_fetch_without_blocking_the_loop(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    provider = Provider("5/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min", wait=5.0))
    order: list[str] = []

    async def first_request() -> rk.Decision:
        decision = await limiter.athrottle("alice")
        order.append("athrottle")
        return decision

    async def other_work() -> None:
        # Runs only if the loop is free while athrottle waits; the provider answers once it has.
        await asyncio.to_thread(provider.wait_for_calls, 1)
        for _ in range(10):
            await asyncio.sleep(0)
        order.append("other")
        gate.set()

    decision, _ = await asyncio.gather(first_request(), other_work())
    assert order == ["other", "athrottle"]
    assert (decision.allowed, decision.limit, decision.remaining) == (True, 5, 4)


# --- bounded records ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flood_known", [False, True])
def test_busy_accounts_keep_their_quotas_through_a_flood_of_many_times_max_keys_new_accounts(
    limiters: Callable[..., rk.Limiter], flood_known: bool
) -> None:
    # Once, records were evicted by use counts alone, halved once per max_keys of new keys. A flood
    # thread holding the GIL inserts several times max_keys between two turns of the threads serving busy
    # accounts: their counts fell to 0, below a new key's 1, and they were evicted onto the failsafe. Here each
    # busy account is used 50 times, then 10 x max_keys one-shot accounts arrive, five times over.
    def provider(peer: str, group: str) -> str:
        if flood_known:
            return "1/min"
        raise LookupError(peer)

    max_keys = 1_000
    limiter = limiters("60/min", quotas=rk.Quotas(provider, failsafe="5/min"), max_keys=max_keys)
    busy = [f"account-{i}" for i in range(12)]
    for peer in busy:
        limiter.set_quota(peer, "default", "10/s")
    new = 0
    for _ in range(5):
        for _ in range(50):
            for peer in busy:
                limiter.allow(peer)
        for _ in range(10 * max_keys):
            assert limiter.allow(f"new-{new}")
            new += 1
        assert limiter.wait_quotas(timeout=5.0)
    assert {peer: limiter.quota(peer, "default").source for peer in busy} == dict.fromkeys(busy, "set")
    assert limiter.check(busy[0]).limit == 10
    assert limiter.stats()["quota_records"] <= max_keys


def test_records_stay_bounded_when_every_key_is_used_again(limiters: Callable[..., rk.Limiter]) -> None:
    # Keys used more than once are evicted last, but still evicted when nothing else is left.
    limiter = limiters("60/min", quotas=rk.Quotas(Provider("5/min"), failsafe="5/min"), max_keys=1_000)
    for i in range(5_000):
        limiter.allow(f"peer-{i}")
        limiter.allow(f"peer-{i}")
        if i % 100 == 0:
            assert limiter.wait_quotas(timeout=5.0)
    assert limiter.wait_quotas(timeout=5.0)
    assert limiter.stats()["quota_records"] <= 1_000


# --- quota() and set_quota ---------------------------------------------------------------------------------------


def test_quota_of_an_unseen_key_reports_the_failsafe_and_starts_no_fetch(limiters: Callable[..., rk.Limiter]) -> None:
    provider = Provider("5/min")
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min"))
    info = limiter.quota("alice", "default")
    assert isinstance(info, rk.QuotaInfo)
    assert info_of(limiter) == ("failsafe", rk.Rate("2/min"), None, False, 0)
    assert limiter.wait_quotas(timeout=5.0)
    assert provider.calls == []
    assert group_stats(limiter) == (0, 0)
    assert len(limiter) == 0


@pytest.mark.parametrize("with_provider", [False, True])
def test_quota_of_an_unseen_key_without_failsafe_reports_the_rule(
    limiters: Callable[..., rk.Limiter], with_provider: bool
) -> None:
    options: dict[str, Any] = {"quotas": rk.Quotas(Provider("5/min"))} if with_provider else {}
    limiter = limiters(None, rules=[rk.Rule("^/api", "api", "3/min")], **options)
    assert info_of(limiter, "alice", "api") == ("rule", rk.Rate("3/min"), None, False, 0)


def test_quota_info_is_read_only(limiters: Callable[..., rk.Limiter]) -> None:
    info = limiters().quota("alice", "default")
    with pytest.raises(AttributeError):
        info.source = "set"  # type: ignore[misc]


def test_set_quota_takes_effect_at_once_and_reports_its_age(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock
) -> None:
    limiter = limiters()
    limiter.set_quota("alice", "default", "3/min")
    assert info_of(limiter) == ("set", rk.Rate("3/min"), 0.0, False, 0)
    clock.advance(12.5)
    assert limiter.quota("alice", "default").age == 12.5
    decision = limiter.check("alice")
    assert (decision.limit, decision.remaining) == (3, 2)
    assert admitted(limiter, "alice", 5) == 2
    assert admitted(limiter, "bob", 20) == 10
    limiter.set_quota("bob", "default", rk.Rate(1, per=1.0))
    assert limiter.quota("bob", "default").rate == rk.Rate("1/s")


def test_set_quota_none_puts_the_key_back_on_the_rules_rate(limiters: Callable[..., rk.Limiter]) -> None:
    limiter = limiters()
    limiter.set_quota("alice", "default", "3/min")
    limiter.set_quota("alice", "default", None)
    info = limiter.quota("alice", "default")
    # The spec says "Source 'set'" for set_quota, and "rule" for a key on the rule's rate: either is accepted.
    assert (info.rate, info.source in ("set", "rule")) == (rk.Rate("10/min"), True)
    assert admitted(limiter, "alice", 20) == 10


def test_set_quota_cancels_the_result_of_an_in_flight_fetch(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    provider = Provider("100/min", gate=gate)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="1/min"))
    limiter.check("alice")
    provider.wait_for_calls(1)
    limiter.set_quota("alice", "default", "3/min")
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    source, rate, age, _, _ = info_of(limiter)
    assert (source, rate, age) == ("set", rk.Rate("3/min"), 0.0)
    # The request made on the failsafe counts: 2 of 3 left.
    assert admitted(limiter, "alice", 10) == 2


def test_set_quota_rejects_an_unknown_group_and_a_bad_rate(limiters: Callable[..., rk.Limiter]) -> None:
    limiter = limiters()
    with pytest.raises(ValueError, match=r"\bgroup\b"):
        limiter.set_quota("alice", "nope", "3/min")
    with pytest.raises(ValueError, match="fortnight"):
        limiter.set_quota("alice", "default", "10/fortnight")
    assert limiter.quota("alice", "default").source == "rule"


# --- how a quota applies -----------------------------------------------------------------------------------------


def test_a_quota_replaces_only_the_first_rate_limit(limiters: Callable[..., rk.Limiter]) -> None:
    limiter = limiters(None, rules=[rk.Rule("", "api", limits=["10/min", "20/hour"])])
    limiter.set_quota("alice", "api", "50/min")
    assert admitted(limiter, "alice", 100) == 20  # the hourly limit binds now
    assert admitted(limiter, "bob", 100) == 10


def test_a_quota_keeps_the_groups_algorithm(limiters: Callable[..., rk.Limiter]) -> None:
    limiter = limiters(None, rules=[rk.Rule("", "tb", "2/s", algorithm="token_bucket")])
    limiter.set_quota("alice", "tb", "4/s")
    assert admitted(limiter, "alice", 10) == 4
    refused = limiter.check("alice")
    # A token bucket's window is burst x interval = 1 s (GCRA would let one in after 0.25 s).
    assert (refused.allowed, refused.limit, refused.retry_after) == (False, 4, 1.0)


def test_a_quotas_burst_is_its_count_unless_the_rule_set_one(limiters: Callable[..., rk.Limiter]) -> None:
    limiter = limiters(None, rules=[rk.Rule("^/a", "a", "10/min", burst=2), rk.Rule("^/b", "b", "10/min")])
    limiter.set_quota("alice", "a", "100/min")
    limiter.set_quota("alice", "b", "100/min")
    assert admitted(limiter, "alice", 200, "/a") == 2
    assert limiter.check("alice", "/a").retry_after == pytest.approx(0.6, abs=1e-9)
    assert admitted(limiter, "alice", 200, "/b") == 100


def test_two_used_of_a_2_per_min_failsafe_leave_98_under_a_100_per_min_quota(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    limiter = limiters(quotas=rk.Quotas(Provider("100/min", gate=gate), failsafe="2/min"))
    assert admitted(limiter, "alice", 5) == 2
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    decision = limiter.check("alice")
    assert (decision.allowed, decision.limit, decision.remaining) == (True, 100, 97)
    assert admitted(limiter, "alice", 200) == 97


def test_five_used_of_5_per_min_leave_5_under_10_per_min(
    limiters: Callable[..., rk.Limiter], gate: threading.Event
) -> None:
    limiter = limiters(quotas=rk.Quotas(Provider("10/min", gate=gate), failsafe="5/min"))
    assert admitted(limiter, "alice", 10) == 5
    gate.set()
    assert limiter.wait_quotas(timeout=5.0)
    assert admitted(limiter, "alice", 20) == 5


def test_lowering_a_quota_takes_effect_at_once_and_the_usage_drains_at_the_new_rate(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock
) -> None:
    limiter = limiters()
    limiter.set_quota("alice", "default", "100/min")
    assert admitted(limiter, "alice", 80) == 80
    limiter.set_quota("alice", "default", "50/min")
    refused = limiter.check("alice")
    assert (refused.allowed, refused.limit) == (False, 50)
    # 80 used at 50/min is 96 s of debt; the next request fits once 49 are left in use: 96 + 1.2 - 60 = 37.2 s.
    assert refused.retry_after == pytest.approx(37.2, abs=1e-9)
    clock.advance(36)
    assert not limiter.allow("alice")
    clock.advance(1.2)
    assert limiter.allow("alice")
    assert limiter.check("alice").retry_after == pytest.approx(1.2, abs=1e-9)


# --- bad arguments -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failsafe", "10/fortnight"),
        ("failsafe", "0/min"),
        ("ttl", -1.0),
        ("ttl", math.nan),
        ("timeout", -0.5),
        ("timeout", math.nan),
        ("wait", -0.1),
        ("wait", math.nan),
        ("workers", 0),
        ("workers", -2),
    ],
)
def test_bad_quota_settings_raise_value_error_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        rk.Quotas(Provider("5/min"), **{field: value})


@pytest.mark.parametrize("provider", [42, "https://quotas.example/"])
def test_a_provider_that_is_not_callable_raises_type_error(provider: object) -> None:
    with pytest.raises(TypeError, match=r"\bprovider\b"):
        rk.Quotas(provider)


# --- property ----------------------------------------------------------------------------------------------------

# Rate strings with (count, period in µs); the burst of a quota is its count.
RATES = {"2/s": (2, 1_000_000), "10/min": (10, 60_000_000), "100/min": (100, 60_000_000), "3/10s": (3, 10_000_000)}

steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(0, 20_000_000)),
        st.tuples(st.just("set"), st.sampled_from(sorted(RATES))),
        st.tuples(st.just("requests"), st.integers(1, 40)),
    ),
    max_size=25,
)


@given(steps)
def test_admissions_never_exceed_the_quotas_in_force(actions: list[tuple[str, Any]]) -> None:
    clock = rk.ManualClock()
    now_us = 0
    changes: list[tuple[int, int, Fraction]] = [(0, 10, Fraction(10, 60_000_000))]
    admissions: dict[int, int] = {}
    with rk.Limiter("10/min", clock=clock) as limiter:
        for action, value in actions:
            if action == "advance":
                clock.advance(value / 1e6)
                now_us += value
            elif action == "set":
                limiter.set_quota("alice", "default", value)
                count, period_us = RATES[value]  # a quota's burst is its count
                changes.append((now_us, count, Fraction(count, period_us)))
            else:
                admissions[now_us] = admissions.get(now_us, 0) + admitted(limiter, "alice", value)
    assert_within_limits_in_force({t: n for t, n in admissions.items() if n}, changes)


# --- "no such key" and old asyncio -------------------------------------------------------------------------------


def test_a_provider_saying_no_such_key_is_not_a_failure_and_logs_no_warning(
    limiters: Callable[..., rk.Limiter], clock: rk.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    # LookupError is how a provider says "no such account" (the example of docs/quotas.md). It used
    # to log a WARNING for every unknown key and count as a failure, retried with backoff every few seconds.
    caplog.set_level(logging.DEBUG, logger="ratekeeper")
    provider = Provider(LookupError)
    limiter = limiters(quotas=rk.Quotas(provider, failsafe="2/min", ttl=60.0))
    for peer in ("ghost-1", "ghost-2", "ghost-3"):
        assert limiter.allow(peer)
    assert limiter.wait_quotas(timeout=5.0)
    assert warnings_logged(caplog) == []
    debug = [r.getMessage() for r in caplog.records if r.name == "ratekeeper" and r.levelno == logging.DEBUG]
    assert [m for m in debug if "knows no peer" in m] == debug
    assert len(debug) == 3
    info = limiter.quota("ghost-1", "default")
    assert (info.source, info.rate, info.failures, info.fetching) == ("failsafe", rk.Rate("2/min"), 0, False)
    stats = limiter.stats()["groups"]["default"]
    assert (stats["quota_fetches"], stats["quota_failures"], stats["quota_unknown"]) == (3, 0, 3)
    # Asked again after the TTL, not after a failure's backoff.
    clock.advance(59.0)
    limiter.allow("ghost-1")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 3
    clock.advance(1.0)
    limiter.allow("ghost-1")
    assert limiter.wait_quotas(timeout=5.0)
    assert len(provider.calls) == 4


@pytest.mark.asyncio
async def test_first_fetch_waiters_stop_on_asyncio_timeout_as_older_pythons_raise_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before Python 3.11 asyncio.wait_for raises asyncio.TimeoutError, which is not the
    # builtin TimeoutError; `except TimeoutError` let it escape. Emulated here with a distinct class.
    from ratekeeper._quota import FirstFetchWaiters

    class OldAsyncioTimeout(Exception):
        pass

    async def wait_for(awaitable: object, timeout: float) -> None:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        raise OldAsyncioTimeout

    monkeypatch.setattr(asyncio, "TimeoutError", OldAsyncioTimeout)
    monkeypatch.setattr(asyncio, "wait_for", wait_for)
    # Returns (the wait is over) instead of raising into athrottle.
    await FirstFetchWaiters().wait(lambda: True, timeout=5.0)


# --- rk.Quotas -------------------------------------------------------------------------------------------------


def test_quotas_defaults_and_frozen() -> None:
    quotas = rk.Quotas()
    assert (quotas.provider, quotas.failsafe, quotas.ttl, quotas.timeout, quotas.workers, quotas.wait) == (
        None,
        None,
        300.0,
        5.0,
        4,
        0.0,
    )
    with pytest.raises(AttributeError):
        quotas.timeout = 1.0  # type: ignore[misc]
    assert rk.Limiter("1/s").quotas.timeout == 5.0


def test_quotas_object_works_like_the_keywords(clock: rk.ManualClock) -> None:
    gate = threading.Event()
    calls: list[tuple[str, str]] = []

    def provider(peer: str, group: str) -> str:
        calls.append((peer, group))
        gate.wait(timeout=10.0)
        return "5/min"

    quotas = rk.Quotas(provider=provider, failsafe="1/min", timeout=1.0)
    with rk.Limiter("10/s", quotas=quotas, clock=clock) as limiter:
        try:
            assert limiter.quotas.timeout == 1.0
            assert limiter.quotas.provider is provider
            first = limiter.check("alice")
            assert (first.allowed, first.limit) == (True, 1)  # on the failsafe
            assert not limiter.allow("alice")
        finally:
            gate.set()
        assert limiter.wait_quotas(timeout=5.0)
        assert calls == [("alice", "default")]
        info = limiter.quota("alice", "default")
        assert (info.source, info.rate) == ("provider", rk.Rate("5/min"))
        assert admitted(limiter, "alice", 10) == 4  # 5/min, one used on the failsafe


def test_the_settings_of_quotas_show_on_the_limiter(clock: rk.ManualClock) -> None:
    with rk.Limiter("10/s", quotas=rk.Quotas(lambda peer, group: None, ttl=60.0, timeout=2.0), clock=clock) as limiter:
        assert (limiter.quotas.timeout, limiter.quotas.ttl, limiter.quotas.workers) == (2.0, 60.0, 4)


@pytest.mark.parametrize(
    ("old", "setting"),
    [
        ("quota_provider", "provider"),
        ("failsafe", "failsafe"),
        ("quota_ttl", "ttl"),
        ("quota_timeout", "timeout"),
        ("quota_workers", "workers"),
        ("quota_wait", "wait"),
    ],
)
def test_a_removed_quota_keyword_is_refused_naming_its_place_in_quotas(
    clock: rk.ManualClock, old: str, setting: str
) -> None:
    # The keywords that came before Quotas were removed in 0.1.0; the error says what replaced each.
    with pytest.raises(TypeError, match=rf"no longer takes {old}: give quotas=ratekeeper\.Quotas\({setting}=\.\.\.\)"):
        rk.Limiter("10/s", clock=clock, **{old: None})


def test_a_limiter_without_quotas_has_the_defaults_of_quotas() -> None:
    # The defaults are written twice in the core (Quotas' signature and a limiter's fallback without quotas=).
    defaults = {name: p.default for name, p in inspect.signature(rk.Quotas).parameters.items() if name != "provider"}
    settings = rk.Limiter("1/s").quotas
    assert {name: getattr(settings, name) for name in defaults} == defaults
    assert defaults == {"failsafe": None, "ttl": 300.0, "timeout": 5.0, "workers": 4, "wait": 0.0}
