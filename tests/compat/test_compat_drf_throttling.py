"""Django REST framework 3.18's throttling promises (its ``tests/test_throttling.py``), kept by ratekeeper's
drop-in throttles: the same requests, statuses, ``Retry-After`` and counts, each test named after DRF's.

DRF's tests move ``throttle.timer``; these move the limiter's ManualClock. DRF's users come from its
database; these from the test project's ``X-User`` header. DRF's ``NUM_PROXIES`` (a count of proxies) is
``TRUSTED_PROXIES`` here (the proxies' addresses): the same clients are told apart and the same spoofing
fails. Where ratekeeper decides otherwise on purpose, the test says so and checks ratekeeper's answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import ratekeeper as rk


@pytest.fixture
def clock(django_site: None) -> Iterator[rk.ManualClock]:
    """A limiter of the test's own on a ManualClock, in the settings for the test."""
    from django.test import override_settings

    clock = rk.ManualClock()
    with override_settings(RATEKEEPER={"LIMITER": rk.Limiter(rules=[], clock=clock)}):
        yield clock


def throttles() -> dict[str, Any]:
    """DRF's test throttles and views, as ratekeeper classes (made after Django is set up)."""
    from ratekeeper.django import ScopedRateKeeperThrottle, UserRateKeeperThrottle
    from rest_framework.response import Response
    from rest_framework.views import APIView

    class User3SecRateThrottle(UserRateKeeperThrottle):
        rate = "3/sec"
        scope = "seconds"

    class User3MinRateThrottle(UserRateKeeperThrottle):
        rate = "3/min"
        scope = "minutes"

    class User6MinRateThrottle(UserRateKeeperThrottle):
        rate = "6/min"
        scope = "minutes"

    class MockView(APIView):  # type: ignore[misc]
        throttle_classes: ClassVar[tuple[type, ...]] = (User3SecRateThrottle,)

        def get(self, request: Any) -> Response:
            return Response("foo")

    class MockViewDoubleThrottling(MockView):
        throttle_classes = (User3SecRateThrottle, User6MinRateThrottle)

    class MockViewMinuteThrottling(MockView):
        throttle_classes = (User3MinRateThrottle,)

    class XYScopedRateThrottle(ScopedRateKeeperThrottle):
        THROTTLE_RATES: ClassVar[dict[str, str]] = {"x": "3/min", "y": "1/min"}

    class XView(MockView):
        throttle_classes = (XYScopedRateThrottle,)
        throttle_scope = "x"

    class YView(XView):
        throttle_scope = "y"

    class UnscopedView(MockView):
        throttle_classes = (XYScopedRateThrottle,)

    return {name: value for name, value in locals().items() if isinstance(value, type)}


def get(view: type, user: str | None = None, **meta: str) -> Any:
    from rest_framework.test import APIRequestFactory

    request = APIRequestFactory().get("/", **({"HTTP_X_USER": user} if user else {}))
    request.META.update(meta)
    return view.as_view()(request)


# --- ThrottlingTests ---------------------------------------------------------------------------------------------


