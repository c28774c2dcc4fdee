"""The quota server's wrk experiment as a test: per-account quotas, an unknown account, a flood of ids, an exempt admin.

One limiter configured like the quota server (the rule rate 60/min, quotas from a provider that looks the
account up in a dict and raises for an unknown one, a 5/min failsafe until a key's quota lands) and one
thread per profile, as ``wrk`` runs one sequence per profile:

- before the quotas land (the provider is held at a gate), every profile sends ``FIRST`` requests at t=0:
  the failsafe admits its burst and each key starts one fetch; then the gate opens and ``wait_quotas``;
- then ``ROUNDS`` rounds of ``STEP_S`` seconds on a ManualClock that moves only between rounds (a barrier's
  action), every profile sending a burst-draining ``OPENING`` round, then ``PER_ROUND`` requests per round,
  more than any quota opens in one step, and a step no longer than any burst's window, so every account is
  saturated and its count is exact.

GCRA admits at most ``burst + floor(rate * T)`` in T seconds. A quota that lands carries over what the key
used on the failsafe, counted in requests, so a key that the failsafe admitted ``f`` times at t=0 is
admitted exactly ``max(f, burst + floor(rate * T))`` times over [0, T] when saturated.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from fractions import Fraction
from math import floor

import pytest
import ratekeeper as rk
from _support import run_threads

GROUP = "default"
RULE_RATE = "60/min"
FAILSAFE = rk.Rate("5/min")
QUOTAS = {"alice": "1/min", "bob": "100/min", "carol": "1000/min", "dave": "10/s"}
ACCOUNTS = tuple(QUOTAS)
INVALID, INVALID_N, ADMIN = "invalid", "invalidN", "admin"
PROFILES = (*ACCOUNTS, INVALID, INVALID_N, ADMIN)

FIRST = 10  # requests per profile at t=0, before the quotas land: twice the failsafe's burst
ROUNDS = 300
STEP_S = 1  # at most every burst's window (dave: 10 at 10/s, 1 s), so no key's unused allowance overflows
ELAPSED_S = ROUNDS * STEP_S  # the clock of the last round
OPENING = 1_100  # requests per profile in the first round after the quotas landed: drains carol's 995
PER_ROUND = 20  # then per round: more than a step of 1 s opens for any profile (carol: 16.7, dave: 10)

FLOOD = 200_000  # new ids in the memory test
FLOOD_THREADS = 4
FLOOD_MAX_KEYS = 10_000
# Each flood thread sends alice and carol a request every ACCOUNT_EVERY / FLOOD_THREADS of its new ids.
ACCOUNT_EVERY = 2_000
# stats()["memory_bytes"] (the state map and the quota records) at 10,000 keys after 200,000 to 1,000,000 new
# ids: 5.1-5.7 MB observed, about 520 B per key, most of it quota records; the bound leaves ~40 % margin.
FLOOD_MEMORY_BOUND = 8_000_000


class Accounts:
    """The quota provider: a dict lookup that raises for an unknown account, held at a gate until it opens."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls: Counter[str] = Counter()
        self.groups: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, peer: str, group: str) -> str:
        with self._lock:
            self.calls[peer] += 1
            self.groups.add(group)
        if not self.gate.wait(timeout=30):
            raise TimeoutError("the test never opened the gate")
        try:
            return QUOTAS[peer]
        except KeyError:
            raise LookupError("no such account") from None


def limiter(accounts: Accounts, clock: rk.ManualClock, max_keys: int) -> rk.Limiter:
    # ttl past the run: no re-fetch of a landed quota, whose landing time would depend on the threads.
    return rk.Limiter(
        rate=RULE_RATE,
        exempt_peers=[ADMIN],
        quotas=rk.Quotas(accounts, failsafe=FAILSAFE, ttl=3_600.0, workers=4),
        max_keys=max_keys,
        clock=clock,
    )


def allowance(rate: rk.Rate, seconds: int) -> int:
    """GCRA's most admissions in ``seconds``: the burst (the rate's count) + floor(rate * seconds)."""
    return rate.count + floor(Fraction(seconds) * rate.count / Fraction(rate.period))


def new_id(rng: random.Random) -> str:
    """A random 32-character hex account id, like ``uuid4().hex``."""
    return f"{rng.getrandbits(128):032x}"


