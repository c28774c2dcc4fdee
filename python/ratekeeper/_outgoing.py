"""The engine behind ratekeeper's HTTP clients (``ratekeeper.httpx``, ``ratekeeper.requests``,
``ratekeeper.aiohttp``): what a call is keyed by and costs, waiting its turn or failing, the server's word
turned into caps on the local budget, retries after a 429, and the counters. The adapters only translate
their client's request and response into a ``Call`` and a ``Reply``.

A call spends, all or nothing, in every group that applies to it: the group the limiter's rules route its
path to (if any), and one group per budget of the server (``requests``, ``tokens``, ...): a group the user
named for that budget (``groups=``), else the group made for it on the server's first word (``auto_groups``:
``"<host> <budget>"``, a fixed window of the size the server states). After each response the server's
remaining and reset cap those groups through ``Limiter.cap``, so every process sharing the limiter's store
(``rk.Shared``, ``rk.Redis``) keeps under what the server said.

Waiting never reserves: a word re-anchors a fixed window, and a slot reserved in a later window would not
survive it. A waiting call loops over a non-blocking ``check`` (a refusal changes nothing) and sleeps the
refusal's ``retry_after``, at most a quarter of a second at a time (a word heard meanwhile may end the window
sooner).

Two things the server's word cannot say, and what is done about them:

- A call admitted in a window's last moments may reach the server after its reset, counted in its next
  window, which the next local window (starting full) does not count. A call admitted closer to its budget's
  window end than calls to that host take (admission to answer, averaged) is given back and waits for the
  window to end.
- Before a host's first answer its auto-groups do not exist: its calls go one at a time in each process until
  then (a transport made later on the same limiter plans with the groups already made). Those first calls (one
  per process) are in no budget, so a word may not count the other processes' yet: up to one call per other
  process may go past the server's limit at the start (and be retried).

A call costs two calls into the core (``_core._Outgoing``): its admission (routing, the checks in every group,
all or nothing, the hold at a window's end) and its reply's (the rate-limit fields picked out of the client's
raw headers, the server's word read, its groups capped, the counters). Python keeps the waiting, the retries,
the user's functions, and making a group for a budget the server states for the first time.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from ratekeeper._core import Decision, Limit, Rate, _Outgoing, _Ticket
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, RateLimited
from ratekeeper._offload import off_loop_soon, off_loop_through
from ratekeeper._server_words import DIALECTS

if TYPE_CHECKING:
    from ratekeeper._core import _Unmade
    from ratekeeper.limiter import Limiter

__all__ = ["Call", "HostStats", "Outgoing", "Reply"]

log = logging.getLogger("ratekeeper.outgoing")

R = TypeVar("R")
Q = TypeVar("Q")
S = TypeVar("S")

_SHORTEST_SLEEP = 0.001


class _Unset:
    """The type of ``_UNSET``: an argument not given (where ``None`` means something)."""


_UNSET = _Unset()
#: A waiting call looks again at least this often: a word heard meanwhile (or tokens given back) may have moved
#: the window's end closer than the refusal said.
_LONGEST_SLEEP = 0.25
#: The most units a call may spend in a budget, and the least it cannot: what the core counts in.
_MOST_UNITS = 2**63
#: How often a call awaiting its host's first answer in asyncio looks whether it came; the ``retry_after`` of
#: one refused meanwhile.
_FIRST_WORD_POLL = 0.01
# The longest a lock may be waited for (threading.TIMEOUT_MAX, some 292 years): a longer timeout is as none.
_LONGEST_BLOCK = threading.TIMEOUT_MAX


class Call:
    """What the engine sees of an outgoing request.

    Attributes:
        method: the HTTP method, upper case.
        host: the URL's host, with its port when the URL names one (``api.openai.com``, ``127.0.0.1:8000``).
        path: the URL's path (no query), what the limiter's rules route.
        headers: the request's headers, names in lower case, repeated ones joined with ``", "``.
        content: the request's body when the client has it in memory, else ``None``.
    """

    # A plain class with slots, not a frozen dataclass: one is made per call, and a frozen dataclass takes three
    # times as long to make. The adapters' calls join the headers only when read (a key function, a cost
    # function or api_key_header): most calls never need them.
    __slots__ = ("_headers", "_pairs", "content", "host", "method", "path")

    def __init__(
        self, method: str, host: str, path: str, headers: Mapping[str, str], content: bytes | None = None
    ) -> None:
        self.method, self.host, self.path, self.content = method, host, path, content
        self._headers: Mapping[str, str] | None = headers
        self._pairs: Callable[[], Iterable[tuple[str, str]]] | None = None

    @classmethod
    def _lazy(
        cls, method: str, host: str, path: str, pairs: Callable[[], Iterable[tuple[str, str]]], content: bytes | None
    ) -> Call:
        """A call whose headers are joined from ``pairs()`` when first read."""
        call = cls.__new__(cls)
        call.method, call.host, call.path, call.content = method, host, path, content
        call._headers, call._pairs = None, pairs
        return call

    @property
    def headers(self) -> Mapping[str, str]:
        headers = self._headers
        if headers is None:
            assert self._pairs is not None
            headers = self._headers = joined_headers(self._pairs())
        return headers

    def __repr__(self) -> str:
        return f"Call(method={self.method!r}, host={self.host!r}, path={self.path!r})"


class Reply:
    """What the engine sees of a response: ``status``, ``headers`` as (name, value) pairs, and ``content``,
    the body, read only when the engine was given a ``spent`` callable (else ``None``)."""

    # As Call: slots, and the adapters' replies make their headers' pairs only when read (by ``spent``); the
    # engine reads the few rate-limit fields in the core, straight from the client's raw headers.
    __slots__ = ("_headers", "_pairs", "_source", "content", "status")

    def __init__(self, status: int, headers: tuple[tuple[str, str], ...], content: bytes | None = None) -> None:
        self.status, self.content = status, content
        self._headers: tuple[tuple[str, str], ...] | None = headers
        self._source: Any = None
        self._pairs: Callable[[Any], Iterable[tuple[str, str]]] | None = None

    @classmethod
    def _lazy(cls, status: int, source: S, pairs: Callable[[S], Iterable[tuple[str, str]]]) -> Reply:
        """A reply of the client's headers ``source``: its pairs are ``pairs(source)``, made when first read."""
        reply = cls.__new__(cls)
        reply.status, reply.content = status, None
        reply._headers, reply._source, reply._pairs = None, source, pairs
        return reply

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        headers = self._headers
        if headers is None:
            assert self._pairs is not None
            headers = self._headers = tuple(self._pairs(self._source))
        return headers

    def header(self, name: str) -> str | None:
        """The first value of the header ``name`` (any case), or ``None``."""
        name = name.lower()
        return next((value for key, value in self.headers if key.lower() == name), None)

    def __repr__(self) -> str:
        return f"Reply(status={self.status!r})"