def test_requests_are_throttled(clock: rk.ManualClock) -> None:
    view = throttles()["MockView"]
    assert [get(view).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_request_throttling_expires(clock: rk.ManualClock) -> None:
    view = throttles()["MockView"]
    assert [get(view).status_code for _ in range(4)][-1] == 429
    clock.advance(1)  # a second later the three requests have left the window
    assert get(view).status_code == 200


def test_request_throttling_is_per_user(clock: rk.ManualClock) -> None:
    view = throttles()["MockView"]
    assert [get(view, "a").status_code for _ in range(3)] == [200, 200, 200]
    assert get(view, "b").status_code == 200


def test_request_throttling_multiple_throttles(clock: rk.ManualClock) -> None:
    view = throttles()["MockViewDoubleThrottling"]
    answers = [get(view) for _ in range(4)]
    assert answers[-1].status_code == 429
    assert int(answers[-1]["Retry-After"]) == 1
    # Every throttle sees every request: "6/min" counted the four. Two more pass a second later, then
    # "6/min" refuses until its first request leaves the minute.
    clock.advance(1)
    assert [get(view).status_code for _ in range(2)] == [200, 200]
    refused = get(view)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == 59
    clock.advance(1)
    refused = get(view)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == 58


def test_throttle_rate_change_negative(clock: rk.ManualClock) -> None:
    classes = throttles()
    view = classes["MockViewDoubleThrottling"]
    answers = [get(view) for _ in range(24)]
    assert answers[-1].status_code == 429
    assert int(answers[-1]["Retry-After"]) == 60
    classes["User3SecRateThrottle"].rate = "1/sec"  # the class's own rate, changed while it serves
    answers = [get(view) for _ in range(24)]
    assert answers[-1].status_code == 429
    assert int(answers[-1]["Retry-After"]) == 60


def fields(view: type, clock: rk.ManualClock, expected: list[tuple[float, str | None]]) -> None:
    """DRF's ensure_response_header_contains_proper_throttle_field: at each time, the Retry-After (or none)."""
    for at, retry_after in expected:
        clock.advance(at - clock.now())
        assert get(view).headers.get("Retry-After") == retry_after, at


def test_seconds_fields(clock: rk.ManualClock) -> None:
    fields(throttles()["MockView"], clock, [(0, None), (0, None), (0, None), (0, "1")])


def test_minutes_fields(clock: rk.ManualClock) -> None:
    fields(throttles()["MockViewMinuteThrottling"], clock, [(0, None), (0, None), (0, None), (0, "60")])


def test_next_rate_remains_constant_if_followed(clock: rk.ManualClock) -> None:
    fields(throttles()["MockViewMinuteThrottling"], clock, [(0, None), (20, None), (40, None), (60, None), (80, None)])


# --- ScopedRateThrottleTests ---------------------------------------------------------------------------------------


def test_scoped_rate_throttle(clock: rk.ManualClock) -> None:
    classes = throttles()
    x_view, y_view = classes["XView"], classes["YView"]

    def after_a_second(view: type) -> int:
        clock.advance(1)
        return int(get(view).status_code)

    for _ in range(2):  # the second round after the minute is over
        assert [after_a_second(x_view) for _ in range(4)] == [200, 200, 200, 429]
        assert [after_a_second(y_view) for _ in range(2)] == [200, 429]
        clock.advance(55 - 1)


def test_unscoped_view_not_throttled(clock: rk.ManualClock) -> None:
    view = throttles()["UnscopedView"]
    assert [get(view).status_code for _ in range(10)] == [200] * 10
    assert "RateLimit" not in get(view).headers


def test_get_cache_key_returns_correct_key_if_user_is_authenticated(clock: rk.ManualClock) -> None:
    # DRF's key is "throttle_user_<pk>"; ratekeeper's is the user alone, the scope being the group.
    from django_site.auth import HeaderUser
    from ratekeeper.django import ScopedRateKeeperThrottle
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory, force_authenticate

    class DummyView:
        throttle_scope = "user"

    request = Request(APIRequestFactory().get("/"))
    user = HeaderUser("7")
    force_authenticate(request, user)
    request.user = user
    throttle = ScopedRateKeeperThrottle()
    assert throttle.allow_request(request, DummyView())
    assert throttle.get_cache_key(request, DummyView()) == "user:7"


# --- XffTestingBase: NUM_PROXIES there, TRUSTED_PROXIES here ------------------------------------------------------

XFF = "0.0.0.0, 1.1.1.1, 2.2.2.2"
PROXIES = {0: [], 1: ["3.3.3.3"], 2: ["3.3.3.3", "2.2.2.2"]}  # REMOTE_ADDR is 3.3.3.3, then XFF's right end


@pytest.fixture
def xff_view(django_site: None) -> Any:
    from ratekeeper.django import ScopedRateKeeperThrottle

    class Throttle(ScopedRateKeeperThrottle):
        THROTTLE_RATES: ClassVar[dict[str, str]] = {"test_limit": "1/day"}

    class View(throttles()["MockView"]):  # type: ignore[misc]
        throttle_classes = (Throttle,)
        throttle_scope = "test_limit"

    return View


def via_proxies(view: type, proxies: int, xff: str) -> int:
    from django.test import override_settings

    limiter = via_proxies.limiters.setdefault(view, rk.Limiter(rules=[], clock=rk.ManualClock()))  # type: ignore[attr-defined]
    with override_settings(RATEKEEPER={"LIMITER": limiter, "TRUSTED_PROXIES": PROXIES[proxies]}):
        return int(get(view, HTTP_X_FORWARDED_FOR=xff, REMOTE_ADDR="3.3.3.3").status_code)


via_proxies.limiters = {}  # type: ignore[attr-defined]


def test_accepts_request_under_limit(xff_view: type) -> None:
    assert via_proxies(xff_view, 0, XFF) == 200


def test_denies_request_over_limit(xff_view: type) -> None:
    via_proxies(xff_view, 0, XFF)
    assert via_proxies(xff_view, 0, XFF) == 429


def test_xff_spoofing_doesnt_change_machine_id_with_one_app_proxy(xff_view: type) -> None:
    via_proxies(xff_view, 1, XFF)
    assert via_proxies(xff_view, 1, "4.4.4.4, 5.5.5.5, 2.2.2.2") == 429


def test_xff_spoofing_doesnt_change_machine_id_with_two_app_proxies(xff_view: type) -> None:
    via_proxies(xff_view, 2, XFF)
    assert via_proxies(xff_view, 2, "4.4.4.4, 1.1.1.1, 2.2.2.2") == 429


def test_unique_clients_are_counted_independently_with_one_proxy(xff_view: type) -> None:
    via_proxies(xff_view, 1, XFF)
    assert via_proxies(xff_view, 1, "0.0.0.0, 1.1.1.1, 7.7.7.7") == 200


def test_unique_clients_are_counted_independently_with_two_proxies(xff_view: type) -> None:
    via_proxies(xff_view, 2, XFF)
    assert via_proxies(xff_view, 2, "0.0.0.0, 7.7.7.7, 2.2.2.2") == 200


# --- SimpleRateThrottleTests and AnonRateThrottleTests -------------------------------------------------------------


def test_get_rate_raises_error_if_scope_is_missing(clock: rk.ManualClock) -> None:
    # DRF raises ImproperlyConfigured; ratekeeper's error names the class and the field.
    from ratekeeper.django import RateKeeperThrottle

    throttle = RateKeeperThrottle()
    throttle.scope = None
    with pytest.raises(rk.InvalidValue) as raised:
        throttle.get_rate()
    assert raised.value.loc == ("RateKeeperThrottle", "scope")


def test_throttle_raises_error_if_rate_is_missing(clock: rk.ManualClock) -> None:
    # DRF raises at construction; ratekeeper at the first request, naming the setting (the settings may
    # change after the class is made).
    from ratekeeper.django import RateKeeperThrottle

    class Invalid(RateKeeperThrottle):
        scope = "invalid scope"

    with pytest.raises(rk.InvalidValue) as raised:
        Invalid().allow_request(__import__("rest_framework.test").test.APIRequestFactory().get("/"), None)
    assert raised.value.loc == ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES", "invalid scope")


def test_allow_request_returns_true_if_rate_is_none(clock: rk.ManualClock) -> None:
    from ratekeeper.django import RateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    class Unthrottled(RateKeeperThrottle):
        scope = "anything"
        THROTTLE_RATES: ClassVar[dict[str, None]] = {"anything": None}

    throttle = Unthrottled()
    assert all(throttle.allow_request(APIRequestFactory().get("/"), None) is True for _ in range(5))
    assert throttle.wait() is None


def test_allow_request_returns_true_if_key_is_none(clock: rk.ManualClock) -> None:
    from ratekeeper.django import RateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    class NoKey(RateKeeperThrottle):
        rate = "1/min"

        def get_cache_key(self, request: Any, view: Any) -> str | None:
            return None

    assert all(NoKey().allow_request(APIRequestFactory().get("/"), None) is True for _ in range(5))


def test_wait_after_the_rate_was_lowered_is_exact(clock: rk.ManualClock) -> None:
    # DRF's test_wait_returns_none_if_there_are_no_available_requests: DRF gives up on a wait (None: no
    # Retry-After) when the history holds more than the new rate; ratekeeper's is the time until enough
    # requests have left the window.
    from ratekeeper.django import RateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    class Lowered(RateKeeperThrottle):
        rate = "3/min"

    request = APIRequestFactory().get("/")
    assert [Lowered().allow_request(request, None) for _ in range(3)] == [True] * 3
    Lowered.rate = "1/min"
    clock.advance(15)
    throttle = Lowered()
    assert not throttle.allow_request(request, None)
    assert throttle.wait() == 45.0


def test_authenticated_user_not_affected(clock: rk.ManualClock) -> None:
    from django_site.auth import HeaderUser
    from ratekeeper.django import AnonRateKeeperThrottle
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory, force_authenticate

    request = Request(APIRequestFactory().get("/"))
    user = HeaderUser("test")
    force_authenticate(request, user)
    request.user = user
    assert AnonRateKeeperThrottle().get_cache_key(request, view={}) is None


def test_get_cache_key_returns_correct_value(clock: rk.ManualClock) -> None:
    # DRF's key for a request without REMOTE_ADDR is "throttle_anon_None": such requests share a budget.
    from django.http import HttpRequest
    from ratekeeper.django import AnonRateKeeperThrottle
    from rest_framework.request import Request

    throttle = AnonRateKeeperThrottle()
    assert throttle.get_cache_key(Request(HttpRequest()), view={}) == "anonymous"
    # "anon": "2/hour" in the test project; two requests without an address, then the third is refused.
    assert [AnonRateKeeperThrottle().allow_request(Request(HttpRequest()), None) for _ in range(3)] == [
        True,
        True,
        False,
    ]
