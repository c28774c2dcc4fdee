"""Functions the django-ratelimit compatibility tests name by dotted path (``_compat_django.mykey``), as
django-ratelimit's own tests name theirs."""

from __future__ import annotations

from typing import Any


def callable_rate(group: str, request: Any) -> tuple[int, int] | None:
    """No limit for authenticated users; none admitted for the others."""
    if request.user.is_authenticated:
        return None
    return (0, 1)


def mykey(group: str, request: Any) -> str:
    """The client's address, reversed."""
    return str(request.META["REMOTE_ADDR"][::-1])


class CustomRatelimitedException(Exception):
    """An exception of the project's own for ``RATELIMIT_EXCEPTION_CLASS``."""