class HostStats(TypedDict):
    """The counters of one key (a host, or a host and an API key) in
    [`Outgoing.stats`][ratekeeper.httpx.Outgoing.stats].

    Attributes:
        calls: requests sent (a retry is one more).
        waits: calls that waited their turn at least once.
        waited: seconds spent waiting, turns and retries together.
        refused: calls refused with ``RateLimited`` (no wait asked for, or the wait would pass the timeout).
        throttled: 429 (and 503 or 403 with a wait, or 403 with a budget spent) responses received.
        retries: calls sent again after one.
        dialect: the dialect of the server's last word (``""``: none yet).
        remaining: each budget's remaining, as the server last said.
        reset: each budget's seconds to reset, as the server last said.
        said_at: ``time.time()`` of the server's last word, 0.0 before one.
    """

    calls: int
    waits: int
    waited: float
    refused: int
    throttled: int
    retries: int
    dialect: str
    remaining: dict[str, int]
    reset: dict[str, float]
    said_at: float


def _filling(decision: Decision) -> bool:
    """Whether the budget ``decision`` spent in is more than half used: only then may calls that cross into the
    server's next window fill it past its limit."""
    limit, remaining = decision.limit, decision.remaining
    return limit is not None and remaining is not None and 2 * remaining < limit


KeyFunction = Callable[[Call], str]
CostFunction = Callable[[Call], Mapping[str, int]]
SpentFunction = Callable[[Reply], "Mapping[str, int] | None"]


