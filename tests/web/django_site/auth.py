"""Users without a database: the ``X-User`` header names the authenticated user (its pk)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.contrib.auth.models import AnonymousUser
from rest_framework.authentication import BaseAuthentication


class HeaderUser:
    is_authenticated = True
    is_active = True

    def __init__(self, pk: str) -> None:
        self.pk = pk


def user_of(request: Any) -> HeaderUser | AnonymousUser:
    name = request.headers.get("X-User")
    return HeaderUser(name) if name else AnonymousUser()


class HeaderUserMiddleware:
    """What AuthenticationMiddleware does, from a header: ``request.user`` and ``request.auser()``."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def _set(self, request: Any) -> None:
        request.user = user_of(request)

        async def auser() -> Any:
            return request.user

        request.auser = auser

    def __call__(self, request: Any) -> Any:
        self._set(request)
        return self.get_response(request)


class HeaderAuthentication(BaseAuthentication):  # type: ignore[misc]
    def authenticate(self, request: Any) -> tuple[HeaderUser, None] | None:
        user = user_of(request)
        return (user, None) if isinstance(user, HeaderUser) else None
