"""Limits written as the peers write them, for the integrations' decorators and settings.

The core reads one rate a string (``"10/min"``, and the peers' ``"100/10"``, ``"10 per minute"``);
Flask-Limiter, slowapi and django-ratelimit also take several limits in one string and ``None`` for
"no limit". ``expand_limits`` turns such specs into the items ``Limiter.add_group`` takes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ratekeeper._core import Limit, Rate
from ratekeeper._errors import InvalidType, InvalidValue

__all__ = ["expand_limits"]

# As the `limits` library splits "10/second; 100/minute" (Flask-Limiter, slowapi).
_SEPARATORS = re.compile(r"[;,|]")
_ZERO = re.compile(r"^\s*0+\s*(?:/|\s+per\s+)", re.IGNORECASE)


def expand_limits(specs: Iterable[object], loc: str) -> list[Rate | Limit | str] | None:
    """The limits ``specs`` name, one item per limit; ``None`` when every spec is ``None`` (the peers'
    "not limited").

    A string may hold several limits separated by ``;``, ``,`` or ``|``; each is checked as a rate
    now, so a typo fails at decoration, not at the first request. ``loc`` names the option in errors
    (``limits[1]``).

    Raises:
        InvalidValue: an empty string, a rate that does not parse, or a count of zero (the peers' "block
            everything": ratekeeper has no rate of zero).
        InvalidType: a spec that is not a str, a Rate, a Limit or None.
    """
    items: list[Rate | Limit | str] = []
    nones = 0
    for index, spec in enumerate(specs):
        at = f"{loc}[{index}]"
        if spec is None:
            nones += 1
            continue
        if isinstance(spec, (Rate, Limit)):
            items.append(spec)
            continue
        if not isinstance(spec, str):
            raise InvalidType(at, f"must be a rate string, a Rate, a Limit or None, got {type(spec).__name__}")
        parts = [part.strip() for part in _SEPARATORS.split(spec)]
        if not any(parts):
            raise InvalidValue(at, f"{spec!r} names no limit; write e.g. '10/min' or '10/s; 100/min'")
        for part in parts:
            if not part:
                continue
            if _ZERO.match(part):
                raise InvalidValue(
                    at,
                    f"{part!r} admits nothing, and ratekeeper has no rate of zero; to refuse a view "
                    "outright, return 403 or 429 from it (or raise PermissionDenied), or give the rate a "
                    "count of at least 1",
                )
            try:
                Rate(part)
            except InvalidValue as error:
                raise InvalidValue(at, f"{error.msg}; several limits are separated by ';'") from None
            items.append(part)
    if nones and not items:
        return None
    return items