class Outgoing:
    """Paces the calls a client makes to rate-limited servers and obeys what the servers say; one object,
    shared by any number of transports, threads and tasks.

    Args:
        limiter: the [`Limiter`][ratekeeper.Limiter] whose store holds the budgets (memory, ``rk.Shared`` for
            the workers of a machine, ``rk.Redis`` in exact mode for a fleet). Its rules, if any route a
            call's path, limit that call too.
        key: a callable of the [`Call`][ratekeeper.httpx.Call] returning the key its budgets are kept
            under; default: the host, with a fingerprint of ``api_key_header``'s value when given.
        api_key_header: a request header holding the credential the server counts by (``"authorization"``,
            ``"x-api-key"``): each credential gets budgets of its own (the key holds a short SHA-256 of it,
            never the secret).
        groups: budget name -> group name, for budgets whose group you declare (e.g. ``{"requests":
            "openai requests", "tokens": "openai tokens"}``). Each group must exist in the limiter and have
            a ``fixed_window`` limit, which the server's word caps. The limiter's state is kept per key, so
            one declared group serves every host and credential.
        auto_groups: make a group for a budget the server states a limit of and ``groups`` leaves out, on
            its first word: ``"<host> <budget>"``, one ``fixed_window`` limit of the stated size per the
            stated window (or ``window``); a later word with another size changes it in place.
        window: the window, in seconds, of an auto-group whose server states none (OpenAI, Anthropic and
            GitHub state sizes but no windows; OpenAI's and Anthropic's are per minute). It matters only
            once the server's reset has passed with no word since: the window then counts afresh.
        cost: a callable of the call returning what it spends per budget, e.g. ``{"tokens": 900}`` for
            its estimated tokens; a budget it leaves out costs 1.
        spent: a callable of the [`Reply`][ratekeeper.httpx.Reply] returning what the call really spent
            per budget (e.g. the usage in the response's body), or ``None``: the difference with ``cost``'s
            estimate is given back (``reduce``) or spent more. Setting it makes the adapters read the body.
        dialect: read the servers' fields in this dialect only (``"ietf"``, ``"anthropic"``, ``"openai"``,
            ``"github"``, ``"x-ratelimit"``); default: whichever a response carries.
        wait: wait for the call's turn (default); ``False`` raises [`RateLimited`][ratekeeper.RateLimited] at
            once instead, without sending it (also while its host's first answer is awaited), and returns a
            429 as it came, without waiting to retry it.
        timeout: the longest a call waits for its turn, in seconds, retries included; past it,
            ``RateLimited``. ``None``: as long as it takes.
        retries: how many times a 429 (or a 503 with a wait) is sent again after the wait the server asks
            for; after that, the response is returned as it came.
        obey: let the servers' words cap the budgets and make groups; ``False`` paces by the groups you declare
            and the limiter's rules only (a 429 is still retried after the ``Retry-After`` it carries).

    Raises:
        InvalidType, InvalidValue: a bad option, naming it (``groups['tokens']: ...``).
    """

    def __init__(
        self,
        limiter: Limiter,
        *,
        key: KeyFunction | None = None,
        api_key_header: str | None = None,
        groups: Mapping[str, str] | None = None,
        auto_groups: bool = True,
        window: float = 60.0,
        cost: CostFunction | None = None,
        spent: SpentFunction | None = None,
        dialect: str | None = None,
        wait: bool = True,
        timeout: float | None = 60.0,
        retries: int = 2,
        obey: bool = True,
    ) -> None:
        from ratekeeper.limiter import Limiter

        if not isinstance(limiter, Limiter):
            raise InvalidType("limiter", f"must be a ratekeeper.Limiter, got {type(limiter).__name__}")
        if limiter.clock is not None:
            # Calls take real time, their waits sleep it, and a word's age is measured in it.
            raise InvalidValue("limiter", "paces real calls on the real clock: give it a limiter without a ManualClock")
        for name, function in (("key", key), ("cost", cost), ("spent", spent)):
            if function is not None and not callable(function):
                raise InvalidType(name, f"must be callable, got {type(function).__name__}")
        if api_key_header is not None:
            if not isinstance(api_key_header, str):
                raise InvalidType("api_key_header", f"must be a str, got {type(api_key_header).__name__}")
            if not api_key_header:
                raise InvalidValue("api_key_header", "must name a header")
            if key is not None:
                raise InvalidValue("api_key_header", "give a key function or an api_key_header, not both")
        for name, flag in (("auto_groups", auto_groups), ("wait", wait), ("obey", obey)):
            if not isinstance(flag, bool):
                raise InvalidType(name, f"must be a bool, got {type(flag).__name__}")
        _check_seconds("window", window, allow_none=False)
        try:  # an auto-group's window: one a limit can be made of
            Rate(1, per=window)
        except InvalidValue as error:
            raise InvalidValue("window", error.args[0].split(": ", 1)[-1]) from None
        _check_seconds("timeout", timeout, allow_none=True)
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise InvalidType("retries", f"must be an int, got {type(retries).__name__}")
        if not 0 <= retries <= 100:
            raise InvalidValue("retries", f"must be 0 to 100, got {retries}")
        if dialect is not None and not isinstance(dialect, str):
            raise InvalidType("dialect", f"must be a str or None, got {type(dialect).__name__}")
        if dialect is not None and dialect not in DIALECTS:
            raise InvalidValue("dialect", f"{dialect!r} is not one of {', '.join(map(repr, DIALECTS))}")
        self.limiter = limiter
        self.groups: dict[str, str] = _checked_groups(limiter, groups)
        self.auto_groups, self.window, self.dialect = auto_groups, float(window), dialect
        self.wait, self.retries, self.obey = wait, retries, obey
        self.timeout = None if timeout is None else float(timeout)
        self._key, self._api_key_header = key, None if api_key_header is None else api_key_header.lower()
        self._cost, self._spent = cost, spent
        self._lock = threading.Lock()
        # The per-call work: admissions, replies, the auto-groups made, the counters, the latencies.
        self._core = _Outgoing(
            limiter, self.groups, auto_groups=auto_groups, window=self.window, dialect=dialect, obey=obey
        )
        # The key is the host: no key function, no credential header.
        self._plain_key = key is None and api_key_header is None
        # Whether a host's first calls go one at a time until its first answer (see _go_first).
        self._waits_first = auto_groups and obey and not self.groups
        # host -> held by the call going as the host's first (see _go_first); the hosts that answered.
        self._firsts: dict[str, threading.Lock] = {}
        self._answered: set[str] = set()
        # (host, budget, limit, window) of the auto-groups the limiter could not make (see _auto_group).
        self._unmakeable: set[tuple[str, str, int, float]] = set()
        #: Whether the adapters must read a response's body for ``spent``.
        self._reads_body = spent is not None
        # The short way, for calls keyed by their host with no cost or spent function (from asyncio, also a store
        # that decides in this process): the adapter asks ``_admit_heard(host, path)`` for a ticket (``None``:
        # the host's first answer has not come, or the call is not admitted at once; it goes the long way,
        # ``_send``), sends the call, and hands the reply to ``_core_settle``, which leaves nothing for Python
        # (``None``) unless groups are to be made or the call retried (``_finish``). Two calls into the core, no
        # ``Call`` made, no frame of the engine's on the way.
        # ``_admit_parts`` is the same for httpx, from the parts its URL keeps parsed (False: parts to read in
        # Python first).
        fast = key is None and api_key_header is None and cost is None and spent is None
        self._admit_heard = self._core.admit_heard if fast else None
        self._aadmit_heard = self._admit_heard if not limiter._waits_on_io else None
        self._admit_parts = self._core.admit_parts if fast else None
        self._aadmit_parts = self._admit_parts if not limiter._waits_on_io else None
        self._core_settle = self._core.settle
        _warn_of_permits(limiter)

    def stats(self) -> dict[str, HostStats]:
        """The counters of each key this object has sent calls for (a copy): see
        [`HostStats`][ratekeeper.httpx.HostStats]. Counted in this process."""
        stats: dict[str, HostStats] = self._core.stats()
        return stats

    def __repr__(self) -> str:
        return f"<ratekeeper.Outgoing groups={self.groups!r} wait={self.wait} timeout={self.timeout}>"

    # --- what a call is --------------------------------------------------------------------------------------

    def _key_of(self, call: Call) -> str:
        """The key ``call``'s budgets are kept under."""
        if self._key is not None:
            key = self._key(call)
            if not isinstance(key, str):
                raise InvalidType("key", f"must return a str, got {type(key).__name__}")
            return key
        if self._api_key_header is not None:
            credential = call.headers.get(self._api_key_header)
            if credential:
                return f"{call.host} {hashlib.sha256(credential.encode()).hexdigest()[:16]}"
        return call.host

    def _estimate(self, call: Call) -> dict[str, int] | None:
        if self._cost is None:
            return None
        estimate = self._cost(call)
        if not isinstance(estimate, Mapping):
            raise InvalidType("cost", f"must return a mapping of budget names to units, got {type(estimate).__name__}")
        checked = {}
        for budget, units in estimate.items():
            if isinstance(units, bool) or not isinstance(units, int) or not isinstance(budget, str):
                raise InvalidType(("cost", str(budget)), f"must return str keys and int units, got {units!r}")
            if not 1 <= units < _MOST_UNITS:
                raise InvalidValue(("cost", budget), f"must return a positive count below 2**63, got {units}")
            checked[budget] = units
        return checked

    # --- admission -------------------------------------------------------------------------------------------
    #
    # The core's ``admit`` spends the call's units, all or nothing, in its routed group (1 unit, or ``cost``'s
    # ``"requests"``) and each budget's group (a declared one, else the host's auto-group): the ticket when
    # admitted, else the refusal, or the seconds to hold a call admitted closer to the end of a budget's window
    # than calls to that host take (only budgets more than half used): the server counts a call when it arrives,
    # and one admitted from a window's last moments may arrive after the server's reset, counted in its next
    # window, which the next local window (starting full) does not count.

    def _next_pause(
        self, key: str, host: str, refusal: Decision | float, deadline: float | None, waited: bool
    ) -> float | None:
        """How long to sleep after ``refusal``: a refusal's wait (``_pause``), or the seconds a call is held at a
        window's end; ``None`` when holding it would pass the deadline (it goes again, unheld)."""
        if not isinstance(refusal, float):
            return self._pause(key, host, refusal, deadline, waited)
        if deadline is not None and time.monotonic() + refusal > deadline:
            return None
        if not waited:
            self._core.count(key, waits=1)
        return refusal

    def _pause(self, key: str, host: str, refusal: Decision, deadline: float | None, waited: bool) -> float:
        """How long to sleep before trying again, or raises ``RateLimited`` (counted). A wait past the deadline
        raises at once unless it is a budget's own window, not the server's (``_Outgoing.guessing``): the words
        of the calls on their way may end it where the server's ends, so the call looks again until its
        deadline."""
        pause = refusal.retry_after
        now = time.monotonic()
        if (
            not self.wait
            or math.isinf(pause)
            or (
                deadline is not None
                and now + pause > deadline
                and (now >= deadline or refusal.group is None or not self._core.guessing(key, host, refusal.group))
            )
        ):
            self._core.count(key, refused=1)
            raise RateLimited(refusal)
        if not waited:
            self._core.count(key, waits=1)
        return min(max(pause, _SHORTEST_SLEEP), _LONGEST_SLEEP)

    def _first_of(self, host: str) -> threading.Lock | None:
        """While auto-groups are all a host's budgets are limited by and no answer from it came back yet, its
        calls go one at a time in this process, each holding the host's lock: the first answer makes its groups,
        and a burst sent before it would be limited by nothing. A call that gets no answer (it failed, was
        refused or cancelled) lets the next go as the first. ``None``: the host answered, go."""
        if not self._waits_first or host in self._answered or self._adopted(host):
            return None
        first = self._firsts.get(host)  # no lock: once made, a host's lock stays
        if first is None:
            with self._lock:
                first = self._firsts.setdefault(host, threading.Lock())
        return first

    def _adopted(self, host: str) -> bool:
        """Whether the limiter has auto-groups of ``host`` already (another transport on it heard the host, one
        made per call, say): this engine plans with them and takes the host as answered, rather than send calls
        limited by nothing until an answer of its own. Auto-groups are named ``"<host> <budget>"``."""
        prefix = f"{host} "
        found = False
        for name in self.limiter.groups:
            if name.startswith(prefix):
                policy = self.limiter.group_policy(name)
                if policy.window is not None:  # a rate's group, as auto-groups are
                    self._core.made(host, name[len(prefix) :], name, policy.quota, policy.window)
                    found = True
        if found:
            self._heard_from(host)
        return found

    def _go_first(self, host: str, key: str, deadline: float | None) -> tuple[bool, bool]:
        """Waits (``_first_of``) until a call may go: whether it goes as its host's first, holding the host's lock
        (``_first_done`` lets it go; not once the host has answered), and whether it waited."""
        first = self._first_of(host)
        if first is None:
            return False, False
        waited = not first.acquire(blocking=False)
        if waited:
            self._await_first_word(host, key, deadline)
            started = time.monotonic()
            got = first.acquire(timeout=-1 if deadline is None else min(max(deadline - started, 0.0), _LONGEST_BLOCK))
            self._core.count(key, waited=time.monotonic() - started)
            if not got:
                self._refuse_unheard(host, key)
        return self._still_first(host, first), waited

    async def _ago_first(self, host: str, key: str, deadline: float | None) -> tuple[bool, bool]:
        """``_go_first`` for asyncio: the lock is polled, as the first call may be another thread's or another
        event loop's."""
        first = self._first_of(host)
        if first is None:
            return False, False
        waited = not first.acquire(blocking=False)
        if waited:
            self._await_first_word(host, key, deadline)
            started = time.monotonic()
            try:
                while not first.acquire(blocking=False):
                    if deadline is not None and time.monotonic() >= deadline:
                        self._refuse_unheard(host, key)
                    await asyncio.sleep(_FIRST_WORD_POLL)
            finally:
                self._core.count(key, waited=time.monotonic() - started)
        return self._still_first(host, first), waited

    def _still_first(self, host: str, first: threading.Lock) -> bool:
        """Whether a call that took ``host``'s lock goes as its first: not once the host answered (the lock goes
        to the next waiting call at once)."""
        if host in self._answered:
            first.release()
            return False
        return True

    def _first_done(self, host: str, answered: bool) -> None:
        """The host's first call ended: answered, the host's calls go as they come; else the next goes first."""
        if answered:
            self._heard_from(host)
        self._firsts[host].release()

    def _await_first_word(self, host: str, key: str, deadline: float | None) -> None:
        """Counts a call about to wait for its host's first answer (``_go_first``), or refuses it at once
        (``wait=False``, or no time left before its deadline)."""
        if not self.wait or (deadline is not None and time.monotonic() >= deadline):
            self._refuse_unheard(host, key)
        self._core.count(key, waits=1)

    def _refuse_unheard(self, host: str, key: str) -> None:
        """Raises ``RateLimited`` (counted) for a call that may not wait for its host's first answer longer: a
        refusal of no group, whose message says what it waits for."""
        self._core.count(key, refused=1)
        refused = RateLimited(Decision._refusal(_FIRST_WORD_POLL))
        refused.args = (
            f"rate limited: {host}'s first answer, which states its budgets, is awaited; "
            f"retry after {_FIRST_WORD_POLL:.3f}s",
        )
        raise refused

    def _heard_from(self, host: str) -> None:
        if host in self._answered:
            return
        self._answered.add(host)
        self._core.heard_from(host)  # its calls may take the short way from now on

    def _asked(self, call: Call) -> tuple[str, str, dict[str, int] | None]:
        """What ``call`` asks the core for: its host, its key and its estimated cost."""
        host = call.host
        key = host if self._plain_key else self._key_of(call)
        return host, key, None if self._cost is None else self._estimate(call)

    def _admit(self, call: Call, deadline: float | None) -> tuple[_Ticket, bool]:
        """Waits (``time.sleep``) until ``call`` is admitted in all its groups; its ticket, and whether it goes as
        its host's first (``_go_first``)."""
        host, key, estimate = self._asked(call)
        first, waited = self._go_first(host, key, deadline)
        try:
            return self._admitted(call, host, key, estimate, deadline, waited), first
        except BaseException:
            if first:
                self._first_done(host, answered=False)
            raise

    def _admitted(
        self,
        call: Call,
        host: str,
        key: str,
        estimate: dict[str, int] | None,
        deadline: float | None,
        waited: bool,
    ) -> _Ticket:
        admit, path = self._core.admit, call.path
        # A call held at a window's end waits for the next (see ``_next_pause``); one that may not wait goes.
        guard = self.wait
        while True:
            outcome = admit(key, host, path, estimate, guard)
            if type(outcome) is _Ticket:
                return outcome
            pause = self._next_pause(key, host, outcome, deadline, waited)
            if pause is None:
                guard = False  # better a call that may cross the window than one past its timeout
                continue
            waited = True
            self._sleep(key, pause)

    async def _aadmit(self, call: Call, deadline: float | None) -> tuple[_Ticket, bool]:
        """``_admit`` for asyncio: waits with ``asyncio.sleep``; a store that waits on I/O is asked through
        ``acheck`` (``_atry``), never blocking the event loop."""
        host, key, estimate = self._asked(call)
        first, waited = await self._ago_first(host, key, deadline)
        try:
            return await self._aadmitted(call, host, key, estimate, deadline, waited), first
        except BaseException:
            if first:
                self._first_done(host, answered=False)
            raise

    async def _aadmitted(
        self,
        call: Call,
        host: str,
        key: str,
        estimate: dict[str, int] | None,
        deadline: float | None,
        waited: bool,
    ) -> _Ticket:
        waits_on_io = self.limiter._waits_on_io
        admit, path = self._core.admit, call.path
        guard = self.wait
        while True:
            if waits_on_io:
                outcome = await self._atry(key, host, path, estimate, guard)
            else:
                outcome = admit(key, host, path, estimate, guard)
            if type(outcome) is _Ticket:
                return outcome
            pause = self._next_pause(key, host, outcome, deadline, waited)
            if pause is None:
                guard = False  # better a call that may cross the window than one past its timeout
                continue
            waited = True
            await self._asleep(key, pause)

    async def _atry(
        self, key: str, host: str, path: str, estimate: dict[str, int] | None, guard: bool
    ) -> _Ticket | Decision | float:
        """The core's ``admit`` for a store whose decisions wait on I/O: each check awaited (``acheck``), never
        blocking the event loop nor taking a worker thread; the plan, the hold and the ticket are the core's."""
        plan = self._core.plan(key, host, path, estimate)
        steps = plan.steps
        ends = []
        for index, (group, units, is_budget) in enumerate(steps):
            try:
                # acheck's, uncounted when refused (the call looks again); cancelled while the store decides, it
                # gives back what its answer admits.
                decision = (await self.limiter._areserve(key, None, group, units, 0.0, counts_refusal=False)).decision
            except BaseException:
                # Cancelled (or the store failed): the steps spent before go back, off the loop and not awaited.
                if index:
                    off_loop_soon(asyncio.get_running_loop(), partial(self._give_back, key, steps[:index]))
                raise
            if not decision.allowed:
                await self._agive_back(key, steps[:index])
                return decision
            if is_budget and _filling(decision):
                ends.append(decision.reset_after)
        hold = self._core.crossing(host, ends) if guard else 0.0
        if hold:
            await self._agive_back(key, steps)
            return hold
        return self._core.ticket(key, host, plan, estimate)

    def _give_back(self, key: str, steps: list[tuple[str, int, bool]]) -> None:
        for group, units, _ in steps:
            self.limiter.reduce(key, group=group, n=units)

    async def _agive_back(self, key: str, steps: list[tuple[str, int, bool]]) -> None:
        """``_give_back``, which a cancellation of the awaiting task does not stop."""
        if steps:
            await off_loop_through(self.limiter, self._give_back, key, steps)

    def _sleep(self, key: str, seconds: float) -> None:
        time.sleep(seconds)
        self._core.count(key, waited=seconds)

    async def _asleep(self, key: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._core.count(key, waited=seconds)

    # --- the server's word -----------------------------------------------------------------------------------

    def _auto_group(
        self,
        host: str,
        budget: str,
        size: tuple[int, float, Literal["gcra", "fixed_window"]],
        made: tuple[str, int, float] | None,
    ) -> str | None:
        """The auto-group of ``budget`` at ``host``, made (or resized) for ``size``: ``limit`` per ``window`` with
        ``algorithm``; ``made``: the one made before, as ``_Outgoing.made_group`` says."""
        limit, window, algorithm = size
        if made is not None and made[1] == limit and made[2] == window:
            return made[0]
        if (host, budget, limit, window) in self._unmakeable:
            return None
        name = f"{host} {budget}"
        try:
            wanted = [Limit(Rate(limit, per=window), algorithm=algorithm)]  # a GCRA's burst: its limit
            if made is None and name not in self.limiter.groups:
                self.limiter.add_group(name, wanted)
            else:
                try:
                    self.limiter.add_group(name, wanted)
                except InvalidValue:  # the server's size changed (another process may have said so too)
                    self.limiter.update_rule(name, Rate(limit, per=window), burst=limit)
        except InvalidArgument as error:
            # Logged once: the server says the same on every reply, and the group is not tried again.
            self._unmakeable.add((host, budget, limit, window))
            log.warning("no group for %s's budget %r (%s per %ss): %s", host, budget, limit, window, error)
            return None
        self._core.made(host, budget, name, limit, window)
        return name

    def _corrections(self, ticket: _Ticket, reply: Reply) -> list[tuple[str, int]]:
        """(group, units more (+) or fewer (-) than spent) from ``spent``'s reading of the reply."""
        if self._spent is None:
            return []
        try:
            actual = self._spent(reply)
        except Exception:  # a body the callable cannot read corrects nothing
            log.exception("spent(...) failed on a response")
            return []
        if actual is None:
            return []
        if not isinstance(actual, Mapping):  # as a failure: the response is the caller's all the same
            log.error("spent(...) must return a mapping of budget names to units or None, got %r", actual)
            return []
        corrections = []
        budgets, estimate = ticket.budgets, ticket.estimate
        for budget, units in actual.items():
            group = budgets.get(budget)
            if group is None:  # a budget this call did not spend in
                continue
            if isinstance(units, bool) or not isinstance(units, int) or not 0 <= units < _MOST_UNITS:
                log.error("spent(...)[%r] must be a count of 0 to 2**63 - 1, got %r: not corrected", budget, units)
                continue
            difference = units - estimate.get(budget, 1)
            if difference:
                corrections.append((group, difference))
        return corrections

    def _settle(self, ticket: _Ticket, status: int, headers: Any, reply: Reply | None) -> float | None:
        """Takes in what the response says: the core reads the server's word from the client's raw ``headers``,
        counts it and caps the groups made; here, the groups to make, and ``spent``'s corrections (``reply``).
        The seconds to wait before a retry, or ``None`` when the response is the call's answer."""
        settled = self._core_settle(ticket, headers, status)
        if reply is not None:
            for group, units in self._corrections(ticket, reply):
                if units < 0:
                    self.limiter.reduce(ticket.key, group=group, n=-units)
                else:
                    self.limiter.check(ticket.key, group=group, cost=units)  # refused: the next word corrects it
        return None if settled is None else self._take_in(ticket, settled)

    def _take_in(self, ticket: _Ticket, settled: tuple[float | None, tuple[_Unmade, ...]]) -> float | None:
        """What the core left of a reply (``settle``'s ``(retry, unmade)``): makes the groups of the budgets the
        server stated first, and caps them; the seconds to wait before a retry, or ``None``."""
        retry, unmade = settled
        for budget, limit, window, remaining, reset_after, algorithm in unmade:
            made = self._core.made_group(ticket.host, budget)
            if made is not None:
                # Resized: the word first, at the size it is kept at, so that the key's window ends at the
                # server's reset, and what it used there is not carried into later windows at the new size.
                self._cap(ticket.key, made[0], remaining, reset_after, ticket.age())
            group = self._auto_group(ticket.host, budget, (limit, window, algorithm), made)
            if group is not None:
                self._cap(ticket.key, group, remaining, reset_after, ticket.age())
        return retry

    def _failed(self, ticket: _Ticket, error: BaseException) -> None:
        """A send raised ``error``: a call that never reached the server (no connection was made) gives back
        what it spent, which the server never counted."""
        if never_sent(error):
            self._core.unspend(ticket)

    def _cap(self, key: str, group: str, remaining: int, reset_after: float, age: float) -> None:
        try:
            self.limiter.cap(key, group=group, remaining=remaining, reset_after=reset_after, age=age)
        except InvalidArgument as error:
            log.warning("the server's word for %s in group %r was not applied: %s", key, group, error)

    # --- one call, start to end ------------------------------------------------------------------------------

    def _finish(
        self,
        ticket: _Ticket,
        settled: tuple[float | None, tuple[_Unmade, ...]],
        response: R,
        call: Callable[[Q], Call],
        send: Callable[[Q], R],
        request: Q,
        raw: Callable[[R], tuple[int, Any]],
        reply: Callable[[R], Reply],
        body: Callable[[R], bytes],
        close: Callable[[R], None],
        replayable: Callable[[Q], bool] | None = None,
    ) -> R:
        """The rest of a call sent the short way whose reply left work for Python (``settled``): groups to make,
        a retry (sent the long way, ``_send``)."""
        host = ticket.host
        retry = self._take_in(ticket, settled)
        # The call was admitted at once: its deadline runs from its admission.
        deadline = None if self.timeout is None else time.monotonic() - ticket.age() + self.timeout
        if retry is None or not _may_replay(replayable, request) or not self._retrying(host, 0, retry, deadline):
            return response
        close(response)
        self._sleep(host, retry)
        return self._send(call(request), send, request, raw, reply, body, close, deadline, 1, replayable=replayable)

    async def _afinish(
        self,
        ticket: _Ticket,
        settled: tuple[float | None, tuple[_Unmade, ...]],
        response: R,
        call: Callable[[Q], Awaitable[Call]],
        send: Callable[[Q], Awaitable[R]],
        request: Q,
        raw: Callable[[R], tuple[int, Any]],
        reply: Callable[[R], Reply],
        body: Callable[[R], Awaitable[bytes]],
        close: Callable[[R], Awaitable[None]],
        replayable: Callable[[Q], bool] | None = None,
    ) -> R:
        """``_finish`` for asyncio."""
        host = ticket.host
        retry = self._take_in(ticket, settled)
        deadline = None if self.timeout is None else time.monotonic() - ticket.age() + self.timeout
        if retry is None or not _may_replay(replayable, request) or not self._retrying(host, 0, retry, deadline):
            return response
        await close(response)
        await self._asleep(host, retry)
        return await self._asend(
            await call(request), send, request, raw, reply, body, close, deadline, 1, replayable=replayable
        )

    def _send(
        self,
        call: Call,
        send: Callable[[Q], R],
        request: Q,
        raw: Callable[[R], tuple[int, Any]],
        reply: Callable[[R], Reply],
        body: Callable[[R], bytes],
        close: Callable[[R], None],
        deadline: float | _Unset | None = _UNSET,
        attempt: int = 0,
        *,
        replayable: Callable[[Q], bool] | None = None,
    ) -> R:
        """Sends ``call`` (``send(request)``) when its turn comes, obeys the answer (``raw(response)``: its status
        and headers as the client keeps them, read in the core; ``reply(response)``, with ``body(response)`` as
        its content, when ``spent`` reads it), retries a 429 when ``replayable(request)`` (a body read once
        cannot be sent again: its 429 is returned as it came); the response. Functions and their argument, not
        closures: the adapters pass their bound methods, made for nothing per call. ``deadline`` and ``attempt``:
        a call that the short way began (``_finish``)."""
        if isinstance(deadline, _Unset):
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            ticket, first = self._admit(call, deadline)
            answered = False
            try:
                try:
                    response = send(request)
                except BaseException as error:
                    self._failed(ticket, error)
                    raise
                answered = True
                status, headers = raw(response)
                answer = None
                if self._reads_body:
                    answer = reply(response)
                    answer.content = body(response)
                retry = self._settle(ticket, status, headers, answer)
            finally:
                if first:  # answered, the host's calls go; else the next goes first
                    self._first_done(call.host, answered)
                elif answered:  # its calls may take the short way
                    self._heard_from(call.host)
            if (
                retry is None
                or not _may_replay(replayable, request)
                or not self._retrying(ticket.key, attempt, retry, deadline)
            ):
                return response
            attempt += 1
            close(response)
            self._sleep(ticket.key, retry)

    async def _asend(
        self,
        call: Call,
        send: Callable[[Q], Awaitable[R]],
        request: Q,
        raw: Callable[[R], tuple[int, Any]],
        reply: Callable[[R], Reply],
        body: Callable[[R], Awaitable[bytes]],
        close: Callable[[R], Awaitable[None]],
        deadline: float | _Unset | None = _UNSET,
        attempt: int = 0,
        *,
        replayable: Callable[[Q], bool] | None = None,
    ) -> R:
        """``_send`` for asyncio."""
        if isinstance(deadline, _Unset):
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            ticket, first = await self._aadmit(call, deadline)
            answered = False
            try:
                try:
                    response = await send(request)
                except BaseException as error:
                    self._failed(ticket, error)
                    raise
                answered = True
                status, headers = raw(response)
                answer = None
                if self._reads_body:
                    answer = reply(response)
                    answer.content = await body(response)
                if self.limiter._waits_on_io:  # a store's round trips off the event loop
                    retry = await asyncio.to_thread(self._settle, ticket, status, headers, answer)
                else:
                    retry = self._settle(ticket, status, headers, answer)
            finally:
                if first:
                    self._first_done(call.host, answered)
                elif answered:
                    self._heard_from(call.host)
            if (
                retry is None
                or not _may_replay(replayable, request)
                or not self._retrying(ticket.key, attempt, retry, deadline)
            ):
                return response
            attempt += 1
            await close(response)
            await self._asleep(ticket.key, retry)

    def _retrying(self, key: str, attempt: int, wait: float, deadline: float | None) -> bool:
        """Whether to send a throttled call again after ``wait`` (counted): not when told not to wait, after
        ``retries`` times, nor past the deadline."""
        if not self.wait or attempt >= self.retries or (deadline is not None and time.monotonic() + wait > deadline):
            return False
        self._core.count(key, retries=1)
        return True


#: Predicates of the clients' adapters (registered as each is imported): whether an error a send raised means no
#: connection was made, so the request never reached the server (``never_sent``).
_NOT_SENT: list[Callable[[BaseException], bool]] = []


def never_sent(error: BaseException) -> bool:
    """Whether ``error``, raised by a client's send, means the request never reached the server."""
    return any(check(error) for check in _NOT_SENT)


def _may_replay(replayable: Callable[[Q], bool] | None, request: Q) -> bool:
    """Whether ``request`` may be sent again (``replayable`` of the adapter, None: always)."""
    return replayable is None or replayable(request)


def _warn_of_permits(limiter: Limiter) -> None:
    """Logs the groups the limiter's rules route paths to whose concurrency limits a call through a transport
    does not hold: a transport spends rates (its wait is a sleep until the next unit, where a permit frees only
    when a call ends), so a group's concurrency and adaptive limits pace no outgoing call."""
    from ratekeeper.limiter import NAMED_ONLY

    for rule in limiter.rules:
        if rule.pattern != NAMED_ONLY and any(
            limit.concurrency is not None or limit.adaptive is not None for limit in rule.limits
        ):
            log.warning(
                "group %r has concurrency limits, which calls through an outgoing transport do not hold: only its "
                "rates pace them (hold permits with Limiter.concurrent around such calls)",
                rule.group,
            )


class OutgoingOptions(TypedDict, total=False):
    """The options a transport passes to [`Outgoing`][ratekeeper.httpx.Outgoing], for type checkers."""

    key: KeyFunction | None
    api_key_header: str | None
    groups: Mapping[str, str] | None
    auto_groups: bool
    window: float
    cost: CostFunction | None
    spent: SpentFunction | None
    dialect: str | None
    wait: bool
    timeout: float | None
    retries: int
    obey: bool


def engine_of(limiter: Limiter | Outgoing, options: Mapping[str, Any]) -> Outgoing:
    """The ``Outgoing`` a transport uses: the one given, or one made of ``limiter`` and ``options``."""
    if isinstance(limiter, Outgoing):
        if options:
            raise InvalidValue(next(iter(options)), "give options to Outgoing(...), or a limiter and options here")
        return limiter
    unknown = [name for name in options if name not in OutgoingOptions.__annotations__]
    if unknown:
        known = ", ".join(OutgoingOptions.__annotations__)
        raise InvalidType(unknown[0], f"is not an option of the transports (they take {known})")
    return Outgoing(limiter, **options)


def joined_headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Request headers as a ``Call`` holds them: lower-case names, repeated ones joined with ``", "``."""
    headers: dict[str, str] = {}
    for name, value in pairs:
        name = name.lower()
        headers[name] = value if name not in headers else f"{headers[name]}, {value}"
    return headers


def host_of(host: str, port: int | None, default_port: int | None) -> str:
    """``host`` with ``:port`` when the port is not the scheme's default (an IPv6 address in brackets then, as in
    a URL: ``[::1]:8080``, which ``::1:8080`` would not tell apart from ``[::1:8080]``)."""
    if port is None or port == default_port:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_seconds(name: str, value: object, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(name, f"must be a number of seconds, got {type(value).__name__}")
    if not 0 < value < math.inf:
        raise InvalidValue(name, f"must be a positive number of seconds, got {value}")
    try:
        float(value)
    except OverflowError:
        raise InvalidValue(
            name, f"must be a number of seconds a float holds, got an int of {len(str(value))} digits"
        ) from None


def _checked_groups(limiter: Limiter, groups: Mapping[str, str] | None) -> dict[str, str]:
    if groups is None:
        return {}
    if not isinstance(groups, Mapping):
        raise InvalidType("groups", f"must be a mapping of budget names to group names, got {type(groups).__name__}")
    rules = {rule.group: rule for rule in limiter.rules}
    checked = {}
    for budget, group in groups.items():
        if not isinstance(budget, str) or not isinstance(group, str):
            raise InvalidType(("groups", str(budget)), "budget and group names must be str")
        rule = rules.get(group)
        if rule is None:
            raise InvalidValue(("groups", budget), f"no group {group!r} in the limiter (add it with add_group)")
        if not any(limit.algorithm in ("fixed_window", "gcra") for limit in rule.limits):
            raise InvalidValue(
                ("groups", budget),
                f"group {group!r} has no fixed_window or gcra limit, which the server's word caps; e.g. "
                f'rk.Limit("5000/hour", algorithm="fixed_window") (GitHub), rk.Limit("500/min") (OpenAI)',
            )
        checked[budget] = group
    return checked
