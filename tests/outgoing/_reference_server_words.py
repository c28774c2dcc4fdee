"""What a rate-limited server says about its limits, read from one response's headers.

Servers speak one of a few dialects (IETF ``RateLimit``, Anthropic, OpenAI, GitHub, the generic
``X-RateLimit-*``); ``read`` turns any of them into the same ``Budget`` list and ``Retry-After`` wait,
for the outgoing transports (httpx, requests, aiohttp) to obey.

Nothing a server says is trusted: a value that is malformed, missing, negative, not finite, non-ASCII or
absurdly large drops only the budget (or wait) it belongs to, and is logged once per dialect and field on
``ratekeeper.outgoing``. ``read`` raises only for a dialect name of the caller's that does not exist.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date
from typing import TypeGuard

from ratekeeper._errors import InvalidValue

__all__ = ["DIALECTS", "Budget", "ServerWord", "fields_in", "fields_in_raw", "read", "read_fields"]

log = logging.getLogger("ratekeeper.outgoing")

# In the order `read` looks for them when no dialect is named.
DIALECTS: tuple[str, ...] = ("ietf", "anthropic", "openai", "github", "x-ratelimit")

MOST_REMAINING = 2**32 - 1
# A wait or reset beyond a day is taken for a server's mistake (or a unit mix-up), not obeyed.
LONGEST_WAIT = 86_400.0


@dataclass(slots=True)  # not frozen: a frozen dataclass takes three times as long to make (1.3 µs)
class Budget:
    """One of a server's quotas as it stands after a response.

    Attributes:
        name: ``"requests"``, ``"tokens"``, ``"input-tokens"``, ``"output-tokens"`` (OpenAI, Anthropic), the
            IETF policy's name, GitHub's ``x-ratelimit-resource`` (``"core"``, ``"search"``, ...), or
            ``"requests"`` for plain ``X-RateLimit-*``.
        remaining: what is left of it, 0 to 2**32 - 1 (a larger figure is clamped: it caps nothing anyway).
        reset_after: seconds from the response until more of it is available, 0 to 86,400.
        limit: its size when the server states it.
        window: its window in seconds when stated (IETF ``RateLimit-Policy`` ``w``).
    """

    name: str
    remaining: int
    reset_after: float
    limit: int | None = None
    window: float | None = None


@dataclass(slots=True)  # not frozen: a frozen dataclass takes three times as long to make (1.3 µs)
class ServerWord:
    """All a response says about the server's limits.

    Attributes:
        dialect: the dialect it was read in, one of ``DIALECTS``, or ``""`` when it carries none.
        budgets: its budgets, in the order the dialect lists them.
        retry_after: seconds to wait before the next call (``Retry-After``, OpenAI's ``retry-after-ms``) on
            429 and 503, and on GitHub's 403; ``None`` when absent, malformed or not read for that status.
    """

    dialect: str
    budgets: tuple[Budget, ...]
    retry_after: float | None


_NOTHING = ServerWord("", (), None)

_OPENAI_KINDS = ("requests", "tokens")
_ANTHROPIC_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")

_ANTHROPIC_FIELDS = frozenset(
    f"anthropic-ratelimit-{kind}-{part}" for kind in _ANTHROPIC_KINDS for part in ("limit", "remaining", "reset")
)
_OPENAI_FIELDS = frozenset(
    f"x-ratelimit-{part}-{kind}" for kind in _OPENAI_KINDS for part in ("limit", "remaining", "reset")
)
_GITHUB_MARKS = frozenset({"x-ratelimit-resource", "x-github-request-id"})
_GENERIC_FIELDS = frozenset(
    {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-reset-after"}
)
# Every name `read` keeps; all others are passed over with one set look-up each (the path most responses take).
_FIELDS = (
    _ANTHROPIC_FIELDS
    | _OPENAI_FIELDS
    | _GITHUB_MARKS
    | _GENERIC_FIELDS
    | {"ratelimit", "ratelimit-policy", "retry-after", "retry-after-ms", "date"}
)
# The same names as bytes, for headers read undecoded (fields_in_raw).
_RAW_FIELDS = {name.encode("ascii"): name for name in _FIELDS}
# Each header name as a server writes it -> the field it is, or None: a server repeats its names on every response,
# and one look-up costs less than lowering the name first. Bounded: names past it are lowered each time.
_RAW_NAMES: dict[bytes, str | None] = {}
_MOST_RAW_NAMES = 1024
_UNSEEN = ""

_STATUSES_WITH_WAIT = frozenset({429, 503})

# ASCII digits only (str.isdigit and float() take other scripts' digits, "nan", "1e5", "1_0"); at most 20
# digits, so 10**30 is refused here rather than overflowing later.
_WHOLE = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?")
# Go's time.Duration.String(): "6m0s", "1.5s", "20ms", "1h2m3.5s", "100us", "100µs" (U+00B5 or U+03BC).
_GO_NUMBER = r"(?:[0-9]{1,20}(?:\.[0-9]{0,20})?|\.[0-9]{1,20})"
_GO_UNIT = "(?:h|ms|m|us|\u00b5s|\u03bcs|ns|s)"  # "ms" before "m": "1ms" is a millisecond
_GO_DURATION = re.compile(rf"\+?(?:{_GO_NUMBER}{_GO_UNIT})+")
_GO_PARTS = re.compile(rf"({_GO_NUMBER})({_GO_UNIT})")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ns": 1e-9}
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,20})?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
# RFC 9110 5.6.7's three forms: "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT" and
# "Sun Nov  6 08:49:37 1994". The weekday is not checked against the date (email.utils does not either).
_MONTH = "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = "([0-9]{2}):([0-9]{2}):([0-9]{2})"
_IMF_FIXDATE = re.compile(rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{{2}}) {_MONTH} ([0-9]{{4}}) {_TIME} GMT")
_RFC850_DATE = re.compile(
    rf"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), ([0-9]{{2}})-{_MONTH}-([0-9]{{2}}) {_TIME} GMT"
)
_ASCTIME_DATE = re.compile(rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MONTH} ([ 0-9][0-9]) {_TIME} ([0-9]{{4}})")
_MONTHS = {name: number for number, name in enumerate(_MONTH[1:-1].split("|"), 1)}
_EPOCH_DAY = date(1970, 1, 1).toordinal()
# A resource name as GitHub writes them ("core", "search", "code_scanning_upload", "graphql").
_RESOURCE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# X-RateLimit-Reset's kinds, told apart by size: epoch milliseconds, epoch seconds, else seconds from now.
_EPOCH_MS_ABOVE = 1e12
_EPOCH_S_ABOVE = 1e9

_warned: set[tuple[str, str]] = set()


def read(headers: Iterable[tuple[str, str]], status: int, *, now: float, dialect: str | None = None) -> ServerWord:
    """What the response with ``headers`` and ``status`` says about the server's limits.

    Args:
        headers: the response's (name, value) pairs as the client gives them (httpx
            ``response.headers.multi_items()``, requests' and aiohttp's ``response.headers.items()``); names in
            any case; a repeated field's values are joined with ``", "``.
        status: the response's status code: ``Retry-After`` is read on 429 and 503 (and GitHub's 403).
        now: the client's wall clock (``time.time()``) when the response arrived. Absolute resets are taken
            relative to the response's ``Date`` when it has a valid one, so that the client's clock skew does
            not matter; ``now`` only when it has none.
        dialect: read only this dialect (one of ``DIALECTS``); ``None``: the first of ``DIALECTS`` the
            response carries.

    Raises:
        InvalidValue: ``dialect`` is not one of ``DIALECTS`` (a ``ValueError``). Nothing a server sends raises.
    """
    if dialect is not None and dialect not in DIALECTS:
        raise InvalidValue("dialect", f"{dialect!r} is not one of {', '.join(map(repr, DIALECTS))}")
    return read_fields(fields_in(headers), status, now=now, dialect=dialect)


def fields_in(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The rate-limit fields among ``headers`` (``read``'s), by lower-case name, a repeated one's values joined
    with ``", "``: all that ``read_fields`` reads."""
    fields = _FIELDS  # a local: the loop below is all most responses cost
    said: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        if key in fields and isinstance(value, str):
            earlier = said.get(key)
            # RFC 9110 5.3: a repeated field is one list; for IETF's lists this is the split-over-lines form,
            # for a single-valued field it makes the value malformed, as it should.
            said[key] = value if earlier is None else f"{earlier}, {value}"
    return said


