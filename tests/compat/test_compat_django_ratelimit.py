"""django-ratelimit 4.1's promises (its ``django_ratelimit/tests.py``), kept by ``ratekeeper.django.ratelimit``,
``get_usage`` and ``is_ratelimited``: the same requests and the same ``request.limited`` answers, each test
named after django-ratelimit's.

django-ratelimit counts in Django's cache; these count in the limiter of the settings, a limiter of the test's
own on a ManualClock. Where ratekeeper decides otherwise on purpose, the test says so and checks
ratekeeper's answer. Not mapped: its cache-failure tests (the cache is not ours: ``rk.Redis(on_error=...)``
decides an outage) and ``RATELIMIT_IP_META_KEY`` (``TRUSTED_PROXIES`` or the ``KEY`` setting name the client).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import ratekeeper as rk
from _compat_django import CustomRatelimitedException, mykey


class MockUser:
    def __init__(self, authenticated: bool = False) -> None:
        self.pk = 1
        self.is_authenticated = authenticated


@pytest.fixture(autouse=True)
def clock(django_site: None) -> Iterator[rk.ManualClock]:
    """A limiter of the test's own on a ManualClock, in the settings for the test."""
    from django.test import override_settings

    clock = rk.ManualClock()
    with override_settings(RATEKEEPER={"LIMITER": rk.Limiter(rules=[], clock=clock)}):
        yield clock


def rf() -> Any:
    from django.test import RequestFactory

    return RequestFactory()


def limited_view(**options: Any) -> Any:
    """A view decorated by ``ratelimit(**options)`` that answers ``request.limited``."""
    from ratekeeper.django import ratelimit

    @ratelimit(**options)
    def view(request: Any) -> bool:
        return bool(request.limited)

    return view


def as_user(request: Any, authenticated: bool) -> Any:
    request.user = MockUser(authenticated)
    return request


# --- RateParsingTests ----------------------------------------------------------------------------------------------


def test_simple() -> None:
    for spec, expected in [
        ("100/s", (100, 1)),
        ("100/10s", (100, 10)),
        ("100/10", (100, 10)),
        ("100/m", (100, 60)),
        ("400/10m", (400, 600)),
        ("1000/h", (1000, 3600)),
        ("800/d", (800, 24 * 60 * 60)),
    ]:
        rate = rk.Rate(spec)
        assert (rate.count, rate.period) == expected, spec


# --- RatelimitTests ------------------------------------------------------------------------------------------------


def test_no_key() -> None:
    # django-ratelimit raises ImproperlyConfigured at the first request; ratekeeper at decoration.
    from ratekeeper.django import ratelimit

    with pytest.raises(rk.InvalidValue) as raised:
        ratelimit(rate="1/m")
    assert raised.value.loc == ("key",)


def test_ip() -> None:
    view = limited_view(key="ip", rate="1/m", block=False)
    assert [view(rf().get("/")) for _ in range(2)] == [False, True]


def test_block() -> None:
    from ratekeeper.django import Ratelimited

    view = limited_view(key="ip", rate="1/m")
    assert not view(rf().get("/"))
    with pytest.raises(Ratelimited):
        view(rf().get("/"))
    from django.core.exceptions import PermissionDenied

    assert issubclass(Ratelimited, PermissionDenied)  # Django answers 403


def test_ratelimit_custom_string_exception_class() -> None:
    from django.test import override_settings

    view = limited_view(key="ip", rate="1/m")
    with override_settings(RATELIMIT_EXCEPTION_CLASS="_compat_django.CustomRatelimitedException"):
        assert not view(rf().get(""))
        with pytest.raises(CustomRatelimitedException):
            view(rf().get(""))


def test_ratelimit_custom_exception_class() -> None:
    from django.test import override_settings

    view = limited_view(key="ip", rate="1/m")
    with override_settings(RATELIMIT_EXCEPTION_CLASS=CustomRatelimitedException):
        assert not view(rf().get(""))
        with pytest.raises(CustomRatelimitedException):
            view(rf().get(""))


def test_method() -> None:
    view = limited_view(key="ip", method="POST", rate="1/m", group="a", block=False)
    assert not view(rf().post("/"))
    assert view(rf().post("/"))
    assert not view(rf().get("/"))


def test_unsafe_methods() -> None:
    from ratekeeper.django import UNSAFE

    view = limited_view(key="ip", method=UNSAFE, rate="0/m", block=False)
    factory = rf()
    assert [view(factory.generic(method, "/")) for method in ("GET", "HEAD", "OPTIONS")] == [False] * 3
    assert [view(factory.generic(method, "/")) for method in ("DELETE", "POST", "PUT", "PATCH")] == [True] * 4


