"""Exceptions raised by ratekeeper.

Every bad argument or configuration raises [`InvalidValue`][ratekeeper.InvalidValue] (a ``ValueError``) or
[`InvalidType`][ratekeeper.InvalidType] (a ``TypeError``). Both carry where the mistake is as ``loc``, a tuple of keys
and indexes in the style of pydantic (``("rules", 2, "pattern")``), and what is wrong as ``msg``; the text
is built from them (``rules[2].pattern: "^/api/(v1" is not a valid regex: unclosed group``). Code that
wraps a limiter (config files, presets) moves an error to its own place with [`at`][ratekeeper.InvalidArgument.at]
instead of rewording text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Self

    from ratekeeper._core import Decision

__all__ = ["BackendUnavailable", "InvalidArgument", "InvalidType", "InvalidValue", "Loc", "RateLimited", "format_loc"]

Loc = tuple[str | int, ...]


def format_loc(loc: Sequence[str | int]) -> str:
    """``("rules", 2, "pattern")`` -> ``"rules[2].pattern"``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


class InvalidArgument(Exception):
    """A bad argument or configuration value; see [`InvalidValue`][ratekeeper.InvalidValue] and
    [`InvalidType`][ratekeeper.InvalidType].

    Attributes:
        loc: where the mistake is: keys and list indexes from the outside in, e.g.
            ``("groups", "api", "limits", 1, "rate")``; empty when it concerns the whole.
        msg: what is wrong, quoting the offending value.
        file: the config file it was read from, if any.
    """

    loc: Loc
    msg: str
    file: str | None

    def __init__(self, loc: Sequence[str | int] | str, msg: str, *, file: str | None = None) -> None:
        self.loc = (loc,) if isinstance(loc, str) else tuple(loc)
        self.msg = msg
        self.file = file
        super().__init__(self._text())

    def _text(self) -> str:
        place = format_loc(self.loc)
        text = f"{place}: {self.msg}" if place else self.msg
        return f"{self.file}: {text}" if self.file else text

    def __str__(self) -> str:
        return self._text()

    def at(self, *loc: str | int, drop: int = 0) -> Self:
        """The same error at another place: ``loc`` followed by this error's ``loc`` less its first
        ``drop`` parts (``error.at("groups", "api", drop=2)`` turns ``rules[3].rate`` into
        ``groups.api.rate``)."""
        return type(self)((*loc, *self.loc[drop:]), self.msg, file=self.file)

    def in_file(self, file: str) -> Self:
        """The same error, read from ``file``: its text starts with the file's name."""
        return type(self)(self.loc, self.msg, file=file)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.loc, self.msg, self.file))


def _rebuild(cls: type[InvalidArgument], loc: Loc, msg: str, file: str | None) -> InvalidArgument:
    return cls(loc, msg, file=file)


class InvalidValue(InvalidArgument, ValueError):
    """A value of the right type that is not accepted (``except ValueError`` catches it)."""


class InvalidType(InvalidArgument, TypeError):
    """A value of the wrong type (``except TypeError`` catches it)."""


class RateLimited(Exception):
    """A request was refused: raised by ``throttle`` when the wait would pass its timeout, and by
    ``concurrent`` when a rate limit refuses or every permit is in use.

    Attributes:
        decision: the refusing [`Decision`][ratekeeper.Decision] (its ``group``, ``limit``, ``remaining`` ...).
        retry_after: seconds until the same request would be admitted (``inf``: never, e.g. a cost
            larger than the burst; ``0.0`` for concurrency: a permit frees when a request finishes).
    """

    decision: Decision
    retry_after: float

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.retry_after = decision.retry_after
        super().__init__(_refusal_text(decision))

    def __reduce__(self) -> tuple[type[RateLimited], tuple[Decision]]:
        return (type(self), (self.decision,))


def _refusal_text(decision: Decision) -> str:
    where = f" in group {decision.group!r}" if decision.group is not None else ""
    if decision.refused_by == "concurrency":
        permits = f"all {decision.limit} concurrency permits" if decision.limit is not None else "every permit"
        return f"rate limited{where}: {permits} in use; retry when a request finishes"
    if decision.retry_after == float("inf"):
        return f"rate limited{where}: the cost is above what the limit admits at once, so it is never admitted"
    return f"rate limited{where}: retry after {decision.retry_after:.3f}s"


class BackendUnavailable(ConnectionError):
    """The backend (Redis) did not answer in time, and the limiter's backend was built with
    ``on_error="raise"``; with the other policies a decision never raises this."""