def test_profiles_get_what_their_quotas_allow_and_no_more(clock: rk.ManualClock) -> None:
    accounts = Accounts()
    first = dict.fromkeys(PROFILES, 0)
    admitted = dict.fromkeys(PROFILES, 0)
    sent = dict.fromkeys(PROFILES, 0)

    with limiter(accounts, clock, max_keys=100_000) as lim:

        def send(profile: str, n: int, rng: random.Random) -> int:
            allow = lim.allow
            if profile == INVALID_N:
                return sum(allow(new_id(rng)) for _ in range(n))
            return sum(allow(profile) for _ in range(n))

        def cold(i: int) -> None:
            first[PROFILES[i]] = send(PROFILES[i], FIRST, random.Random(i))

        try:
            run_threads(len(PROFILES), cold)
            for profile in (*ACCOUNTS, INVALID):
                info = lim.quota(profile, GROUP)
                assert (info.source, info.rate, info.fetching) == ("failsafe", FAILSAFE, True), profile
        finally:
            accounts.gate.set()
        assert lim.wait_quotas(timeout=5)

        # The failsafe decided the first requests: its burst for each key, every request of a new id.
        assert first == {**dict.fromkeys((*ACCOUNTS, INVALID), FAILSAFE.count), INVALID_N: FIRST, ADMIN: FIRST}
        # One fetch per key (single flight), none for the exempt admin, each for the group "default".
        named = (*ACCOUNTS, INVALID)
        assert {p: accounts.calls[p] for p in (*named, ADMIN)} == {**dict.fromkeys(named, 1), ADMIN: 0}
        assert accounts.groups == {GROUP}
        for account in ACCOUNTS:
            info = lim.quota(account, GROUP)
            assert (info.source, info.rate, info.fetching, info.failures) == (
                "provider",
                rk.Rate(QUOTAS[account]),
                False,
                0,
            ), account
        # The provider says "no such account" (LookupError): not a failure; the key stays on the failsafe.
        info = lim.quota(INVALID, GROUP)
        assert (info.source, info.rate, info.fetching, info.failures) == ("failsafe", FAILSAFE, False, 0)

        rounds = threading.Barrier(len(PROFILES), action=lambda: clock.advance(STEP_S), timeout=60)

        def hammer(i: int) -> None:
            profile, rng = PROFILES[i], random.Random(100 + i)
            try:
                for r in range(ROUNDS + 1):
                    if r:
                        rounds.wait()  # the last thread to arrive moves the clock by STEP_S
                    n = OPENING if r == 0 else PER_ROUND
                    admitted[profile] += send(profile, n, rng)
                    sent[profile] += n
            except BaseException:
                rounds.abort()  # the other threads fail fast instead of waiting at the barrier
                raise

        run_threads(len(PROFILES), hammer)
        assert clock.now() == ELAPSED_S
        assert lim.wait_quotas(timeout=5)  # the invalid key's retries and the new ids' fetches have ended
        stats = lim.stats()

    total = {p: first[p] + admitted[p] for p in PROFILES}
    # alice: what the failsafe admitted at t=0 counts against her quota; she may have no more than
    # max(5, 1 + floor(300 s / 60 s)) = 6 (admitted at 0 s (5) and at 300 s, when her 5 minutes of use drained).
    alice_bound = max(first["alice"], allowance(rk.Rate(QUOTAS["alice"]), ELAPSED_S))
    assert alice_bound == 6
    assert total["alice"] <= alice_bound, "alice was admitted more than her quota allows"
    # Every account, saturated, gets exactly what its quota allows: bob 600, carol 6000, dave 3010, alice 6.
    expected = {a: max(first[a], allowance(rk.Rate(QUOTAS[a]), ELAPSED_S)) for a in ACCOUNTS}
    assert {a: total[a] for a in ACCOUNTS} == expected == {"alice": 6, "bob": 600, "carol": 6_000, "dave": 3_010}
    # invalid never gets a quota: only the failsafe's allowance, 5 + floor(300 / 12) = 30.
    assert total[INVALID] == allowance(FAILSAFE, ELAPSED_S) == 30
    # Fail open: every new id is allowed on the failsafe. The admin is never refused.
    sent_total = {p: FIRST + sent[p] for p in PROFILES}
    assert total[INVALID_N] == sent_total[INVALID_N] == FIRST + OPENING + ROUNDS * PER_ROUND
    assert total[ADMIN] == sent_total[ADMIN]
    assert stats["exempt"] == sent_total[ADMIN]

    group = stats["groups"][GROUP]
    limited = [p for p in PROFILES if p != ADMIN]
    assert group["requests"] == sum(sent_total[p] for p in limited)
    assert group["allowed"] == sum(total[p] for p in limited)
    assert group["refused"] == group["requests"] - group["allowed"]
    # A fetch per account and per new id, and one for invalid: the provider said "no such account"
    # (LookupError), which is no failure, so invalid asks again only after the TTL (an hour away). Every
    # fetch but the accounts' is unknown or, if it waited behind the new ids' fetches past its timeout,
    # failed.
    invalid_fetches = group["quota_fetches"] - len(ACCOUNTS) - sent_total[INVALID_N]
    assert invalid_fetches == 1
    assert group["quota_unknown"] + group["quota_failures"] == group["quota_fetches"] - len(ACCOUNTS)