def test_key_get() -> None:
    view = limited_view(key="get:foo", rate="1/m", method="GET", block=False)
    answers = [view(rf().get("/", {"foo": foo})) for foo in ("a", "a", "b", "b")]
    assert answers == [False, True, False, True]


def test_key_post() -> None:
    view = limited_view(key="post:foo", rate="1/m", block=False)
    answers = [view(rf().post("/", {"foo": foo})) for foo in ("a", "a", "b", "b")]
    assert answers == [False, True, False, True]


def test_key_header() -> None:
    from ratekeeper.django import ratelimit

    def request() -> Any:
        made = rf().post("/")
        made.META["HTTP_X_REAL_IP"] = "1.2.3.4"
        return made

    @ratelimit(key="header:x-real-ip", rate="1/m", block=False)
    @ratelimit(key="header:x-missing-header", rate="1/m", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert not view(request())
    assert view(request())


def test_rate() -> None:
    view = limited_view(key="ip", rate="2/m", block=False)
    assert [view(rf().post("/")) for _ in range(3)] == [False, False, True]


def test_zero_rate() -> None:
    view = limited_view(key="ip", rate="0/m", block=False)
    assert view(rf().post("/"))


def test_none_rate() -> None:
    view = limited_view(key="ip", rate=None, block=False)
    assert [view(rf().post("/")) for _ in range(7)] == [False] * 7


def test_callable_rate() -> None:
    def get_rate(group: str, request: Any) -> tuple[int, int]:
        return (2, 60) if request.user.is_authenticated else (1, 60)

    view = limited_view(key="user_or_ip", rate=get_rate, block=False)
    assert [view(as_user(rf().post("/"), False)) for _ in range(2)] == [False, True]
    assert [view(as_user(rf().post("/"), True)) for _ in range(3)] == [False, False, True]


def test_callable_rate_none() -> None:
    def request(never_limit: bool = False) -> Any:
        made = rf().post("/")
        made.never_limit = never_limit
        return made

    view = limited_view(key="ip", rate=lambda group, r: None if r.never_limit else "1/m", block=False)
    assert [view(request()) for _ in range(2)] == [False, True]
    assert [view(request(never_limit=True)) for _ in range(2)] == [False, False]


def test_callable_rate_zero() -> None:
    view = limited_view(key="ip", rate=lambda group, r: "1/m" if r.user.is_authenticated else "0/m", block=False)
    assert view(as_user(rf().post("/"), False))
    assert [view(as_user(rf().post("/"), True)) for _ in range(2)] == [False, True]


def test_callable_rate_import() -> None:
    view = limited_view(key="user_or_ip", rate="_compat_django.callable_rate", block=False)
    assert view(as_user(rf().post("/"), False))
    assert not view(as_user(rf().post("/"), True))


def test_user_or_ip() -> None:
    view = limited_view(key="user_or_ip", rate="1/m", block=False)
    assert [view(as_user(rf().post("/"), False)) for _ in range(2)] == [False, True]
    assert [view(as_user(rf().post("/"), True)) for _ in range(2)] == [False, True]


def test_callable_key_path() -> None:
    view = limited_view(key="_compat_django.mykey", rate="1/m", block=False)
    assert [view(rf().post("/")) for _ in range(2)] == [False, True]


def test_callable_key() -> None:
    view = limited_view(key=mykey, rate="1/m", block=False)
    assert [view(rf().post("/")) for _ in range(2)] == [False, True]


def test_stacked_decorator() -> None:
    from ratekeeper.django import ratelimit

    # The shorter first: the second must not set request.limited back to False.
    @ratelimit(rate="1/m", block=False, key=lambda group, request: "min")
    @ratelimit(rate="10/d", block=False, key=lambda group, request: "day")
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert [view(rf().post("/")) for _ in range(2)] == [False, True]


def test_stacked_methods() -> None:
    from ratekeeper.django import ratelimit

    @ratelimit(rate="1/m", key="ip", method="GET", block=False)
    @ratelimit(rate="1/m", key="ip", method="POST", block=False)
    def view(request: Any) -> bool:
        return bool(request.limited)

    assert [view(rf().get("/")), view(rf().post("/")), view(rf().get("/")), view(rf().post("/"))] == [
        False,
        False,
        True,
        True,
    ]


def test_sorted_methods() -> None:
    get_post = limited_view(rate="1/m", key="ip", method=["GET", "POST"], group="a", block=False)
    post_get = limited_view(rate="1/m", key="ip", method=["POST", "GET"], group="a", block=False)
    assert not get_post(rf().get("/"))
    assert post_get(rf().get("/"))


def masked(setting: str, bits: int, addresses: list[str]) -> list[bool]:
    from django.test import override_settings

    view = limited_view(rate="1/m", key="ip", block=False)
    answers = []
    with override_settings(**{setting: bits}):
        for address in addresses:
            request = rf().get("/")
            request.META["REMOTE_ADDR"] = address
            answers.append(view(request))
    return answers


def test_ratelimit_full_mask_v4() -> None:
    assert masked("RATELIMIT_IPV4_MASK", 32, ["10.1.1.1", "10.1.1.1", "10.1.1.2"]) == [False, True, False]


def test_ratelimit_full_mask_v6() -> None:
    addresses = ["2001:db8::1000", "2001:db8::1000", "2001:db8::1001"]
    assert masked("RATELIMIT_IPV6_MASK", 128, addresses) == [False, True, False]


def test_ratelimit_mask_v4() -> None:
    addresses = ["10.1.1.1", "10.1.1.1", "10.1.0.1", "192.168.1.1"]
    assert masked("RATELIMIT_IPV4_MASK", 16, addresses) == [False, True, True, False]


def test_ratelimit_mask_v6() -> None:
    addresses = ["2001:db8::1000", "2001:db8::1000", "2001:db8::1001", "2001:db9::1000"]
    assert masked("RATELIMIT_IPV6_MASK", 64, addresses) == [False, True, True, False]


def test_ipv6_clients_are_grouped_by_64_bits_by_default() -> None:
    view = limited_view(rate="1/m", key="ip", block=False)
    answers = []
    for address in ["2001:db8::1", "2001:db8::ffff", "2001:db8:0:1::1"]:
        request = rf().get("/")
        request.META["REMOTE_ADDR"] = address
        answers.append(view(request))
    assert answers == [False, True, False]


# --- FunctionsTests ------------------------------------------------------------------------------------------------


def usage_of(increment: bool = False) -> Any:
    from ratekeeper.django import get_usage

    return get_usage(rf().get("/"), group="a", key="ip", rate="1/m", increment=increment)


def test_is_ratelimited() -> None:
    from ratekeeper.django import is_ratelimited

    def not_increment() -> bool:
        return is_ratelimited(rf().get("/"), increment=False, rate="1/m", key="ip", group="a")

    assert [not_increment(), not_increment()] == [False, False]


def test_is_ratelimited_increment() -> None:
    from ratekeeper.django import is_ratelimited

    def do_increment() -> bool:
        return is_ratelimited(rf().get("/"), increment=True, rate="1/m", key="ip", group="a")

    assert [do_increment(), do_increment()] == [False, True]


def test_get_usage() -> None:
    usage = usage_of()
    assert (usage["count"], usage["limit"], usage["should_limit"]) == (0, 1, False)
    assert usage["time_left"] <= 60


def test_get_usage_increment() -> None:
    # django-ratelimit counts the refused request too (count 2); ratekeeper counts what it admitted (1).
    usage_of(increment=True)
    usage = usage_of(increment=True)
    assert (usage.count, usage.limit, usage.should_limit) == (1, 1, True)
    assert usage.time_left <= 60


def test_not_increment_after_increment(clock: rk.ManualClock) -> None:
    usage_of(increment=True)
    usage_of(increment=True)
    clock.advance(15)
    usage = usage_of()
    assert (usage.count, usage.limit, usage.should_limit, usage.time_left) == (1, 1, True, 45)


def test_get_usage_called_without_group_or_fn() -> None:
    from ratekeeper.django import get_usage

    with pytest.raises(rk.InvalidValue) as raised:
        get_usage(rf().get("/"), key="ip")
    assert raised.value.loc == ("group",)


# --- RatelimitCBVTests ---------------------------------------------------------------------------------------------


def test_method_decorator() -> None:
    from django.utils.decorators import method_decorator
    from django.views.generic import View
    from ratekeeper.django import ratelimit

    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", block=False))
        def post(self, request: Any) -> bool:
            return bool(request.limited)

    view = TestView.as_view()
    assert [view(rf().post("/")) for _ in range(2)] == [False, True]


def test_class_decorator() -> None:
    from django.utils.decorators import method_decorator
    from django.views.generic import View
    from ratekeeper.django import ratelimit

    @method_decorator(ratelimit(key="ip", rate="1/m", block=False), name="get")
    class TestView(View):
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    view = TestView.as_view()
    assert [view(rf().get("/")) for _ in range(2)] == [False, True]


def test_wrap_view() -> None:
    from django.views.generic import View
    from ratekeeper.django import ratelimit

    class TestView(View):
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    wrapped = ratelimit(key="ip", rate="1/m", block=False)(TestView.as_view())
    assert [wrapped(rf().get("/")) for _ in range(2)] == [False, True]


def test_methods_counted_separately() -> None:
    from django.utils.decorators import method_decorator
    from django.views.generic import View
    from ratekeeper.django import ratelimit

    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request: Any) -> bool:
            return bool(request.limited)

        @method_decorator(ratelimit(key="ip", rate="1/m", method="POST", block=False))
        def post(self, request: Any) -> bool:
            return bool(request.limited)

    view = TestView.as_view()
    assert [view(rf().get("/")), view(rf().get("/")), view(rf().post("/"))] == [False, True, False]


