"""What the web integrations answer: the IETF RateLimit fields, ``Retry-After``, the 429 body.

Shared by [`ratekeeper.asgi`][ratekeeper.asgi], [`ratekeeper.flask`][ratekeeper.flask] and
[`ratekeeper.fastapi`][ratekeeper.fastapi], with the one decision path they all take (``Gatekeeper``): the adapters read
the request (key, path, cost) and write the response; what is decided, and what is owed when the response ends, is
decided here. The fields follow draft-ietf-httpapi-ratelimit-headers-10: both are Structured Field Lists whose members
are quoted
policy names with parameters::

    RateLimit-Policy: "api";q=100;w=60
    RateLimit: "api";r=42;t=18

``q`` is the group's quota (its first rate limit's burst, or its permits with ``qu="concurrent-requests"``),
``w`` its window in whole seconds, ``r`` what the key has left, and ``t`` the seconds until it may make one
more request (rounded up; on a refusal, when the refused request would pass). The core serializes them
(``Decision._fields``, ``_raw_fields``, ``Limiter._admit_web``: strings built once and reused while a group's
numbers repeat). Later drafts rename fields: ``HeaderOptions.draft`` names the serializer, so a new one can
be added beside it.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from ratekeeper._core import Decision, Limit, _Take
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue, RateLimited
from ratekeeper.keys import KeyCallable, checked_key, client_ip

if TYPE_CHECKING:
    from ratekeeper.limiter import Limiter

__all__ = [
    "Admission",
    "Gatekeeper",
    "HeaderOptions",
    "Penalty",
    "WebOptions",
    "WebSettings",
    "check_integration",
    "declared_at",
    "declaring",
    "missing_key_body",
    "raw_response_headers",
    "refusal_body",
    "response_headers",
]

Draft = Literal["draft-10"]
Factory = TypeVar("Factory", bound=Callable[..., Any])

log = logging.getLogger("ratekeeper")
#: One record per refusal, when an integration is asked for them (``log_refusals=True``).
refusals_log = logging.getLogger("ratekeeper.refusals")


@dataclass(frozen=True)
class HeaderOptions:
    """Which rate-limit fields a response carries.

    Attributes:
        ietf: the ``RateLimit-Policy`` and ``RateLimit`` fields.
        legacy: also ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset``.
        on_allowed: the fields on allowed responses too, not only on 429s.
        draft: the version of the IETF draft the fields follow.
        reset: what ``X-RateLimit-Reset`` holds: ``"seconds"`` from now (default, as the IETF ``t``), or
            ``"epoch"``, the Unix time of the reset, as Flask-Limiter, slowapi and django-ratelimit's
            users' clients read it.
        retry_after: what ``Retry-After`` holds: ``"seconds"`` (default, delta-seconds) or
            ``"http-date"``, the instant as an HTTP date (RFC 9110 allows both; Flask-Limiter's
            ``RATELIMIT_HEADER_RETRY_AFTER_VALUE``).
    """

    ietf: bool = True
    legacy: bool = False
    on_allowed: bool = True
    draft: Draft = "draft-10"
    reset: Literal["seconds", "epoch"] = "seconds"
    retry_after: Literal["seconds", "http-date"] = "seconds"

    def __post_init__(self) -> None:
        for name in ("ietf", "legacy", "on_allowed"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidType(name, f"must be a bool, got {type(getattr(self, name)).__name__}")
        if self.draft != "draft-10":
            raise InvalidValue("draft", f"unknown draft {self.draft!r}; supported: 'draft-10'")
        if self.reset not in ("seconds", "epoch"):
            raise InvalidValue("reset", f"must be 'seconds' or 'epoch', got {self.reset!r}")
        if self.retry_after not in ("seconds", "http-date"):
            raise InvalidValue("retry_after", f"must be 'seconds' or 'http-date', got {self.retry_after!r}")

    @property
    def _rewritten(self) -> bool:
        """Whether a field the core writes in seconds from now is rewritten as an instant: an epoch
        ``X-RateLimit-Reset``, an HTTP-date ``Retry-After``."""
        return (self.legacy and self.reset == "epoch") or self.retry_after == "http-date"


@dataclass(frozen=True)
class Penalty:
    """A key refused ``breaches`` times within ``within`` seconds is refused for ``block`` seconds,
    whatever its rates say: a client that keeps hammering past its limit is shut out for a while.

    Kept in two groups of the integration's limiter (named after the numbers), so it holds in every
    store: a penalty earned on one worker or machine applies on all of them.

    Attributes:
        breaches: refusals that earn the penalty (at least 1).
        within: the seconds they must fall within.
        block: the seconds the key is then refused; its ``Retry-After`` counts down to the end.
    """

    breaches: int = 3
    within: float = 60.0
    block: float = 600.0

    def __post_init__(self) -> None:
        if isinstance(self.breaches, bool) or not isinstance(self.breaches, int):
            raise InvalidType(("penalty", "breaches"), f"must be an int, got {type(self.breaches).__name__}")
        if self.breaches < 1:
            raise InvalidValue(("penalty", "breaches"), f"must be at least 1, got {self.breaches}")
        for name in ("within", "block"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidType(("penalty", name), f"must be a number of seconds, got {type(value).__name__}")
            if not 0 < value <= 10 * 366 * 86400:
                message = f"must be a positive number of seconds up to ten years, got {value!r}"
                raise InvalidValue(("penalty", name), message)

    @property
    def _breaches_group(self) -> str:
        return f"ratekeeper.penalty.breaches.{self.breaches}/{self.within:g}s"

    @property
    def _blocked_group(self) -> str:
        return f"ratekeeper.penalty.blocked.{self.block:g}s"

    def _groups(self) -> tuple[tuple[str, list[Limit]], tuple[str, list[Limit]]]:
        """The two groups: the breaches counted in a sliding log, and the block (one admission a block)."""
        breaches = Limit(f"{self.breaches}/{self.within!r}s", algorithm="sliding_log")
        blocked = Limit(f"1/{self.block!r}s", algorithm="sliding_log")
        return (self._breaches_group, [breaches]), (self._blocked_group, [blocked])


class WebSettings(TypedDict, total=False):
    """The keyword arguments the ASGI middleware and the Flask extension share; ``WebOptions`` checks
    them and gives the defaults."""

    key: KeyCallable | None
    mode: Literal["refuse", "delay"]
    max_delay: float
    shadow: bool
    headers: HeaderOptions | None
    on_missing_key: Literal["refuse", "anonymous"]
    missing_key_status: int
    anonymous_key: str
    cost: Callable[[Any], int] | None
    refund_when: Callable[[int], bool] | None
    log_refusals: bool
    penalty: Penalty | None


@dataclass(frozen=True)
class WebOptions:
    """What the ASGI middleware and the Flask extension share: checked and defaulted here, once.

    See [`ratekeeper.asgi.RateLimitMiddleware`][ratekeeper.asgi.RateLimitMiddleware] for what each means.

    Raises:
        InvalidValue, InvalidType: a bad option, named by ``loc``.
    """

    limiter: Limiter
    key: KeyCallable | None = None
    mode: Literal["refuse", "delay"] = "refuse"
    max_delay: float = 5.0
    shadow: bool = False
    headers: HeaderOptions | None = None
    on_missing_key: Literal["refuse", "anonymous"] = "refuse"
    missing_key_status: int = 429
    anonymous_key: str = "anonymous"
    cost: Callable[[Any], int] | None = None
    refund_when: Callable[[int], bool] | None = None
    log_refusals: bool = False
    penalty: Penalty | None = None

    def __post_init__(self) -> None:
        check_integration(self.limiter, self.mode, self.max_delay)
        if self.on_missing_key not in ("refuse", "anonymous"):
            raise InvalidValue("on_missing_key", f"must be 'refuse' or 'anonymous', got {self.on_missing_key!r}")
        if self.missing_key_status not in (401, 403, 429):
            raise InvalidValue("missing_key_status", f"must be 401, 403 or 429, got {self.missing_key_status!r}")
        if self.key is not None:
            checked_key(self.key)
        for name in ("cost", "refund_when"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise InvalidType(name, f"must be callable, got {type(value).__name__}")
        if self.key is None:
            object.__setattr__(self, "key", client_ip())
        if self.headers is None:
            object.__setattr__(self, "headers", HeaderOptions())
        elif not isinstance(self.headers, HeaderOptions):
            raise InvalidType("headers", f"must be a HeaderOptions, got {type(self.headers).__name__}")
        for name in ("shadow", "log_refusals"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidType(name, f"must be a bool, got {type(getattr(self, name)).__name__}")
        if self.penalty is not None and not isinstance(self.penalty, Penalty):
            raise InvalidType("penalty", f"must be a ratekeeper.Penalty or None, got {type(self.penalty).__name__}")
        object.__setattr__(self, "max_delay", float(self.max_delay))

    @property
    def fields(self) -> HeaderOptions:
        assert self.headers is not None
        return self.headers

    @property
    def key_function(self) -> KeyCallable:
        assert self.key is not None
        return self.key


def declared_at(error: InvalidArgument) -> InvalidArgument:
    """``error`` told where the user's code gave what it names: the file and line of the first caller outside
    ratekeeper (``app.py:14: limits[0]: "10/minn" is not a rate ...``), for a mistake in a decorator's
    arguments (``@limit("10/minn")``, ``limits.route(...)``), made before the view or route it limits is
    known. Unchanged when it names a file already, or when no such caller is found."""
    if error.file is not None:
        return error
    frame = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).partition(".")[0] == "ratekeeper":
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return error
    path = frame.f_code.co_filename
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        relative = path
    shown = relative if not relative.startswith(os.pardir) else path
    return error.in_file(f"{shown}:{frame.f_lineno}")


def declaring(function: Factory) -> Factory:
    """``function``, a decorator factory (``route(...)``, ``limit(...)``), whose errors tell where it was
    called (``declared_at``): the view or route it will limit is not known yet, its line is."""

    @functools.wraps(function)
    def declare(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except InvalidArgument as error:
            raise declared_at(error) from None

    return declare  # type: ignore[return-value]


def check_integration(limiter: object, mode: str, max_delay: float) -> None:
    """The options every integration takes, checked alike.

    Raises:
        InvalidType: ``limiter`` is not a ratekeeper Limiter.
        InvalidValue: an unknown ``mode`` or a negative ``max_delay``.
    """
    from ratekeeper.limiter import Limiter

    if not isinstance(limiter, Limiter):
        raise InvalidType("limiter", f"must be a ratekeeper.Limiter, got {type(limiter).__name__}")
    if mode not in ("refuse", "delay"):
        raise InvalidValue("mode", f"must be 'refuse' or 'delay', got {mode!r}")
    if isinstance(max_delay, bool) or not isinstance(max_delay, (int, float)) or max_delay < 0:
        raise InvalidValue("max_delay", f"must be a number of seconds >= 0, got {max_delay!r}")


def _seconds(value: float) -> int:
    """Whole seconds, rounded up, for a field or Retry-After (a client waiting that long is served)."""
    return max(0, math.ceil(value))


def response_headers(decision: Decision, options: HeaderOptions) -> Sequence[tuple[str, str]]:
    """The fields for a response to a request the limiter decided (none for exempt or unrouted ones).

    A refusal also carries ``Retry-After`` (never earlier than ``t``), unless it can never pass. The
    draft-10 serializer is the core's (``Decision._fields``): one build of the strings, no Python per field.
    """
    if decision.allowed and not options.on_allowed:
        return ()
    return decision._fields(options.ietf, options.legacy)


def raw_response_headers(decision: Decision, options: HeaderOptions) -> Sequence[tuple[bytes, bytes]]:
    """``response_headers`` as lower-case bytes pairs, as an ASGI message carries them."""
    if decision.allowed and not options.on_allowed:
        return ()
    return decision._raw_fields(options.ietf, options.legacy)


def refusal_body(decision: Decision) -> bytes:
    """The JSON body of a 429: ``{"detail": ..., "status": 429, "retry_after": seconds}``
    (``retry_after`` is ``null`` when the request can never pass, e.g. a cost above the burst)."""
    retry = None if math.isinf(decision.retry_after) else _seconds(decision.retry_after)
    return _refusal_json(decision.refused_by == "concurrency", retry)


@functools.lru_cache(maxsize=1024)
def _refusal_json(by_concurrency: bool, retry: int | None) -> bytes:
    # Cached: a flood of refusals asks for the same few bodies, and json.dumps costs more than the decision.
    if by_concurrency:
        detail = "Too many concurrent requests"
    elif retry is None:
        detail = "Rate limit exceeded: this request is larger than the limit allows"
    else:
        detail = "Rate limit exceeded"
    return json.dumps({"detail": detail, "status": 429, "retry_after": retry}).encode()


@functools.lru_cache(maxsize=8)
def missing_key_body(status: int) -> bytes:
    """The JSON body for a request whose key function found no key."""
    return json.dumps({"detail": "This request carries no key the rate limiter can use", "status": status}).encode()


class Admission:
    """What ``Gatekeeper`` decided for one request, and what is owed when its response ends.

    Attributes:
        status: 0 to serve the request; else the status to answer it with (429, or the missing key's).
        fields: the headers of that answer, or, when served, the rate-limit fields to add to the response:
            ``(name, value)`` str pairs, or lower-case bytes pairs from a ``raw`` ``Gatekeeper``.
        body: the JSON body of the answer (empty when served).
        decision: the limiter's decision; ``None`` when nothing was decided (no key: unrouted or refused).
        permits: whether concurrency permits are held (``Gatekeeper.release`` gives them back once).
    """

    __slots__ = ("body", "cost", "decision", "fields", "group", "path", "peer", "permits", "status")

    def __init__(
        self,
        status: int,
        fields: Sequence[tuple[Any, Any]],
        body: bytes = b"",
        decision: Decision | None = None,
        route: tuple[str, str | None, str | None, int] = ("", None, None, 0),
    ) -> None:
        self.status, self.fields, self.body, self.decision = status, fields, body, decision
        self.peer, self.path, self.group, self.cost = route
        self.permits = decision is not None and decision.permits_held

    @property
    def refused_by_limit(self) -> bool:
        """Refused by the limiter's decision (not for a missing key): what an ``on_refused`` hook answers."""
        return self.status != 0 and self.decision is not None


class Gatekeeper:
    """The web decision path every adapter takes: ``admit`` before the app, ``release`` of the
    permits when the work is done, ``settle`` (``refund_when``) once the response's status is known.

    The ``a``-prefixed twins are for an event loop: a backend deciding in Redis is awaited, or called on a
    thread, never on the loop. This is the one place the web integrations call the limiter's private
    methods.
    """

    __slots__ = ("admit_quick", "limiter", "options", "quick", "raw")

    def __init__(self, options: WebOptions, *, raw: bool = False) -> None:
        self.options = options
        self.limiter = options.limiter
        self.raw = raw  # the fields as ASGI's bytes pairs, not str pairs
        #: Whether :attr:`admit_quick` may stand for :meth:`admit` of a request with a key: refuse mode (delay
        #: mode waits in :meth:`admit`), cost 1 (no ``cost=``), nothing to settle after (no ``refund_when``).
        self.quick = (
            options.mode == "refuse"
            and options.cost is None
            and options.refund_when is None
            and options.penalty is None
            and not options.fields._rewritten
        )
        fields = options.fields
        #: ``admit_quick(peer, path)``: :meth:`admit` of a request with a key on ``path`` at cost 1 (when
        #: :attr:`quick`), for an adapter's hot path. A request allowed with no permits held owes nothing
        #: but its response's fields, and gets them (a tuple; no Decision or Admission is made); any other
        #: gets its Decision, for :meth:`admission`. A partial of the core's method: no Python frame.
        self.admit_quick: Callable[[str, str], tuple[tuple[Any, Any], ...] | Decision] = functools.partial(
            self.limiter._admit_web, fields.ietf and fields.on_allowed, fields.legacy and fields.on_allowed, raw
        )

    def fields(self, decision: Decision) -> Sequence[tuple[Any, Any]]:
        """The rate-limit fields of a response to ``decision``, in this gatekeeper's form."""
        serialize = raw_response_headers if self.raw else response_headers
        fields = serialize(decision, self.options.fields)
        return _as_instants(fields, self.options.fields) if self.options.fields._rewritten else fields

    def admission(self, decision: Decision, peer: str, path: str) -> Admission:
        """The admission of a request with a key on ``path`` that ``admit_quick`` gave a ``decision``."""
        return self._admission(decision, (peer, path, None, 1))

    def admit(self, peer: str | None, path: str, group: str | None = None, cost: int = 1) -> Admission:
        """Decides a request of ``peer`` (``None``: its key function found none) on ``path``, or in the
        per-route ``group`` when given."""
        who = peer if peer is not None else self._without_key(path, group)
        if isinstance(who, Admission):
            return who
        route = None if group is not None else path
        blocked = self._blocked(who) if self.options.penalty is not None else None
        if blocked is not None:
            return self._admission(blocked, (who, route, group, cost))
        if self.options.mode == "refuse":
            decision = self.limiter._acquire(who, route, group=group, cost=cost, take=_Take.BOTH)
        else:
            try:
                decision = self.limiter._throttle_permits(who, route, group, cost, self.options.max_delay)
            except RateLimited as refused:
                decision = refused.decision
        if self.options.penalty is not None and not decision.allowed and decision.group is not None:
            self._breached(who)
        return self._admission(decision, (who, route, group, cost))

    async def aadmit(self, peer: str | None, path: str, group: str | None = None, cost: int = 1) -> Admission:
        """``admit`` on an event loop: Redis answers while the loop serves other requests."""
        who = peer if peer is not None else self._without_key(path, group)
        if isinstance(who, Admission):
            return who
        route = None if group is not None else path
        limiter = self.limiter
        penalty = self.options.penalty is not None
        if penalty:
            blocked = await self._ablocked(who)
            if blocked is not None:
                return self._admission(blocked, (who, route, group, cost))
        if self.options.mode == "delay":
            try:
                decision = await limiter._athrottle_permits(who, route, group, cost, self.options.max_delay)
            except RateLimited as refused:
                decision = refused.decision
        elif not limiter._waits_on_io:  # a local decision: no coroutine, no thread hop
            decision = limiter._acquire(who, route, group=group, cost=cost, take=_Take.BOTH)
        else:
            decision = (await limiter._areserve(who, route, group, cost, 0.0, _Take.BOTH)).decision
        if penalty and not decision.allowed and decision.group is not None:
            await self._off_loop(self._breached, who)
        return self._admission(decision, (who, route, group, cost))

    def _penalty_groups(self) -> Penalty:
        """The penalty, its two groups in the limiter (added at first use, and again after a reload
        that replaced the limiter's groups)."""
        penalty = self.options.penalty
        assert penalty is not None
        for name, limits in penalty._groups():
            if name not in self.limiter.groups:
                self.limiter.add_group(name, limits)
        return penalty

    def _blocked(self, peer: str) -> Decision | None:
        """The refusal of a key serving its penalty, else ``None``. Looks; counts nothing."""
        penalty = self.options.penalty
        assert penalty is not None
        try:
            look = self.limiter.peek(peer, group=penalty._blocked_group)
        except InvalidValue:  # not added yet, or a reload replaced the groups
            look = self.limiter.peek(peer, group=self._penalty_groups()._blocked_group)
        return None if look.allowed else look

    def _breached(self, peer: str) -> None:
        """Counts a refusal of ``peer``; the one that makes ``breaches`` within the window starts its block."""
        penalty = self._penalty_groups()
        self.limiter.allow(peer, group=penalty._breaches_group)
        if not self.limiter.peek(peer, group=penalty._breaches_group).allowed:
            self.limiter.allow(peer, group=penalty._blocked_group)
            refusals_log.warning(
                "ratekeeper: %r refused %d times within %gs: blocked for %gs",
                peer,
                penalty.breaches,
                penalty.within,
                penalty.block,
                extra={"peer": peer, "penalty": penalty},
            )

    async def _ablocked(self, peer: str) -> Decision | None:
        blocked: Decision | None = await self._off_loop(self._blocked, peer)
        return blocked

    async def _off_loop(self, call: Callable[[str], Any], peer: str) -> Any:
        """``call(peer)`` here when the limiter decides in this process, else on a thread (Redis)."""
        if not self.limiter._waits_on_io:
            return call(peer)
        return await asyncio.to_thread(call, peer)

    def _without_key(self, path: str, group: str | None) -> Admission | str:
        """The admission of a request without a key, or the anonymous key to decide it under."""
        if group is None and self.limiter.resolve(self.options.anonymous_key, path) is None:
            return _NOT_LIMITED  # exempt or unrouted: no key needed
        if self.options.on_missing_key == "anonymous":
            return self.options.anonymous_key
        status = self.options.missing_key_status
        return Admission(status, (), missing_key_body(status))

    def _admission(self, decision: Decision, route: tuple[str, str | None, str | None, int]) -> Admission:
        fields = self.fields(decision)
        if decision.allowed:
            return Admission(0, fields, decision=decision, route=route)
        if not self.options.shadow:
            if self.options.log_refusals:
                _log_refusal(decision, route)
            return Admission(429, fields, refusal_body(decision), decision, route)
        log.info("ratekeeper shadow mode: would refuse %r on %s (group %r)", route[0], route[1], decision.group)
        # Served: the fields say what the limiter decided, without a Retry-After (nothing to retry).
        served = [field for field in fields if field[0] not in ("Retry-After", b"retry-after")]
        return Admission(0, served, decision=decision, route=route)

    def release(self, admission: Admission) -> None:
        """Gives the request's concurrency permits back, unless that was done already."""
        if admission.permits:
            admission.permits = False
            self.limiter._release(admission.peer, admission.path, group=admission.group, cost=admission.cost)

    async def arelease(self, admission: Admission) -> None:
        """``release`` on an event loop: a backend deciding in Redis is called on a thread."""
        if not admission.permits:
            return
        if not self.limiter._waits_on_io:
            self.release(admission)
            return
        admission.permits = False
        limiter = self.limiter
        await asyncio.to_thread(
            functools.partial(
                limiter._release, admission.peer, admission.path, group=admission.group, cost=admission.cost
            )
        )

    def _refunds(self, admission: Admission, status: int) -> bool:
        refund_when = self.options.refund_when
        decision = admission.decision
        return refund_when is not None and decision is not None and decision.allowed and refund_when(status)

    def settle(self, admission: Admission, status: int) -> None:
        """Gives the request back when ``refund_when`` says its response's ``status`` should not count."""
        if self._refunds(admission, status):
            self.limiter.reduce(admission.peer, admission.path, admission.cost, group=admission.group)

    async def asettle(self, admission: Admission, status: int) -> None:
        """``settle`` on an event loop: a backend deciding in Redis is called on a thread."""
        if not self._refunds(admission, status):
            return
        limiter = self.limiter
        if not limiter._waits_on_io:
            limiter.reduce(admission.peer, admission.path, admission.cost, group=admission.group)
        else:
            await asyncio.to_thread(
                limiter.reduce, admission.peer, admission.path, admission.cost, group=admission.group
            )


def _log_refusal(decision: Decision, route: tuple[str, str | None, str | None, int]) -> None:
    peer, path, group = route[0], route[1], decision.group
    retry = decision.retry_after
    refusals_log.warning(
        "ratekeeper: refused %r on %s (group %r), retry after %.3fs",
        peer,
        path if path is not None else f"group {route[2]!r}",
        group,
        retry,
        extra={"peer": peer, "path": path, "group": group, "retry_after": retry},
    )


def _as_instants(fields: Sequence[tuple[Any, Any]], options: HeaderOptions) -> Sequence[tuple[Any, Any]]:
    """``fields`` with the seconds from now that ``options`` asks as instants: ``X-RateLimit-Reset`` as a
    Unix time, ``Retry-After`` as an HTTP date."""
    now = int(time.time())
    out: list[tuple[Any, Any]] = []
    for name, value in fields:
        raw = isinstance(name, bytes)
        lower = name.decode("latin-1") if raw else name.lower()
        if lower == "x-ratelimit-reset" and options.reset == "epoch":
            value = str(now + int(value))
        elif lower == "retry-after" and options.retry_after == "http-date":
            value = email.utils.formatdate(now + int(value), usegmt=True)
        else:
            out.append((name, value))
            continue
        out.append((name, value.encode("latin-1") if raw else value))
    return out


# A request needing no decision (no key, on a path no rule limits): served as it is.
_NOT_LIMITED = Admission(0, ())
