"""``Limiter.cap``: a server's word ("r left until t") caps a key's fixed windows (and, as a server's bucket, its
GCRA limits), in every store.

A client calling a rate-limited API keeps under what the server says: between a word and the server's
reset it never spends more than the word allowed, whatever its own windows would; after the reset its own
windows follow until the next word. Words that came late (about a window that has ended since) change
nothing.
"""

from __future__ import annotations

import pytest
import ratekeeper as rk
from _support import MakeLimiter, fresh_per_example
from hypothesis import given
from hypothesis import strategies as st


def fixed(rate: str, clock: rk.ManualClock, make_limiter: MakeLimiter) -> rk.Limiter:
    return make_limiter(rate, algorithm="fixed_window", clock=clock)


def test_a_word_caps_the_key_until_the_servers_reset(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = fixed("100/min", clock, make_limiter)
    assert limiter.allow("api")
    # The server has 3 left for 90 s: later than the key's own window would end.
    limiter.cap("api", remaining=3, reset_after=90)
    assert [limiter.allow("api") for _ in range(4)] == [True, True, True, False]
    assert limiter.check("api").retry_after == pytest.approx(90)
    clock.advance(60)  # the key's own window would have ended here; the server's has not
    assert limiter.check("api").retry_after == pytest.approx(30)
    clock.advance(30)
    assert limiter.check("api", cost=100).allowed  # after the reset: the limit's own window again


def test_a_word_never_gives_more_than_the_key_has_left(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = fixed("10/min", clock, make_limiter)
    assert limiter.check("api", cost=8).allowed
    # Requests on their way were not counted by the server yet: what is left here stands.
    limiter.cap("api", remaining=50, reset_after=30)
    decision = limiter.peek("api")
    assert (decision.remaining, decision.reset_after) == (2, pytest.approx(30))


def test_a_smaller_limit_after_a_word_keeps_the_servers_reset_and_no_debt(make_limiter: MakeLimiter) -> None:
    # A server that lowers its limit: the window it announced ends at its reset, and what was used there is not
    # carried into later windows at the new size (20 used at 5 a window would be three windows of nothing).
    clock = rk.ManualClock()
    limiter = make_limiter(rules=[], clock=clock)
    limiter.add_group("api", [rk.Limit("20/3s", algorithm="fixed_window")])
    assert limiter.check("h", group="api", cost=20).allowed
    limiter.cap("h", group="api", remaining=0, reset_after=2)
    limiter.update_rule("api", "5/3s", burst=5)
    assert limiter.check("h", group="api").retry_after == pytest.approx(2)
    clock.advance(2)
    assert [limiter.allow("h", group="api") for _ in range(6)] == [True] * 5 + [False]


def test_a_window_announced_longer_than_the_limits_own(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = fixed("10/min", clock, make_limiter)
    limiter.cap("api", remaining=4, reset_after=3600)  # an hour's budget, before any request
    assert limiter.check("api", cost=4).allowed
    refused = limiter.check("api")
    assert (refused.allowed, refused.retry_after) == (False, pytest.approx(3600))
    clock.advance(3600)
    assert limiter.check("api", cost=10).allowed


def test_a_late_word_about_an_ended_window_is_ignored(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = fixed("10/min", clock, make_limiter)
    limiter.cap("api", remaining=5, reset_after=10)
    clock.advance(11)
    # The reply to a request admitted 2 s ago, in the window that ended at 10 s, says 0 left until 12 s.
    limiter.cap("api", remaining=0, reset_after=1, age=2)
    assert limiter.check("api", cost=10).allowed
    # In the key's own window that began now, a word for a request admitted in it is taken.
    clock.advance(1)
    limiter.cap("api", remaining=0, reset_after=8, age=1)
    assert limiter.check("api").retry_after == pytest.approx(8)


def test_a_late_word_about_the_window_before_an_announced_one_is_ignored(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = fixed("10/min", clock, make_limiter)
    limiter.cap("api", remaining=5, reset_after=10)
    clock.advance(11)
    assert limiter.allow("api")  # the next window's first request, whose reply announces it
    limiter.cap("api", remaining=5, reset_after=9)
    clock.advance(1)
    # The reply to a request admitted at 9 s, in the window before, its reset rounded up past now.
    limiter.cap("api", remaining=0, reset_after=1, age=3)
    decision = limiter.peek("api")
    assert (decision.remaining, decision.reset_after) == (5, pytest.approx(8))


def test_a_word_from_the_servers_next_window_starts_one_of_what_it_says(make_limiter: MakeLimiter) -> None:
    """The server's windows of 4 s end at 4 s and 8 s, and it rounds its resets up to whole seconds: the window
    it announces ends late, and the calls sent past its turn land in its next window, whose word shows it."""
    clock = rk.ManualClock()
    limiter = fixed("100/4s", clock, make_limiter)
    clock.advance(3)
    assert limiter.check("api", cost=92).allowed
    clock.advance(0.11)
    assert limiter.cap("api", remaining=8, reset_after=1, age=0.11)  # 0.89 s rounded up: ends at 4.11 s
    clock.advance(0.9)
    assert limiter.check("api", cost=8).allowed  # at 4.01 s: past the server's turn
    clock.advance(0.02)
    # 92 left for 3.98 s rounded up to 4: its window ends after 4.01 + 4 - 1 s, so not the announced one.
    assert limiter.cap("api", remaining=92, reset_after=4, age=0.02)
    assert limiter.check("api", cost=92).allowed
    assert limiter.check("api").retry_after == pytest.approx(4.0)
    # A late reply for 3 s, about the window before, changes nothing.
    assert not limiter.cap("api", remaining=0, reset_after=1, age=1.03)
    assert limiter.check("api").retry_after == pytest.approx(4.0)


def test_a_wait_is_not_lifted_by_a_reply_to_a_request_sent_before_it(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = fixed("100/4s", clock, make_limiter)
    assert limiter.check("api", cost=2).allowed
    clock.advance(0.01)
    assert limiter.cap("api", remaining=98, reset_after=3.99, age=0.01)
    clock.advance(0.01)
    assert limiter.cap("api", remaining=0, reset_after=3, age=0.02)  # a 429 with Retry-After: 3
    clock.advance(0.01)
    # The other request's reply speaks of the server's next window: sent before the wait, it does not end it.
    assert not limiter.cap("api", remaining=97, reset_after=8, age=0.025)
    assert limiter.check("api").retry_after == pytest.approx(2.99)


def test_each_peer_and_group_hears_its_own_word(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = make_limiter(
        rules=[
            rk.Rule("^/search", "search", limits=[rk.Limit("30/min", algorithm="fixed_window")]),
            rk.Rule("^/", "core", limits=[rk.Limit("10/s"), rk.Limit("5000/hour", algorithm="fixed_window")]),
        ],
        clock=clock,
    )
    limiter.cap("token-a", "/repos", remaining=0, reset_after=100)
    assert not limiter.allow("token-a", "/repos/x")
    assert limiter.allow("token-b", "/repos/x")  # another key
    assert limiter.allow("token-a", "/search/code")  # another group
    limiter.cap("token-a", group="search", remaining=1, reset_after=5)
    assert [limiter.allow("token-a", "/search/x") for _ in range(2)] == [True, False]
    clock.advance(5)
    assert limiter.allow("token-a", "/search/x")


def test_a_group_without_a_fixed_window_or_gcra_cannot_take_a_word(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter("10/min", algorithm="sliding_window", clock=rk.ManualClock())
    with pytest.raises(rk.InvalidValue, match="no fixed_window or gcra limit") as raised:
        limiter.cap("api", remaining=1, reset_after=1)
    assert raised.value.loc == ("group",)


def test_a_gcra_takes_a_word_as_a_servers_bucket(make_limiter: MakeLimiter) -> None:
    # OpenAI's and Anthropic's budgets refill all the time, their reset the moment they are full again: a GCRA key
    # takes such a word as what is left now and full again at the reset, whichever holds it longer, never lifted.
    clock = rk.ManualClock()
    limiter = make_limiter("10/min", clock=clock)  # a GCRA, burst 10: one back every 6 s
    limiter.cap("api", remaining=4, reset_after=36)
    decision = limiter.peek("api")
    assert (decision.remaining, decision.reset_after) == (4, pytest.approx(36))
    limiter.cap("api", remaining=8, reset_after=12)  # a stale word: more left, full sooner
    assert limiter.peek("api").remaining == 4
    assert [limiter.allow("api") for _ in range(5)] == [True] * 4 + [False]
    clock.advance(6)
    assert [limiter.allow("api") for _ in range(2)] == [True, False]


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("remaining", -1, rk.InvalidValue),
        ("remaining", 1.5, rk.InvalidType),
        ("remaining", True, rk.InvalidType),
        ("reset_after", -1.0, rk.InvalidValue),
        ("reset_after", float("nan"), rk.InvalidValue),
        ("reset_after", float("inf"), rk.InvalidValue),
        ("reset_after", 10**30, rk.InvalidValue),
        ("reset_after", "5", rk.InvalidType),
        ("age", -0.5, rk.InvalidValue),
        ("age", None, rk.InvalidType),
    ],
)
def test_bad_words_are_refused_naming_the_field(field: str, value: object, error: type[Exception]) -> None:
    limiter = rk.Limiter("10/min", algorithm="fixed_window")
    word: dict[str, object] = {"remaining": 1, "reset_after": 1.0, field: value}
    with pytest.raises(error) as raised:
        limiter.cap("api", **word)  # type: ignore[arg-type]
    assert raised.value.loc == (field,)  # type: ignore[attr-defined]


# A key's life: requests (a cost), words (remaining, seconds to the reset, and how many admissions back the
# request that brought it was admitted) and time passing (seconds).
steps = st.lists(
    st.one_of(
        st.tuples(st.just("request"), st.integers(1, 4)),
        st.tuples(st.just("word"), st.tuples(st.integers(0, 12), st.integers(1, 300), st.integers(0, 3))),
        st.tuples(st.just("advance"), st.integers(0, 90)),
    ),
    max_size=40,
)


@fresh_per_example
@given(steps=steps)
def test_never_more_than_a_word_allows_before_its_reset(
    make_limiter: MakeLimiter, steps: list[tuple[str, object]]
) -> None:
    """Between a word that was taken (r left until T) and T, at most r are admitted; a later word whose reset
    comes sooner ends that span at its reset, as the server said, and so does one that shows the server's
    window has turned (its window ends more than a second after T, counted from its request's admission:
    resets are rounded to whole seconds at most), when it comes. A late word (its request admitted some
    admissions back) may be ignored as stale, and then bounds nothing."""
    clock = rk.ManualClock()
    limiter = fixed("10/min", clock, make_limiter)
    # Each taken word's span: [start, end) and what it allows; admissions counted in it.
    spans: list[list[int]] = []  # [start, end, allowed, admitted]
    admitted_at: list[int] = [0]  # when each request was admitted: a word's request is one of them
    last_end = 0  # the reset of the last word taken
    now = 0
    for kind, value in steps:
        if kind == "advance":
            assert isinstance(value, int)
            clock.advance(value)
            now += value
        elif kind == "word":
            assert isinstance(value, tuple)
            remaining, reset_after, back = value
            age = now - admitted_at[max(0, len(admitted_at) - 1 - back)]
            if limiter.cap("api", remaining=remaining, reset_after=reset_after, age=age):
                turned = now < last_end < now - age + reset_after - 1
                for span in spans:
                    span[1] = min(span[1], now if turned else now + reset_after)
                spans.append([now, now + reset_after, remaining, 0])
                last_end = now + reset_after
        else:
            assert isinstance(value, int)
            if limiter.check("api", cost=value).allowed:
                admitted_at.append(now)
                for span in spans:
                    if span[0] <= now < span[1]:
                        span[3] += value
    for start, end, allowed, admitted in spans:
        assert admitted <= allowed, f"{admitted} admitted between {start} s and {end} s after a word of {allowed}"


def test_a_word_says_whether_it_was_taken(make_limiter: MakeLimiter) -> None:
    clock = rk.ManualClock()
    limiter = fixed("10/min", clock, make_limiter)
    assert limiter.cap("api", remaining=5, reset_after=10)
    assert not limiter.cap("api", remaining=5, reset_after=0)  # a reset already past
    clock.advance(11)
    assert not limiter.cap("api", remaining=0, reset_after=1, age=2)  # about the window that ended
    assert limiter.cap("api", remaining=3, reset_after=5, age=0)