def test_views_counted_separately() -> None:
    from django.utils.decorators import method_decorator
    from django.views.generic import View
    from ratekeeper.django import ratelimit

    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    class AnotherTestView(TestView):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request: Any) -> bool:
            return bool(request.limited)

    test_view, another_view = TestView.as_view(), AnotherTestView.as_view()
    assert [test_view(rf().get("/")), test_view(rf().get("/")), another_view(rf().get("/"))] == [False, True, False]


# --- IpMetaTests ---------------------------------------------------------------------------------------------------


def test_default() -> None:
    from ratekeeper.django import get_usage, ratelimit

    @ratelimit(key="ip", rate="1/m", group="ip")
    def view(request: Any) -> bool:
        return True

    request = rf().get("/")
    request.META["REMOTE_ADDR"] = "1.2.3.4"
    view(request)
    other = rf().get("/")
    other.META["REMOTE_ADDR"] = "1.2.3.5"
    assert get_usage(request, group="ip", key="ip", rate="1/m", increment=False).count == 1  # type: ignore[union-attr]
    assert get_usage(other, group="ip", key="ip", rate="1/m", increment=False).count == 0  # type: ignore[union-attr]


def test_empty_ip() -> None:
    # django-ratelimit raises ImproperlyConfigured into the request; ratekeeper counts requests without an
    # address together (nothing raises while serving).
    view = limited_view(key="ip", rate="1/m", block=False)
    requests = [rf().get("/") for _ in range(2)]
    for request in requests:
        request.META["REMOTE_ADDR"] = ""
    assert [view(request) for request in requests] == [False, True]


