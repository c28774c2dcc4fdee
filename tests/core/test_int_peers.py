"""A peer may be an int (a user id, an account number): it is the same peer as its decimal text, in every
method that takes a peer and on every store. A bool or any other type is refused, naming the field."""

from __future__ import annotations

import pytest
import ratekeeper as rk
from _support import MakeLimiter


def test_an_int_and_its_decimal_text_share_one_budget(make_limiter: MakeLimiter, clock: rk.ManualClock) -> None:
    limiter = make_limiter("3/min", clock=clock)
    assert limiter.allow(42)
    assert limiter.check("42").remaining == 1
    assert limiter.peek(42).remaining == 1
    assert limiter.allow("42")
    assert not limiter.allow(42)
    assert limiter.check(43).allowed  # another peer
    limiter.reset(42)
    assert limiter.check("42").remaining == 2


def test_waits_reductions_and_resolution_take_an_int(make_limiter: MakeLimiter, clock: rk.ManualClock) -> None:
    limiter = make_limiter("2/min", clock=clock)
    limiter.throttle(7)
    limiter.throttle("7")
    assert not limiter.allow(7)
    assert limiter.reduce(7)
    assert limiter.allow("7")
    assert repr(limiter.resolve(7)) == repr(limiter.resolve("7"))


@pytest.mark.asyncio
async def test_asyncio_waits_take_an_int(make_limiter: MakeLimiter, clock: rk.ManualClock) -> None:
    limiter = make_limiter("1/min", clock=clock)
    await limiter.athrottle(9)
    assert not (await limiter.acheck("9")).allowed


def test_quotas_and_outgoing_calls_take_an_int(clock: rk.ManualClock) -> None:
    limiter = rk.Limiter("1/min", clock=clock)
    limiter.set_quota(5, "default", "3/min")
    assert limiter.quota("5", "default").source == "set"
    assert limiter.quota(5, "default").source == "set"

    @limiter.limited(lambda account: account, timeout=0)
    def call(account: int) -> int:
        return account

    assert call(11) == 11
    with pytest.raises(rk.RateLimited):
        call(11)
    with limiter.limited(12, timeout=0):
        pass
    assert not limiter.allow("12")


def test_an_int_subclass_is_its_value_not_its_str(clock: rk.ManualClock) -> None:
    """As ``keys.key_text`` reads a key function's answer: an IntEnum's str() is its name on Python 3.10."""

    class AccountId(int):
        def __str__(self) -> str:
            return f"account {int(self)}"

    limiter = rk.Limiter("1/min", clock=clock)
    assert limiter.allow(AccountId(42))
    assert not limiter.allow("42")


@pytest.mark.parametrize("peer", [True, 1.5, b"42", None, ["42"]])
def test_other_peers_are_refused_naming_the_field(peer: object) -> None:
    limiter = rk.Limiter("1/min")
    for method in (limiter.allow, limiter.check, limiter.peek, limiter.throttle):
        with pytest.raises(rk.InvalidType) as raised:
            method(peer)  # type: ignore[operator]
        assert str(raised.value).startswith("peer: must be a str or an int, got ")
