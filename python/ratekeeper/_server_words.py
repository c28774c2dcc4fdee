"""What a rate-limited server says about its limits, read from one response's headers.

Servers speak one of a few dialects (IETF ``RateLimit``, Anthropic, OpenAI, GitHub, the generic
``X-RateLimit-*``); ``read`` turns any of them into the same ``Budget`` list and ``Retry-After`` wait,
for the outgoing transports (httpx, requests, aiohttp) to obey. The reading is the core's (Rust: structured
fields by the ``sfv`` crate, HTTP dates by ``httpdate``); the transports call it straight from their
engine, with the client's raw headers, and this module is its Python face.

Nothing a server sends is trusted: a value that is malformed, missing, negative, not finite, non-ASCII or
absurdly large drops only the budget (or wait) it belongs to, and is logged once per dialect and field on
``ratekeeper.outgoing``. ``read`` raises only for a dialect name of the caller's that does not exist. An HTTP
date must be a real one: its weekday the date's, no leap second, not before 1970.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ratekeeper._core import _read_server_word
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
            429 and 503, and on GitHub's 403, at most 86,400 (a longer one is obeyed for a day); ``None`` when
            absent, malformed or not read for that status.
    """

    dialect: str
    budgets: tuple[Budget, ...]
    retry_after: float | None


_NOTHING = ServerWord("", (), None)

_ANTHROPIC_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")
# Every name `read` keeps; all others are passed over.
_FIELDS = frozenset(
    {f"anthropic-ratelimit-{kind}-{part}" for kind in _ANTHROPIC_KINDS for part in ("limit", "remaining", "reset")}
    | {f"x-ratelimit-{part}-{kind}" for kind in ("requests", "tokens") for part in ("limit", "remaining", "reset")}
    | {"x-ratelimit-resource", "x-github-request-id"}
    | {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-reset-after"}
    | {"ratelimit", "ratelimit-policy", "retry-after", "retry-after-ms", "date"}
)
# The same names as bytes, for headers read undecoded (fields_in_raw).
_RAW_FIELDS = {name.encode("ascii"): name for name in _FIELDS}

_warned: set[tuple[str, str]] = set()


def read(headers: Iterable[tuple[str, str]], status: int, *, now: float, dialect: str | None = None) -> ServerWord:
    """What the response with ``headers`` and ``status`` says about the server's limits.

    Args:
        headers: the response's (name, value) pairs as the client gives them (httpx
            ``response.headers.multi_items()`` or ``.raw``, requests' and aiohttp's ``response.headers.items()``,
            aiohttp's ``raw_headers``); str or bytes, names in any case; a repeated field's values are joined
            with ``", "``.
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
    return _word(_read_server_word(headers, status, now, dialect))


def read_fields(said: dict[str, str], status: int, *, now: float, dialect: str | None = None) -> ServerWord:
    """``read`` of the fields ``fields_in`` (or ``fields_in_raw``) kept; ``dialect`` is taken as valid."""
    return _word(_read_server_word(said, status, now, dialect))


def _word(word: tuple[str, list[tuple[str, int, float, int | None, float | None]], float | None]) -> ServerWord:
    dialect, budgets, retry_after = word
    if not dialect and retry_after is None:
        return _NOTHING
    return ServerWord(dialect, tuple(Budget(*budget) for budget in budgets), retry_after)


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
    said: dict[str, str] = {}
    for name, raw in headers:
        key = _RAW_FIELDS.get(name.lower())
        if key is not None:
            value = raw.decode("ascii")
            earlier = said.get(key)
            said[key] = value if earlier is None else f"{earlier}, {value}"
    return said


def _warn(dialect: str, field: str, value: str | None, why: str) -> None:
    """Say once per (dialect, field) that a value was ignored: a server that sends one bad value sends it on
    every response, and the log must not grow with the traffic. The core calls it for each value it ignored."""
    if (dialect, field) in _warned:
        return
    _warned.add((dialect, field))
    shown = "nothing" if value is None else repr(value[:80])
    log.warning("ignored %s %s from the server (%s dialect): %s", field, shown, dialect or "no", why)