def test_a_flood_of_new_ids_is_allowed_on_the_failsafe_in_bounded_memory(
    clock: rk.ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """invalidN, with alice and carol at their quotas still sending requests (as wrk's profiles run together).

    The clock stays at 0: no state ever becomes idle, so the flood can only be absorbed by evicting the
    least used keys, and alice and carol (used every few hundred new ids) must be refused throughout.
    """
    caplog.set_level(logging.ERROR, logger="ratekeeper")  # each new id's failed fetch logs a warning
    accounts = Accounts()
    accounts.gate.set()
    allowed = [0] * FLOOD_THREADS
    seen = {"states": 0, "keys": 0, "quota_records": 0, "quota_queue": 0}
    leaked = Counter[str]()

    with limiter(accounts, clock, max_keys=FLOOD_MAX_KEYS) as lim:
        # carol uses her whole quota (1000/min) at t=0, alice hers (1/min); from now on both are refused.
        assert lim.allow("carol")
        assert lim.allow("alice")
        assert lim.wait_quotas(timeout=5)
        assert sum(lim.allow("carol") for _ in range(1_100)) == 999
        assert not any(lim.allow("alice") for _ in range(100))

        def sample() -> None:
            stats = lim.stats()
            stats["states"] = len(lim)
            for name in seen:
                seen[name] = max(seen[name], stats[name])

        def flood(i: int) -> None:
            allow, rng, per_thread = lim.allow, random.Random(1_000 + i), FLOOD // FLOOD_THREADS
            for n in range(per_thread):
                allowed[i] += allow(new_id(rng))
                # Every flood thread sends them, so they stay busy whichever thread holds the GIL.
                if n % (ACCOUNT_EVERY // FLOOD_THREADS) == 0:
                    leaked.update(account for account in ("alice", "carol") if allow(account))
                if i == 1 and n % 1_000 == 999:
                    sample()

        run_threads(FLOOD_THREADS, flood)
        assert lim.wait_quotas(timeout=60)
        sample()
        leaked.update(account for account in ("alice", "carol") for _ in range(100) if lim.allow(account))
        stats = lim.stats()
        states = len(lim)
        quotas = {a: lim.quota(a, GROUP) for a in ("alice", "carol")}
        # A minute later each has exactly its quota again: the flood neither reset nor inflated their use.
        clock.advance(60)
        a_minute_later = {a: sum(lim.allow(a) for _ in range(1_100)) for a in ("alice", "carol")}

    # The accounts never got more than their quotas at t=0, whatever the flood evicted.
    assert not leaked, (
        f"admitted past their quota at t=0 during/after the flood: {dict(leaked)}; quota records now "
        f"{ {a: (q.source, q.fetching) for a, q in quotas.items()} }, provider calls "
        f"{ {a: accounts.calls[a] for a in quotas} } (1 each unless their quota record was evicted)"
    )
    assert a_minute_later == {"alice": 1, "carol": 1_000}
    # Fail open: every new id allowed on the failsafe.
    assert sum(allowed) == FLOOD, "a new id was refused: the failsafe must admit it (fail open)"
    # Bounded: at most max_keys states and as many quota records, at every sample; a bounded fetch queue.
    assert states <= FLOOD_MAX_KEYS
    assert stats["keys"] <= FLOOD_MAX_KEYS
    assert stats["quota_records"] <= FLOOD_MAX_KEYS
    assert seen["states"] <= FLOOD_MAX_KEYS
    assert seen["keys"] <= FLOOD_MAX_KEYS
    assert seen["quota_records"] <= FLOOD_MAX_KEYS
    assert seen["quota_queue"] <= FLOOD_MAX_KEYS
    assert stats["evictions"] >= FLOOD - FLOOD_MAX_KEYS  # at t=0 no state is idle: they had to be evicted
    assert stats["memory_bytes"] < FLOOD_MEMORY_BOUND
    group = stats["groups"][GROUP]
    assert group["allowed"] == FLOOD + 1_000 + 1  # stats read at t=0, after the flood
    # A full fetch queue starts no fetch (the key stays on the failsafe and retries later): at most one
    # fetch per new id. Each fetch called the provider once; every call that said "no such account"
    # (LookupError) is counted as unknown, none as a failure.
    raised = sum(accounts.calls.values()) - accounts.calls["alice"] - accounts.calls["carol"]
    assert sum(accounts.calls.values()) == group["quota_fetches"]
    assert raised <= FLOOD
    assert (group["quota_unknown"], group["quota_failures"]) == (raised, 0), (
        f"{raised:,} provider calls raised LookupError; {group['quota_unknown']:,} unknown and "
        f"{group['quota_failures']:,} failures counted"
    )
