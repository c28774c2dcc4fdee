"""The core's reader of the servers' fields against the Python reader it replaced (``_reference_server_words``,
kept as it was): on any header values, both read the same word and ignore (log) the same fields.

Two differences are by design and are applied to the reference before comparing: the core reads HTTP dates with
the ``httpdate`` crate, which refuses a date whose weekday is not its own, a leap second (``:60``) and a year
before 1970, all of which the old reader took; and structured fields with the ``sfv`` crate, which reads an empty
List field as the empty list (RFC 9651 4.2.1) where http-sfv refused it (so it was logged as malformed).
"""

from __future__ import annotations

import email.utils
import re
import string
from collections.abc import Callable
from typing import Any

import _reference_server_words as reference
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ratekeeper import _server_words
from ratekeeper._server_words import DIALECTS, read

_old_http_date = reference._http_date.__wrapped__
_SECONDS = re.compile(r"[0-9]{2}:[0-9]{2}:([0-9]{2})")


def _strict_http_date(value: str) -> float | None:
    """The reference's HTTP date, refused where httpdate refuses it: a weekday not the date's, a leap second, a
    year before 1970."""
    moment = _old_http_date(value)
    if moment is None or moment < 0:
        return None
    text = value.strip()
    seconds = _SECONDS.search(text)
    if seconds is not None and seconds.group(1) == "60":
        return None
    if text[:3] != email.utils.formatdate(moment, usegmt=True)[:3]:
        return None
    return moment


_old_sfv_list = reference._sfv_list.__wrapped__


def _sfv_list(value: str) -> tuple[tuple[tuple[str, dict[str, object]], ...] | None, bool]:
    """The reference's SF List, empty for an empty field (RFC 9651 4.2.1: no members) as in the sfv crate."""
    if not value.strip(" "):
        return (), False
    return _old_sfv_list(value)


@pytest.fixture(autouse=True)
def strict_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "_http_date", _strict_http_date)
    monkeypatch.setattr(reference, "_sfv_list", _sfv_list)


NAMES = [*sorted(reference._FIELDS), "x-ratelimit-used", "content-type", "server"]

DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=24)
NUMBERS = st.one_of(
    DIGITS,
    st.builds(lambda a, b: f"{a}.{b}", DIGITS, DIGITS),
    st.integers(min_value=0, max_value=2**64).map(str),
    st.floats(min_value=0, max_value=1e13, allow_nan=False).map(lambda x: f"{x:.3f}"),
    st.sampled_from(["-1", "1e5", "nan", "inf", "1_0", "\u0661", " 7 ", "5\u00a0", "\x1c9", "0x10", ".5", "5."]),
)
GO_DURATIONS = st.one_of(
    st.text(alphabet="0123456789.+-hmsuµμn ", max_size=14),
    st.lists(
        st.tuples(
            st.sampled_from(["1", "6", "0", "1.5", ".5", "2.", "20", "100"]), st.sampled_from(list(reference._GO_UNITS))
        ),
        min_size=1,
        max_size=4,
    ).map(lambda parts: "".join(n + u for n, u in parts)),
)
MOMENTS = st.integers(min_value=-(10**10), max_value=253402300799)


def _date_forms(moment: int, form: int) -> str:
    text = email.utils.formatdate(moment, usegmt=True)  # IMF-fixdate
    if form == 0:
        return text
    weekday, day, month, year, time, _ = text.replace(",", "").split()
    if form == 1:
        long_day = {
            "Mon": "Monday", "Tue": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday",
            "Fri": "Friday", "Sat": "Saturday", "Sun": "Sunday",
        }[weekday]  # fmt: skip
        return f"{long_day}, {day}-{month}-{year[2:]} {time} GMT"
    return f"{weekday} {month} {int(day):>2} {time} {year}"