# --- what ratekeeper adds ------------------------------------------------------------------------------------------


def test_windows_are_fixed_and_end_a_period_after_their_first_request(clock: rk.ManualClock) -> None:
    view = limited_view(key="ip", rate="2/m", block=False)
    assert [view(rf().get("/")) for _ in range(3)] == [False, False, True]
    clock.advance(59)
    assert view(rf().get("/"))
    clock.advance(1)
    assert [view(rf().get("/")) for _ in range(3)] == [False, False, True]


def test_ratelimit_enable_false_limits_nothing() -> None:
    from django.test import override_settings

    view = limited_view(key="ip", rate="1/m", block=False)
    with override_settings(RATELIMIT_ENABLE=False):
        assert [view(rf().get("/")) for _ in range(3)] == [False] * 3


def test_async_views_are_limited() -> None:
    import asyncio

    from ratekeeper.django import ratelimit

    @ratelimit(key="ip", rate="1/m", block=False)
    async def view(request: Any) -> bool:
        return bool(request.limited)

    async def twice() -> list[bool]:
        return [await view(rf().get("/")), await view(rf().get("/"))]

    assert asyncio.run(twice()) == [False, True]


def test_bad_arguments_name_the_field() -> None:
    from ratekeeper.django import ratelimit

    cases: list[tuple[dict[str, Any], type[Exception], tuple[str | int, ...]]] = [
        ({"key": "cookie:x", "rate": "1/m"}, rk.InvalidValue, ("key",)),
        ({"key": "nonsense", "rate": "1/m"}, rk.InvalidValue, ("key",)),
        ({"key": "ip", "rate": "1/fortnight"}, rk.InvalidValue, ("rate", 0, "rate")),
        ({"key": "ip", "rate": "1/m", "method": ["GET", 1]}, rk.InvalidValue, ("method", 1)),
        ({"key": "ip", "rate": "1/m", "block": "yes"}, rk.InvalidType, ("block",)),
    ]
    for options, error, loc in cases:
        with pytest.raises(error) as raised:
            ratelimit(**options)
        assert raised.value.loc == loc, options  # type: ignore[attr-defined]
