"""What the web integrations are given and answer: their options, the IETF RateLimit fields, ``Retry-After``,
the 429 body.

Shared by every web integration; the lifecycle of a request (admit, fields, body, release, settle, refusal) is
``ratekeeper._gatekeeper``'s. The fields follow draft-ietf-httpapi-ratelimit-headers-10: both are Structured Field
Lists whose members are quoted policy names with parameters::

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

import email.utils
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from ratekeeper._core import Decision, Limit
from ratekeeper._errors import InvalidArgument, InvalidType, InvalidValue
from ratekeeper.keys import KeyCallable, checked_key, client_ip

if TYPE_CHECKING:
    from ratekeeper.limiter import Limiter

__all__ = [
    "HeaderOptions",
    "Penalty",
    "WebOptions",
    "WebSettings",
    "as_instants",
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
    concurrency_status: int


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
    #: The status of a refusal by a concurrency or adaptive limit: 429, or 503 (the server sheds load;
    #: nothing is wrong with the client's rate).
    concurrency_status: int = 429

    def __post_init__(self) -> None:
        check_integration(self.limiter, self.mode, self.max_delay)
        if self.on_missing_key not in ("refuse", "anonymous"):
            raise InvalidValue("on_missing_key", f"must be 'refuse' or 'anonymous', got {self.on_missing_key!r}")
        if self.missing_key_status not in (401, 403, 429):
            raise InvalidValue("missing_key_status", f"must be 401, 403 or 429, got {self.missing_key_status!r}")
        if self.concurrency_status not in (429, 503) or isinstance(self.concurrency_status, bool):
            raise InvalidValue("concurrency_status", f"must be 429 or 503, got {self.concurrency_status!r}")
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


def refusal_body(decision: Decision, status: int = 429) -> bytes:
    """The JSON body of a refusal: ``{"detail": ..., "status": 429, "retry_after": seconds}``
    (``retry_after`` is ``null`` when the request can never pass, e.g. a cost above the burst)."""
    retry = None if math.isinf(decision.retry_after) else _seconds(decision.retry_after)
    return _refusal_json(decision.refused_by == "concurrency", retry, status)


@functools.lru_cache(maxsize=1024)
def _refusal_json(by_concurrency: bool, retry: int | None, status: int = 429) -> bytes:
    # Cached: a flood of refusals asks for the same few bodies, and json.dumps costs more than the decision.
    if by_concurrency:
        detail = "Too many concurrent requests"
    elif retry is None:
        detail = "Rate limit exceeded: this request is larger than the limit allows"
    else:
        detail = "Rate limit exceeded"
    return json.dumps({"detail": detail, "status": status, "retry_after": retry}).encode()


@functools.lru_cache(maxsize=8)
def missing_key_body(status: int) -> bytes:
    """The JSON body for a request whose key function found no key."""
    return json.dumps({"detail": "This request carries no key the rate limiter can use", "status": status}).encode()


def as_instants(fields: Sequence[tuple[Any, Any]], options: HeaderOptions) -> Sequence[tuple[Any, Any]]:
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
