"""``Limiter.limited``: calls you make wait their turn, as a decorator (sync and async) or a context manager.

Every limiter here runs on a ``ManualClock``: a wait moves the clock to the waiter's slot instead of
sleeping, so the slots a call gets are exact and the tests never sleep.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest
import ratekeeper as rk
from _support import MakeLimiter, run_threads

THREADS = 32
TASKS = 64


def test_threads_are_admitted_exactly_at_the_rate(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/s", clock=clock)
    calls: list[int] = []

    @limiter.limited("payments")
    def charge(i: int) -> int:
        calls.append(i)
        return i * 2

    results = [0] * THREADS

    def work(i: int) -> None:
        results[i] = charge(i)

    run_threads(THREADS, work)
    assert results == [i * 2 for i in range(THREADS)]
    assert sorted(calls) == list(range(THREADS))
    group = limiter.stats()["groups"]["default"]
    # 10 at once, then one every 0.1 s: the 22 waiters took the slots 0.1 ... 2.2 s, each once.
    assert (group["allowed"], group["delayed"], group["refused"]) == (THREADS, THREADS - 10, 0)
    assert clock.now() == pytest.approx(2.2, abs=1e-9)
    assert limiter.check("payments").retry_after == pytest.approx(0.1, abs=1e-9)  # the next slot, not sooner


def test_threads_past_the_timeout_raise_and_the_function_is_not_called(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/s", clock=clock)
    calls: list[int] = []

    @limiter.limited("payments", timeout=0)
    def charge(i: int) -> None:
        calls.append(i)

    refused: list[rk.RateLimited] = []

    def work(i: int) -> None:
        try:
            charge(i)
        except rk.RateLimited as error:
            refused.append(error)

    run_threads(THREADS, work)
    assert len(calls) == 10
    assert len(refused) == THREADS - 10
    assert all(error.retry_after > 0 for error in refused)
    assert clock.now() == 0.0


@pytest.mark.asyncio
async def test_tasks_are_admitted_at_the_rate_in_arrival_order(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/s", clock=clock)
    started: dict[int, float] = {}

    @limiter.limited("payments")
    async def charge(i: int) -> int:
        started[i] = clock.now()
        await asyncio.sleep(0)
        return i

    assert await asyncio.gather(*(charge(i) for i in range(TASKS))) == list(range(TASKS))
    # The burst of 10 at once, then the i-th arrival at (i - 9) / 10 s: each task at its own slot, in order.
    assert [started[i] for i in range(TASKS)] == pytest.approx([max(0, i - 9) / 10 for i in range(TASKS)], abs=1e-9)
    group = limiter.stats()["groups"]["default"]
    assert (group["allowed"], group["delayed"]) == (TASKS, TASKS - 10)


@pytest.mark.asyncio
async def test_tasks_past_the_timeout_raise(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/s", clock=clock)

    @limiter.limited("payments", timeout=0.5)
    async def charge(i: int) -> int:
        return i

    results = await asyncio.gather(*(charge(i) for i in range(TASKS)), return_exceptions=True)
    admitted = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, rk.RateLimited)]
    # The burst, then the slots 0.1 ... 0.5 s: a later one is more than 0.5 s away when it arrives at 0.
    assert admitted == list(range(15))
    assert len(refused) == TASKS - 15
    assert clock.now() == pytest.approx(0.5, abs=1e-9)


def test_the_decorated_function_keeps_its_name_signature_and_kind(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/s", clock=clock)

    def charge(card: str, amount: int = 1) -> str:
        """Charges a card."""
        return card * amount

    async def search(query: str, *, api_key: str) -> list[str]:
        return [query]

    limited_charge = limiter.limited("payments")(charge)
    limited_search = limiter.limited(lambda *args, **kw: kw["api_key"])(search)
    assert (limited_charge.__name__, limited_charge.__doc__) == ("charge", "Charges a card.")
    assert inspect.signature(limited_charge) == inspect.signature(charge)
    assert not inspect.iscoroutinefunction(limited_charge)
    assert inspect.iscoroutinefunction(limited_search)
    assert limited_charge("ab", amount=2) == "abab"
    assert asyncio.run(limited_search("q", api_key="k")) == ["q"]


def test_the_key_comes_from_the_calls_arguments(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", clock=clock)

    @limiter.limited(lambda *args, **kw: kw["api_key"], timeout=0)
    def search(query: str, *, api_key: str) -> str:
        return f"{api_key}:{query}"

    @limiter.limited(lambda account, *rest: f"account:{account}", timeout=0)
    def bill(account: str, amount: int) -> int:
        return amount

    assert search("a", api_key="alice") == "alice:a"
    assert search("b", api_key="bob") == "bob:b"
    with pytest.raises(rk.RateLimited) as refused:
        search("c", api_key="alice")
    assert refused.value.retry_after == 60.0
    assert bill("alice", 5) == 5  # its own key: "account:alice", not "alice"
    with pytest.raises(rk.RateLimited):
        bill("alice", 6)


def test_the_cost_comes_from_the_calls_arguments(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/min", clock=clock)

    @limiter.limited("export", cost=lambda rows: rows, timeout=0)
    def export(rows: int) -> int:
        return rows

    assert export(7) == 7
    with pytest.raises(rk.RateLimited):
        export(4)
    assert export(3) == 3
    assert limiter.check("export").remaining == 0


def test_a_timeout_raises_at_once_and_reserves_nothing(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", clock=clock)
    calls = []

    @limiter.limited("payments", timeout=5.0)
    def charge() -> None:
        calls.append(clock.now())

    charge()
    with pytest.raises(rk.RateLimited) as refused:
        charge()
    assert refused.value.retry_after == 60.0
    assert calls == [0.0]
    assert clock.now() == 0.0
    clock.advance(56)
    charge()  # 4 s away now: within the timeout, it waits
    assert calls == [0.0, 60.0]


def test_with_blocks_wait_their_turn(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", clock=clock)
    payments = limiter.limited("payments")
    for expected in (0.0, 0.0, 0.5, 1.0):
        with payments as decision:
            assert decision.allowed
            assert clock.now() == expected
    with pytest.raises(rk.RateLimited), limiter.limited("payments", timeout=0.1):
        pytest.fail("the block must not run")


@pytest.mark.asyncio
async def test_async_with_blocks_wait_their_turn(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("2/s", clock=clock)
    payments = limiter.limited("payments")
    seen = []

    async def call() -> None:
        async with payments as decision:
            assert decision.allowed
            seen.append(clock.now())

    await asyncio.gather(*(call() for _ in range(5)))
    assert seen == [0.0, 0.0, 0.5, 1.0, 1.5]
    with pytest.raises(rk.RateLimited):
        async with limiter.limited("payments", timeout=0):
            pytest.fail("the block must not run")


def test_a_path_or_a_group_decides_where_the_call_is_counted(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/v1/charges", "charges", "1/min")], clock=clock)
    limiter.add_group("search", ["2/min"])

    @limiter.limited("stripe", "/v1/charges", timeout=0)
    def charge() -> None: ...

    @limiter.limited("stripe", group="search", timeout=0)
    def search() -> None: ...

    charge()
    search()
    search()
    with pytest.raises(rk.RateLimited) as refused:
        charge()
    assert refused.value.decision.group == "charges"
    with pytest.raises(rk.RateLimited) as refused:
        search()
    assert refused.value.decision.group == "search"


@pytest.mark.parametrize(
    ("arguments", "error", "loc"),
    [
        ({"key": 3.5}, rk.InvalidType, ("key",)),
        ({"key": True}, rk.InvalidType, ("key",)),
        ({"key": None}, rk.InvalidType, ("key",)),
        ({"key": "k", "cost": 0}, rk.InvalidValue, ("cost",)),
        ({"key": "k", "cost": True}, rk.InvalidType, ("cost",)),
        ({"key": "k", "cost": 1.5}, rk.InvalidType, ("cost",)),
        ({"key": "k", "timeout": -1}, rk.InvalidValue, ("timeout",)),
        ({"key": "k", "timeout": float("nan")}, rk.InvalidValue, ("timeout",)),
        ({"key": "k", "timeout": "5"}, rk.InvalidType, ("timeout",)),
        ({"key": "k", "path": 1}, rk.InvalidType, ("path",)),
        ({"key": "k", "group": b"api"}, rk.InvalidType, ("group",)),
        ({"key": "k", "path": "/a", "group": "default"}, rk.InvalidValue, ("group",)),
    ],
)
def test_bad_arguments_name_the_field(arguments: dict[str, object], error: type[Exception], loc: tuple[str]) -> None:
    limiter = rk.Limiter("1/s")
    with pytest.raises(error) as raised:
        limiter.limited(**arguments)  # type: ignore[arg-type]
    assert raised.value.loc == loc  # type: ignore[attr-defined]
    assert str(raised.value).startswith(f"{loc[0]}: ")


def test_what_the_callables_return_is_checked_at_the_call(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("10/s", clock=clock)
    by_number = limiter.limited(lambda n: n)(lambda n: n)
    with pytest.raises(rk.InvalidType, match=r"^key: must return a str or an int, got float$"):
        by_number(3.5)
    with pytest.raises(rk.InvalidType, match=r"^key: must return a str or an int, got bool$"):
        by_number(True)
    free = limiter.limited("k", cost=lambda n: n)(lambda n: n)
    with pytest.raises(rk.InvalidValue, match=r"^cost: must return a positive integer, got 0$"):
        free(0)
    with pytest.raises(rk.InvalidType) as raised:
        limiter.limited("k")(42)  # type: ignore[arg-type]
    assert raised.value.loc == ("function",)
    with pytest.raises(rk.InvalidType, match=r"^key: a with block has no arguments"), limiter.limited(lambda: "k"):
        pass
    with pytest.raises(rk.InvalidValue) as unknown:
        limiter.limited("k", group="nope")(lambda: None)()
    assert unknown.value.loc == ("group",)


def test_limited_calls_on_every_store(make_limiter: MakeLimiter, clock: rk.ManualClock) -> None:
    limiter = make_limiter("2/min", clock=clock)

    @limiter.limited(lambda account: account, timeout=0)
    def sync_call(account: str) -> str:
        return account

    @limiter.limited(lambda account: account, timeout=0)
    async def async_call(account: str) -> str:
        return account

    assert sync_call("alice") == "alice"
    assert asyncio.run(async_call("alice")) == "alice"
    with pytest.raises(rk.RateLimited):
        sync_call("alice")
    with pytest.raises(rk.RateLimited):
        asyncio.run(async_call("alice"))
    assert sync_call("bob") == "bob"
