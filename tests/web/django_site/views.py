"""The test project's views: function, class-based, async and DRF views, limited every way."""

from __future__ import annotations

import threading
from typing import ClassVar

import ratekeeper as rk
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from ratekeeper.django import RateKeeperThrottle, UserRateKeeperThrottle, limit
from ratekeeper.keys import header
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


def items(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"items": 3})


async def async_items(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"items": 3, "thread": threading.current_thread().name})


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@limit("2/hour")
def login(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


@limit("2/hour", key=header("X-API-Key"))
async def async_login(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


@limit("2/hour", group="reports")
class Report(View):
    def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"report": "get"})

    def post(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"report": "post"})


@limit("1/hour")
class AsyncReport(View):
    async def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"report": "async"})


class Export(View):
    """Only ``post`` is limited (method_decorator); ``get`` is not."""

    def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"export": "status"})

    @method_decorator(limit("1/hour", group="exports"))
    def post(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"export": "started"})


@limit(rk.Limit("1000/hour"), rk.Limit(concurrency=1), group="stream")
def stream(request: HttpRequest) -> StreamingHttpResponse:
    """One in flight per key: its permit is held until the body has been sent."""
    chunks = int(request.GET.get("chunks", "64"))
    return StreamingHttpResponse(b"a" * 1024 for _ in range(chunks))


class ItemsAPI(APIView):  # type: ignore[misc]
    """DRF, scoped: DEFAULT_THROTTLE_RATES["items"]."""

    throttle_scope = "items"

    def get(self, request: Request) -> Response:
        return Response({"items": 3})


class UploadsAPI(APIView):  # type: ignore[misc]
    throttle_scope = "uploads"

    def post(self, request: Request) -> Response:
        return Response({"uploaded": True}, status=201)


class OpenAPI(APIView):  # type: ignore[misc]
    """No throttle_scope: the scoped throttle leaves it alone."""

    def get(self, request: Request) -> Response:
        return Response({"open": True})


class UserAPI(APIView):  # type: ignore[misc]
    throttle_classes: ClassVar[list[type]] = [UserRateKeeperThrottle]

    def get(self, request: Request) -> Response:
        return Response({"user": getattr(request.user, "pk", None)})


class RoutedAPI(APIView):  # type: ignore[misc]
    """Routed by the limiter's own rules on the path (/routed/drf: the "routed" group)."""

    throttle_classes: ClassVar[list[type]] = [RateKeeperThrottle]

    def get(self, request: Request) -> Response:
        return Response({"routed": True})