def fields_in_raw(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """``fields_in`` for headers as bytes (httpx's ``Headers.raw``), decoding only the fields kept.

    Raises:
        UnicodeDecodeError: a kept field's value is not ASCII; the caller decodes the headers as its client does
            and reads them with ``fields_in``.
    """
    names = _RAW_NAMES
    said: dict[str, str] = {}
    for name, raw in headers:
        key = names.get(name, _UNSEEN)
        if key is _UNSEEN:
            key = _RAW_FIELDS.get(name.lower())
            if len(names) < _MOST_RAW_NAMES:
                names[name] = key
        if key is not None:
            value = raw.decode("ascii")
            earlier = said.get(key)
            said[key] = value if earlier is None else f"{earlier}, {value}"
    return said


def read_fields(said: dict[str, str], status: int, *, now: float, dialect: str | None = None) -> ServerWord:
    """``read`` of the fields ``fields_in`` (or ``fields_in_raw``) kept; ``dialect`` is taken as valid."""
    if not said or (len(said) == 1 and "date" in said):
        return _NOTHING if dialect is None else ServerWord(dialect, (), None)
    if dialect is None:
        dialect = _dialect_of(said)
    reading = _Reading(said, dialect, now)
    budgets = _READERS[dialect](reading) if dialect else ()
    waits = status in _STATUSES_WITH_WAIT or (status == 403 and dialect == "github")
    retry_after = reading.retry_after() if waits else None
    if not dialect and retry_after is None:
        return _NOTHING
    return ServerWord(dialect, budgets, retry_after)


def _dialect_of(said: dict[str, str]) -> str:
    """The first of ``DIALECTS`` whose fields ``said`` holds, ``""`` for none."""
    if "ratelimit" in said and _sfv_installed():
        return "ietf"
    names = said.keys()
    if not names.isdisjoint(_ANTHROPIC_FIELDS):
        return "anthropic"
    if not names.isdisjoint(_OPENAI_FIELDS):
        return "openai"
    if not names.isdisjoint(_GITHUB_MARKS):
        return "github"
    if not names.isdisjoint(_GENERIC_FIELDS):
        return "x-ratelimit"
    return ""


@functools.cache
def _sfv_installed() -> bool:
    """Whether ``http_sfv`` can be imported; said once on the log when it cannot (IETF fields then go unread)."""
    try:
        import http_sfv  # noqa: F401
    except ImportError:
        log.warning("http-sfv is not installed: IETF RateLimit fields are not read (pip install http-sfv)")
        return False
    return True


def _warn(dialect: str, field: str, value: str | None, why: str) -> None:
    """Say once per (dialect, field) that a value was ignored: a server that sends one bad value sends it on
    every response, and the log must not grow with the traffic."""
    if (dialect, field) in _warned:
        return
    _warned.add((dialect, field))
    shown = "nothing" if value is None else repr(value[:80])
    log.warning("ignored %s %s from the server (%s dialect): %s", field, shown, dialect or "no", why)


class _Reading:
    """One response's fields being read in one dialect, with the server's clock worked out at most once."""

    __slots__ = ("_reference", "dialect", "now", "said")

    def __init__(self, said: dict[str, str], dialect: str, now: float) -> None:
        self.said = said
        self.dialect = dialect
        self.now = now
        self._reference: float | None = None

    def warn(self, field: str, value: str | None, why: str) -> None:
        _warn(self.dialect, field, value, why)

    def reference(self) -> float:
        """The moment the response was made, in epoch seconds: its ``Date`` when valid (the server's own
        clock, the one its absolute resets are on), else ``now``."""
        if self._reference is None:
            self._reference = self.now
            value = self.said.get("date")
            if value is not None:
                moment = _http_date(value)
                if moment is None:
                    self.warn("date", value, "not an HTTP date; absolute times are taken from the client's clock")
                else:
                    self._reference = moment
        return self._reference

    def until(self, moment: float, field: str, value: str) -> float | None:
        """Seconds from the response to the epoch ``moment``; 0.0 when it has passed (the reset happened)."""
        seconds = max(moment - self.reference(), 0.0)
        return self.wait(seconds, field, value)

    def wait(self, seconds: float, field: str, value: str) -> float | None:
        # Written so that NaN fails too.
        if 0.0 <= seconds <= LONGEST_WAIT:
            return seconds
        self.warn(field, value, f"not a wait of 0 to {LONGEST_WAIT:.0f} seconds")
        return None

    def count(self, field: str, *, remaining: bool) -> int | None:
        """The whole number in ``field``: ``None`` when absent or malformed (logged when malformed, or when a
        ``remaining`` count is absent: its budget is dropped). A count above 2**32 - 1 is malformed, except a
        ``remaining`` count, which is clamped (a huge remaining caps nothing anyway)."""
        value = self.said.get(field)
        if value is None:
            if remaining:
                self.warn(field, None, "missing, so the budget it belongs to is dropped")
            return None
        digits = value.strip()
        # isascii and isdigit: ASCII digits only, as _WHOLE, at a fraction of a match's cost.
        if not (digits.isascii() and digits.isdigit()) and not _WHOLE.fullmatch(digits):
            self.warn(field, value, "not a whole number of 0 or more")
            return None
        # Not int() on a long string: it is slow and, past 4300 digits, refused.
        number = int(digits) if len(digits) <= 10 else MOST_REMAINING + 1
        if number > MOST_REMAINING:
            if remaining:
                return MOST_REMAINING
            self.warn(field, value, f"above {MOST_REMAINING}")
            return None
        return number

    def reset(self, field: str, parse: _ResetParser) -> float | None:
        """Seconds until ``field``'s reset as ``parse`` reads it; ``None`` (logged) when absent or malformed."""
        value = self.said.get(field)
        if value is None:
            self.warn(field, None, "missing, so the budget it belongs to is dropped")
            return None
        return parse(self, field, value)

    def budget(self, name: str, remaining_field: str, limit_field: str, reset: float | None) -> Budget | None:
        remaining = self.count(remaining_field, remaining=True)
        limit = self.count(limit_field, remaining=False)
        if remaining is None or reset is None:
            return None
        return Budget(name, remaining, reset, limit)

    def retry_after(self) -> float | None:
        """The wait the server asks for: OpenAI's ``retry-after-ms`` first, then ``Retry-After`` (seconds or an
        HTTP date); ``None`` when neither is there and valid."""
        if self.dialect in ("openai", "") and "retry-after-ms" in self.said:  # OpenAI's, or alone
            in_ms = self.said["retry-after-ms"]
            milliseconds = _number(in_ms)
            if milliseconds is None:
                self.warn("retry-after-ms", in_ms, "not a number of milliseconds")
            else:
                wait = self.asked_wait(milliseconds / 1000.0, "retry-after-ms", in_ms)
                if wait is not None:
                    return wait
        value = self.said.get("retry-after")
        if value is None:
            return None
        seconds = _number(value)
        if seconds is not None:
            return self.asked_wait(seconds, "retry-after", value)
        moment = _http_date(value)
        if moment is None:
            self.warn("retry-after", value, "neither seconds nor an HTTP date")
            return None
        return self.asked_wait(max(moment - self.reference(), 0.0), "retry-after", value)

    def asked_wait(self, seconds: float, field: str, value: str) -> float | None:
        """A wait the server asks for, capped at a day: a long one is a server saying "stop"."""
        if math.isfinite(seconds) and seconds > LONGEST_WAIT:
            self.warn(field, value, "longer than a day, so obeyed for a day")
            return LONGEST_WAIT
        return self.wait(seconds, field, value)


# A reset reader below: the seconds until the reset that ``value`` of ``field`` names, or None (logged).
_ResetParser = Callable[[_Reading, str, str], "float | None"]


def _number(value: str) -> float | None:
    """A plain decimal number of 0 or more in ASCII digits, else ``None``."""
    text = value.strip()
    if text.isascii() and text.isdigit() and len(text) <= 20:  # the usual whole number, without a match
        return float(text)
    return float(text) if _NUMBER.fullmatch(text) else None


def _epoch_seconds(year: int, month: int, day: int, hour: int, minute: int, second: float) -> float | None:
    """The epoch second of a UTC date and time, ``None`` when there is no such date (datetime's arithmetic at a
    quarter of its cost: nearly every rate-limited response has a Date to read)."""
    if hour > 23 or minute > 59 or second >= 61:  # 60: a leap second, as RFC 3339 and 9110 allow
        return None
    try:
        days = date(year, month, day).toordinal() - _EPOCH_DAY
    except ValueError:
        return None
    return days * 86400.0 + hour * 3600.0 + minute * 60.0 + second


# The value parsers below are cached: a server repeats their values (its Date changes once a second, a reset
# stays while its window lasts), and each response would otherwise parse them again.
@functools.lru_cache(maxsize=256)
def _http_date(value: str) -> float | None:
    """An HTTP date (RFC 9110 5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms) in epoch seconds,
    else ``None``. Not email.utils' parser: it reads "<date>, 5" (a repeated Retry-After) as the date, and
    costs 10 µs where this costs 2."""
    text = value.strip()
    match = _IMF_FIXDATE.fullmatch(text)
    if match is not None:
        day, month, year, hour, minute, second = match.groups()
    else:
        match = _RFC850_DATE.fullmatch(text)
        if match is not None:
            day, month, two_digits, hour, minute, second = match.groups()
            # RFC 9110 5.6.7: a two-digit year more than 50 years ahead is the last century's (right until 2070).
            year = str(int(two_digits) + (1900 if int(two_digits) >= 70 else 2000))
        else:
            match = _ASCTIME_DATE.fullmatch(text)
            if match is None:
                return None
            month, day, hour, minute, second, year = match.groups()
    return _epoch_seconds(int(year), _MONTHS[month], int(day), int(hour), int(minute), int(second))


@functools.lru_cache(maxsize=256)
def _go_duration(value: str) -> float | None:
    """Seconds in a Go duration ("6m0s", "1.5s", "20ms", "100us"); a bare number is taken as seconds, as
    OpenAI-compatible servers (Azure's) send. ``None`` when it is neither."""
    text = value.strip()
    bare = _number(text)
    if bare is not None:
        return bare
    if len(text) > 100 or not _GO_DURATION.fullmatch(text):
        return None
    return sum(float(number) * _GO_UNITS[unit] for number, unit in _GO_PARTS.findall(text))


@functools.lru_cache(maxsize=256)
def _rfc3339(value: str) -> float | None:
    """An RFC 3339 timestamp ("2026-11-27T10:00:30Z", with a fraction or an offset) in epoch seconds."""
    match = _RFC3339.fullmatch(value.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, sign, offset_hours, offset_minutes = match.groups()
    moment = _epoch_seconds(
        int(year), int(month), int(day), int(hour), int(minute), int(second) + (float(fraction) if fraction else 0.0)
    )
    if moment is None or sign is None:
        return moment
    if int(offset_hours) > 23 or int(offset_minutes) > 59:
        return None
    offset = int(offset_hours) * 3600.0 + int(offset_minutes) * 60.0
    # 10:00:30+01:00 is 09:00:30Z: the offset is taken away.
    return moment - offset if sign == "+" else moment + offset


def _epoch_reset(reading: _Reading, field: str, value: str) -> float | None:
    """GitHub's reset: the epoch second the window resets at."""
    moment = _number(value)
    if moment is None:
        reading.warn(field, value, "not epoch seconds")
        return None
    return reading.until(moment, field, value)


def _duration_reset(reading: _Reading, field: str, value: str) -> float | None:
    """OpenAI's reset: a Go duration from the response."""
    seconds = _go_duration(value)
    if seconds is None:
        reading.warn(field, value, "not a Go duration")
        return None
    return reading.wait(seconds, field, value)


def _timestamp_reset(reading: _Reading, field: str, value: str) -> float | None:
    """Anthropic's reset: an RFC 3339 timestamp."""
    moment = _rfc3339(value)
    if moment is None:
        reading.warn(field, value, "not an RFC 3339 timestamp")
        return None
    return reading.until(moment, field, value)


def _any_reset(reading: _Reading, field: str, value: str) -> float | None:
    """The generic X-RateLimit-Reset: epoch milliseconds, epoch seconds or seconds from now by size, or an
    HTTP date."""
    number = _number(value)
    if number is None:
        moment = _http_date(value)
        if moment is None:
            reading.warn(field, value, "neither a number nor an HTTP date")
            return None
        return reading.until(moment, field, value)
    if number > _EPOCH_MS_ABOVE:
        return reading.until(number / 1000.0, field, value)
    if number > _EPOCH_S_ABOVE:
        return reading.until(number, field, value)
    return reading.wait(number, field, value)


def _seconds_reset(reading: _Reading, field: str, value: str) -> float | None:
    """X-RateLimit-Reset-After: seconds from the response."""
    seconds = _number(value)
    if seconds is None:
        reading.warn(field, value, "not a number of seconds")
        return None
    return reading.wait(seconds, field, value)


def _read_openai(reading: _Reading) -> tuple[Budget, ...]:
    budgets = []
    for kind in _OPENAI_KINDS:
        fields = (f"x-ratelimit-limit-{kind}", f"x-ratelimit-remaining-{kind}", f"x-ratelimit-reset-{kind}")
        if reading.said.keys().isdisjoint(fields):
            continue
        reset = reading.reset(fields[2], _duration_reset)
        budget = reading.budget(kind, fields[1], fields[0], reset)
        if budget is not None:
            budgets.append(budget)
    return tuple(budgets)


def _read_anthropic(reading: _Reading) -> tuple[Budget, ...]:
    budgets = []
    for kind in _ANTHROPIC_KINDS:
        prefix = f"anthropic-ratelimit-{kind}-"
        fields = (f"{prefix}limit", f"{prefix}remaining", f"{prefix}reset")
        if reading.said.keys().isdisjoint(fields):
            continue
        reset = reading.reset(fields[2], _timestamp_reset)
        budget = reading.budget(kind, fields[1], fields[0], reset)
        if budget is not None:
            budgets.append(budget)
    return tuple(budgets)


def _read_github(reading: _Reading) -> tuple[Budget, ...]:
    said = reading.said
    if said.keys().isdisjoint(("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")):
        return ()  # a secondary limit's 403 may carry only retry-after
    name = "core"
    resource = said.get("x-ratelimit-resource")
    if resource is not None:
        name = resource.strip()
        if not _RESOURCE.fullmatch(name):
            # Counted against the wrong budget would be worse than not counted.
            reading.warn("x-ratelimit-resource", resource, "not a resource name, so the budget is dropped")
            return ()
    reset = reading.reset("x-ratelimit-reset", _epoch_reset)
    budget = reading.budget(name, "x-ratelimit-remaining", "x-ratelimit-limit", reset)
    return () if budget is None else (budget,)


def _read_generic(reading: _Reading) -> tuple[Budget, ...]:
    said = reading.said
    if said.keys().isdisjoint(_GENERIC_FIELDS):
        return ()
    reset = None
    if "x-ratelimit-reset-after" in said:  # relative: no clock to trust, so it goes first
        reset = reading.reset("x-ratelimit-reset-after", _seconds_reset)
    if reset is None:
        reset = reading.reset("x-ratelimit-reset", _any_reset)
    budget = reading.budget("requests", "x-ratelimit-remaining", "x-ratelimit-limit", reset)
    return () if budget is None else (budget,)


def _read_ietf(reading: _Reading) -> tuple[Budget, ...]:
    """The IETF fields (draft-ietf-httpapi-ratelimit-headers-10): ``RateLimit`` members, paired by name with
    ``RateLimit-Policy`` members for their quota and window. Per the draft's section 7, malformed fields
    MUST be ignored: a field that does not parse is dropped whole, a member that is not valid alone."""
    if "ratelimit" not in reading.said or not _sfv_installed():
        return ()
    policies: dict[str, tuple[int | None, int | None]] = {}
    # The policies whose quota is not in requests (qu: content-bytes, concurrent-requests): no call counts in them.
    not_requests: set[str] = set()
    for name, params in _sfv_members(reading, "ratelimit-policy"):
        unit = params.get("qu", "requests")
        if isinstance(unit, str) and unit != "requests":  # a String or a Token; another type is left aside
            if name not in not_requests:
                why = f"policy {name!r} counts a quota unit other than requests"
                reading.warn("ratelimit-policy", reading.said["ratelimit-policy"], why)
                not_requests.add(name)
            continue
        q, w = params.get("q"), params.get("w")
        # Section 3.1.3: w is a non-negative, non-zero Integer.
        policies.setdefault(name, (q if _is_count(q) else None, w if _is_count(w) and w > 0 else None))
    budgets = []
    for name, params in _sfv_members(reading, "ratelimit"):
        if name in not_requests:
            continue
        remaining, reset = params.get("r"), params.get("t")
        if not _is_count(remaining):
            reading.warn("ratelimit", reading.said["ratelimit"], f"policy {name!r} has no valid r")
            continue
        limit, window = policies.get(name, (None, None))
        if reset is None:
            # Section 4.1: t is OPTIONAL, and absent it is not 0: 4.2's example 'r=999;pk=...' is "a partition
            # key that has no time window reset". So no more quota comes sooner than the policy's window (when
            # stated, more is reallocated by its end, section 2) or, with none, than the longest wait we obey.
            seconds = min(float(window), LONGEST_WAIT) if window is not None else LONGEST_WAIT
        elif _is_count(reset) and reset <= LONGEST_WAIT:
            seconds = float(reset)
        else:
            reading.warn(
                "ratelimit",
                reading.said["ratelimit"],
                f"policy {name!r} has a t that is not a whole number of seconds from 0 to 86400",
            )
            continue
        quota = limit if limit is not None and limit <= MOST_REMAINING else None
        budgets.append(
            Budget(name, min(remaining, MOST_REMAINING), seconds, quota, None if window is None else float(window))
        )
    return tuple(budgets)


def _is_count(value: object) -> TypeGuard[int]:
    """An SF Integer of 0 or more (not a Boolean, which Python counts as an int)."""
    return type(value) is int and value >= 0


def _sfv_members(reading: _Reading, field: str) -> tuple[tuple[str, dict[str, object]], ...]:
    """The (name, parameters) of each member of the SF List in ``field``; ``()`` (logged) when it does not
    parse. Inner lists and members not named by a string are skipped (logged)."""
    value = reading.said.get(field)
    if value is None:
        return ()
    members, skipped = _sfv_list(value)
    if members is None:
        reading.warn(field, value, "not a structured field list")
        return ()
    if skipped:
        reading.warn(field, value, "a member is not a named item")
    return members


@functools.lru_cache(maxsize=256)
def _sfv_list(value: str) -> tuple[tuple[tuple[str, dict[str, object]], ...] | None, bool]:
    """``value`` parsed as an SF List: its named members (``None`` when it does not parse) and whether any
    member was skipped. Cached: a policy field repeats on every response, and http_sfv (pure Python) takes
    some 15 µs a parse. The parameters' dicts are shared between calls: read them, never change them."""
    from http_sfv.item import Item
    from http_sfv.list import List

    members = List()
    try:
        members.parse(value.encode("ascii"))
    except Exception:  # a third-party parser fed whatever a server sends must not raise through `read`
        return None, False
    found = []
    skipped = False
    for member in members:
        name = getattr(member, "value", None)
        # Section 3 asks for a String; a Token ('api;r=1', as the -10 text's own examples write it, and which
        # the WG considered adopting, issue #158) is a str too, and read the same way.
        if isinstance(name, str) and name and isinstance(member, Item):
            found.append((str(name), dict(member.params)))
        else:
            skipped = True
    return tuple(found), skipped


_READERS = {
    "ietf": _read_ietf,
    "anthropic": _read_anthropic,
    "openai": _read_openai,
    "github": _read_github,
    "x-ratelimit": _read_generic,
}
