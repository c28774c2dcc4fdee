"""What the web integrations answer: the IETF RateLimit fields, ``Retry-After``, the 429 body.

Shared by :mod:`ratekeeper.asgi` and :mod:`ratekeeper.flask`. The fields follow
draft-ietf-httpapi-ratelimit-headers-10: both are Structured Field Lists whose members are quoted
policy names with parameters::

    RateLimit-Policy: "api";q=100;w=60
    RateLimit: "api";r=42;t=18

``q`` is the group's quota (its first rate limit's burst, or its permits with ``qu="concurrent-requests"``),
``w`` its window in whole seconds, ``r`` what the key has left, and ``t`` the seconds until it may make one
more request (rounded up; on a refusal, when the refused request would pass). Later drafts rename fields:
the serializer is chosen by ``draft`` so a new one can be added beside it.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ratekeeper._core import Decision
from ratekeeper._errors import InvalidType, InvalidValue
from ratekeeper.keys import KeyCallable, client_ip

if TYPE_CHECKING:
    from ratekeeper.limiter import Limiter

__all__ = [
    "HeaderOptions",
    "WebOptions",
    "check_integration",
    "missing_key_body",
    "refusal_body",
    "response_headers",
]

Draft = Literal["draft-10"]


@dataclass(frozen=True)
class HeaderOptions:
    """Which rate-limit fields a response carries.

    Attributes:
        ietf: the ``RateLimit-Policy`` and ``RateLimit`` fields.
        legacy: also ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset``.
        on_allowed: the fields on allowed responses too, not only on 429s.
        draft: the version of the IETF draft the fields follow.
    """

    ietf: bool = True
    legacy: bool = False
    on_allowed: bool = True
    draft: Draft = "draft-10"

    def __post_init__(self) -> None:
        for name in ("ietf", "legacy", "on_allowed"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidType(name, f"must be a bool, got {type(getattr(self, name)).__name__}")
        if self.draft != "draft-10":
            raise InvalidValue("draft", f"unknown draft {self.draft!r}; supported: 'draft-10'")


@dataclass(frozen=True)
class WebOptions:
    """What the ASGI middleware and the Flask extension share: checked and defaulted here, once.

    See :class:`ratekeeper.asgi.RateLimitMiddleware` for what each means.

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

    def __post_init__(self) -> None:
        check_integration(self.limiter, self.mode, self.max_delay)
        if self.on_missing_key not in ("refuse", "anonymous"):
            raise InvalidValue("on_missing_key", f"must be 'refuse' or 'anonymous', got {self.on_missing_key!r}")
        if self.missing_key_status not in (401, 403, 429):
            raise InvalidValue("missing_key_status", f"must be 401, 403 or 429, got {self.missing_key_status!r}")
        for name in ("key", "cost", "refund_when"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise InvalidType(name, f"must be callable, got {type(value).__name__}")
        if self.key is None:
            object.__setattr__(self, "key", client_ip())
        if self.headers is None:
            object.__setattr__(self, "headers", HeaderOptions())
        elif not isinstance(self.headers, HeaderOptions):
            raise InvalidType("headers", f"must be a HeaderOptions, got {type(self.headers).__name__}")
        if not isinstance(self.shadow, bool):
            raise InvalidType("shadow", f"must be a bool, got {type(self.shadow).__name__}")
        object.__setattr__(self, "max_delay", float(self.max_delay))

    @property
    def fields(self) -> HeaderOptions:
        assert self.headers is not None
        return self.headers

    @property
    def key_function(self) -> KeyCallable:
        assert self.key is not None
        return self.key


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


@functools.lru_cache(maxsize=1024)
@functools.lru_cache(maxsize=4096)
def _sf_string(text: str) -> str:
    """A Structured Field String: printable ASCII in quotes, with ``\\`` and ``"`` escaped (cached: a
    handful of group names, on every response)."""
    safe = "".join(c if " " <= c <= "~" else "?" for c in text)
    return '"' + safe.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _seconds(value: float) -> int:
    """Whole seconds, rounded up, for a field or Retry-After (a client waiting that long is served)."""
    return max(0, math.ceil(value))


@functools.lru_cache(maxsize=4096)
def _policy_field(group: str, limit: int, window: float | None) -> tuple[str, str]:
    """The group's Structured Field name and its ``RateLimit-Policy`` value (cached: the same few on every
    response)."""
    name = _sf_string(group)
    if window is None:
        return name, f'{name};q={limit};qu="concurrent-requests"'
    return name, f"{name};q={limit};w={_seconds(window)}"


def response_headers(decision: Decision, options: HeaderOptions) -> list[tuple[str, str]]:
    """The fields for a response to a request the limiter decided (none for exempt or unrouted ones).

    A refusal also carries ``Retry-After`` (never earlier than ``t``), unless it can never pass.
    """
    headers: list[tuple[str, str]] = []
    refused = not decision.allowed
    if refused and not math.isinf(decision.retry_after):
        headers.append(("Retry-After", str(_seconds(decision.retry_after))))
    if decision.group is None or decision.limit is None or decision.remaining is None:
        return headers
    if not refused and not options.on_allowed:
        return headers
    wait = decision.retry_after if refused else decision.next_after
    reset = None if math.isinf(wait) else _seconds(wait)
    if options.ietf:
        name, policy = _policy_field(decision.group, decision.limit, decision.window)
        headers.append(("RateLimit-Policy", policy))
        state = f"{name};r={decision.remaining}"
        if reset is not None:
            state += f";t={reset}"
        headers.append(("RateLimit", state))
    if options.legacy:
        headers.append(("X-RateLimit-Limit", str(decision.limit)))
        headers.append(("X-RateLimit-Remaining", str(decision.remaining)))
        if reset is not None:
            headers.append(("X-RateLimit-Reset", str(reset)))
    return headers


def refusal_body(decision: Decision) -> bytes:
    """The JSON body of a 429: ``{"detail": ..., "status": 429, "retry_after": seconds}``
    (``retry_after`` is ``null`` when the request can never pass, e.g. a cost above the burst)."""
    if decision.refused_by == "concurrency":
        detail = "Too many concurrent requests"
    elif math.isinf(decision.retry_after):
        detail = "Rate limit exceeded: this request is larger than the limit allows"
    else:
        detail = "Rate limit exceeded"
    retry = None if math.isinf(decision.retry_after) else _seconds(decision.retry_after)
    return json.dumps({"detail": detail, "status": 429, "retry_after": retry}).encode()


def missing_key_body(status: int) -> bytes:
    """The JSON body for a request whose key function found no key."""
    return json.dumps({"detail": "This request carries no key the rate limiter can use", "status": status}).encode()
