"""The rate-limit fields as the core builds them for both integrations: ``Decision._fields`` (str pairs, WSGI),
``Decision._raw_fields`` (bytes pairs, ASGI) and ``Limiter._admit_web``, read back with an independent
Structured Field parser."""

from __future__ import annotations

import ratekeeper as rk
from _web import members
from ratekeeper._core import _Take
from ratekeeper._http import HeaderOptions, raw_response_headers, response_headers

BOTH = _Take.BOTH


def limiter(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter(
        rules=[
            rk.Rule("^/api/", "api", "3/min"),
            rk.Rule("^/odd/", 'a "quoted" \\ näme', "3/min"),
            rk.Rule("^/held/", "held", limits=[rk.Limit(concurrency=1)]),
            rk.Rule("^/big/", "big", "2/min"),
        ],
        clock=clock,
    )


def test_fields_of_allowed_and_refused_requests_with_retry_after_never_before_t(clock: rk.ManualClock) -> None:
    lim = limiter(clock)
    allowed = lim._acquire("alice", "/api/x", take=BOTH)
    fields = dict(allowed._fields(True, True))
    assert members(fields["RateLimit-Policy"]) == {"api": {"q": 3, "w": 60}}
    assert members(fields["RateLimit"]) == {"api": {"r": 2, "t": 20}}
    assert (fields["X-RateLimit-Limit"], fields["X-RateLimit-Remaining"], fields["X-RateLimit-Reset"]) == (
        "3",
        "2",
        "20",
    )
    assert "Retry-After" not in fields
    for _ in range(2):
        lim._acquire("alice", "/api/x", take=BOTH)
    clock.advance(0.5)
    refused = lim._acquire("alice", "/api/x", take=BOTH)
    assert not refused.allowed
    fields = dict(refused._fields(True, False))
    assert fields["Retry-After"] == "20"  # 19.5 s rounded up, as t
    assert members(fields["RateLimit"]) == {"api": {"r": 0, "t": 20}}
    assert list(fields) == ["Retry-After", "RateLimit-Policy", "RateLimit"]


def test_raw_fields_are_the_same_fields_as_lower_case_bytes(clock: rk.ManualClock) -> None:
    lim = limiter(clock)
    for path in ("/api/x", "/odd/x", "/held/x", "/unrouted"):
        for _ in range(4):
            decision = lim._acquire("bob", path, take=BOTH)
            for ietf, legacy in ((True, False), (False, True), (True, True)):
                text = decision._fields(ietf, legacy)
                raw = decision._raw_fields(ietf, legacy)
                assert raw == tuple((name.lower().encode(), value.encode()) for name, value in text)
            if decision.permits_held:
                lim._release("bob", path)


def test_group_names_are_quoted_escaped_and_concurrency_is_its_own_unit(clock: rk.ManualClock) -> None:
    lim = limiter(clock)
    odd = dict(lim._acquire("carol", "/odd/x", take=BOTH)._fields(True, False))
    # Printable ASCII kept, quotes and backslashes escaped, anything else as "?".
    assert members(odd["RateLimit"]) == {'a "quoted" \\ n?me': {"r": 2, "t": 20}}
    held = dict(lim._acquire("carol", "/held/x", take=BOTH)._fields(True, False))
    assert members(held["RateLimit-Policy"]) == {"held": {"q": 1, "qu": "concurrent-requests"}}
    assert lim._acquire("carol", "/unrouted", take=BOTH)._fields(True, True) == ()


def test_equal_numbers_of_different_groups_never_share_fields(clock: rk.ManualClock) -> None:
    # The core reuses the fields of a recent response with the same numbers: only within one group.
    lim = limiter(clock)
    api = lim._acquire("dave", "/api/x", take=BOTH)._fields(True, False)
    odd = lim._acquire("dave", "/odd/x", take=BOTH)._fields(True, False)
    assert members(dict(api)["RateLimit"]) == {"api": {"r": 2, "t": 20}}
    assert members(dict(odd)["RateLimit"]) == {'a "quoted" \\ n?me': {"r": 2, "t": 20}}
    again = lim._acquire("erin", "/api/x", take=BOTH)._fields(True, False)
    assert again == api
    assert lim._acquire("erin", "/api/x", take=BOTH)._fields(True, False) != api  # r=1 now


def test_a_request_that_can_never_pass_has_no_retry_after(clock: rk.ManualClock) -> None:
    lim = limiter(clock)
    refused = lim._acquire("frank", "/big/x", cost=5, take=BOTH)
    assert not refused.allowed
    names = [name for name, _ in refused._fields(True, True)]
    assert "Retry-After" not in names
    assert "RateLimit" in names


def test_admit_web_gives_fields_when_nothing_else_is_owed_and_the_decision_otherwise(clock: rk.ManualClock) -> None:
    lim = limiter(clock)
    fields = lim._admit_web(True, False, False, "gina", "/api/x")
    assert isinstance(fields, tuple)
    assert members(dict(fields)["RateLimit"]) == {"api": {"r": 2, "t": 20}}
    assert lim._admit_web(False, False, True, "gina", "/api/x") == ()  # no fields asked for
    held = lim._admit_web(True, False, True, "gina", "/held/x")
    assert isinstance(held, rk.Decision)
    assert held.permits_held  # the adapter gives them back when the response ends
    lim._release("gina", "/held/x")
    lim._admit_web(True, False, False, "gina", "/api/x")
    refused = lim._admit_web(True, False, False, "gina", "/api/x")
    assert isinstance(refused, rk.Decision)
    assert not refused.allowed
    assert lim.stats()["groups"]["api"]["requests"] == 4


def test_response_headers_follow_the_options(clock: rk.ManualClock) -> None:
    lim = limiter(clock)
    allowed = lim._acquire("hank", "/api/x", take=BOTH)
    assert response_headers(allowed, HeaderOptions(on_allowed=False)) == ()
    assert [name for name, _ in response_headers(allowed, HeaderOptions(legacy=True))] == [
        "RateLimit-Policy",
        "RateLimit",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    ]
    assert [name for name, _ in raw_response_headers(allowed, HeaderOptions(ietf=False, legacy=True))] == [
        b"x-ratelimit-limit",
        b"x-ratelimit-remaining",
        b"x-ratelimit-reset",
    ]