HTTP_DATES = st.one_of(
    st.builds(_date_forms, MOMENTS.filter(lambda m: m >= -62135596800), st.integers(0, 2)),
    st.builds(
        lambda m, wd, sec: re.sub(r":[0-9]{2} ", f":{sec} ", _date_forms(m, 0).replace(_date_forms(m, 0)[:3], wd, 1)),
        st.integers(0, 4102444800),
        st.sampled_from(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]),
        st.sampled_from(["00", "59", "60", "61", "99"]),
    ),
)
RFC3339 = st.builds(
    lambda y, mo, d, h, mi, s, frac, zone: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{zone}",
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 60),
    st.integers(0, 62),
    st.sampled_from(["", ".5", ".123456789", ".", ".000000000000000000001"]),
    st.sampled_from(["Z", "z", "+01:00", "-05:30", "+24:00", "+00:60", "", "+0100"]),
)
SF_NAMES = st.sampled_from(['"api"', '"b"', "tok", '""', '%"disp"', "1", "?1", "(a b)", ":YWJj:", "@1", '"a\\"b"'])
SF_VALUES = st.sampled_from(
    ["0", "1", "42", "-1", "999999999999999", "9999999999999999", "1.5", "?1", '"s"', "@5", "x"]
)
SF_PARAMS = st.lists(st.tuples(st.sampled_from(["r", "t", "q", "w", "pk", "R"]), SF_VALUES), max_size=4).map(
    lambda ps: "".join(f";{k}={v}" for k, v in ps)
)
SF_LISTS = st.lists(st.tuples(SF_NAMES, SF_PARAMS), min_size=0, max_size=3).flatmap(
    lambda members: st.sampled_from([", ", ",", " ,  "]).map(lambda sep: sep.join(n + p for n, p in members))
)
VALUES = st.one_of(NUMBERS, GO_DURATIONS, HTTP_DATES, RFC3339, SF_LISTS, st.text(max_size=30))


def _randomly_cased(name: str, draw: Callable[[Any], Any]) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c for c in name)


@st.composite
def headers(draw: Callable[[Any], Any]) -> list[tuple[str, str]]:
    pairs = []
    for _ in range(draw(st.integers(0, 8))):
        name = draw(st.sampled_from(NAMES))
        pairs.append((_randomly_cased(name, draw), draw(VALUES)))
    return pairs


def _both(pairs: list[tuple[str, str]], status: int, now: float, dialect: str | None) -> tuple[Any, Any]:
    _server_words._warned.clear()
    reference._warned.clear()
    new = read(pairs, status, now=now, dialect=dialect)
    old = reference.read(pairs, status, now=now, dialect=dialect)
    assert _server_words._warned == reference._warned, "the same fields are ignored"
    return new, old


def _same(new: Any, old: Any) -> None:
    assert (new.dialect, new.retry_after) == (old.dialect, old.retry_after)
    assert [(b.name, b.remaining, b.reset_after, b.limit, b.window) for b in new.budgets] == [
        (b.name, b.remaining, b.reset_after, b.limit, b.window) for b in old.budgets
    ]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    headers(),
    st.sampled_from([200, 403, 429, 503]),
    st.floats(min_value=0, max_value=4e9, allow_nan=False),
    st.none() | st.sampled_from(DIALECTS),
)
@example([("Date", "Sun, 06 Nov 1994 08:49:37 GMT"), ("retry-after", "Sunday, 06-Nov-94 08:49:40 GMT")], 429, 0.0, None)
@example([("x-ratelimit-reset-requests", "1h2m3.5s"), ("x-ratelimit-remaining-requests", "5")], 200, 0.0, None)
@example([("RateLimit", '"a";r=1;t=5, b;r=2'), ("RateLimit-Policy", '"a";q=10;w=60, "a";q=1')], 200, 0.0, None)
def test_the_core_reads_any_fields_as_the_python_reader_did(
    pairs: list[tuple[str, str]], status: int, now: float, dialect: str | None
) -> None:
    _same(*_both(pairs, status, now, dialect))


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(
        ["x-ratelimit-reset", "retry-after", "x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset"]
    ),
    st.one_of(VALUES, st.text(alphabet=string.printable + "µμ\u00a0\u2003\x1c", max_size=40)),
    st.floats(min_value=0, max_value=4e9, allow_nan=False),
)
def test_each_value_kind_is_read_alike(field: str, value: str, now: float) -> None:
    # The fields each dialect needs beside the one under test, so that its value decides the word.
    companions = {
        "x-ratelimit-reset": [("x-ratelimit-remaining", "3")],
        "retry-after": [],
        "x-ratelimit-reset-tokens": [("x-ratelimit-remaining-tokens", "3")],
        "anthropic-ratelimit-tokens-reset": [("anthropic-ratelimit-tokens-remaining", "3")],
    }[field]
    pairs = [("date", "Fri, 27 Nov 2026 10:00:00 GMT"), (field, value), *companions]
    _same(*_both(pairs, 429, now, None))
