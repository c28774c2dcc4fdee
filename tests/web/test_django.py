"""Django and Django REST framework on real servers: the test project ``django_site`` (a settings module,
URLconf, function, class-based, async and DRF views) served by uvicorn in this process (ASGI: the tests
move the limiter's ManualClock) and by gunicorn (WSGI: the clock stays at 0 there, so waits are exact),
driven by httpx. The IETF fields are parsed strictly with http_sfv.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from _support import MakeLimiter
from _web import Server, gunicorn_threads, members

HERE = Path(__file__).resolve().parent
UNTRUSTED = "127.0.0.2"  # a client that is not the trusted proxy (127.0.0.1)


@pytest.fixture(scope="module")
def site(django_site: None) -> ModuleType:
    """The test project, set up in this process; its ``limits`` module (the limiter and its clock)."""
    from django_site import limits

    return limits


@pytest.fixture(scope="module")
def asgi_server(site: ModuleType) -> Iterator[httpx.Client]:
    from django.core.asgi import get_asgi_application

    with Server(get_asgi_application()) as client:
        yield client


@pytest.fixture
def limiter(site: ModuleType) -> rk.Limiter:
    """The project's limiter, every key forgotten."""
    limiter: rk.Limiter = site.limiter
    limiter.reset()
    return limiter


@pytest.fixture
def client(asgi_server: httpx.Client, limiter: rk.Limiter) -> httpx.Client:
    return asgi_server


def refused(response: httpx.Response, group: str, retry_after: int) -> None:
    """A 429 of the middleware or ``@limit``: the JSON body, ``Retry-After`` and the IETF fields."""
    assert response.status_code == 429
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": retry_after}
    assert response.headers["Retry-After"] == str(retry_after)
    assert members(response.headers["RateLimit"])[group] == {"r": 0, "t": retry_after}


# --- the middleware --------------------------------------------------------------------------------------------------


def test_the_middleware_limits_by_the_path_rules_with_the_fields(client: httpx.Client) -> None:
    answers = [client.get("/api/items") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].json() == {"items": 3}
    assert members(answers[0].headers["RateLimit-Policy"]) == {"api": {"q": 3, "w": 3600}}
    assert [members(a.headers["RateLimit"])["api"]["r"] for a in answers[:3]] == [2, 1, 0]
    refused(answers[3], "api", 1200)  # "3/hour": the next of the burst in 3600 / 3 s


def test_exempt_paths_and_unrouted_paths_are_served_without_a_decision(
    client: httpx.Client, limiter: rk.Limiter
) -> None:
    before = limiter.stats()
    assert [client.get("/health").status_code for _ in range(10)] == [200] * 10
    assert "RateLimit" not in client.get("/health").headers
    export = client.get("/export")  # no rule matches: not limited, no fields
    assert export.status_code == 200
    assert "RateLimit" not in export.headers
    after = limiter.stats()
    assert after["groups"]["api"]["requests"] == before["groups"]["api"]["requests"]
    assert after["exempt"] == before["exempt"]  # the middleware's exemption: the limiter is not asked


def test_an_async_view_is_decided_and_served_on_the_event_loop(client: httpx.Client, asgi_server: httpx.Client) -> None:
    answers = [client.get("/async/api/items") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    # No thread hop: the whole chain runs on uvicorn's loop thread, where the async view reports it is.
    loop_threads = {a.json()["thread"] for a in answers[:3]}
    assert len(loop_threads) == 1
    assert not loop_threads.pop().startswith(("ThreadPoolExecutor", "asyncio_"))
    refused(answers[3], "async-api", 1200)


def test_the_middleware_is_sync_or_async_as_its_chain_is(site: ModuleType) -> None:
    from asgiref.sync import iscoroutinefunction
    from django.http import HttpResponse
    from ratekeeper.django import RateLimitMiddleware

    async def async_view(request: Any) -> HttpResponse:
        return HttpResponse()

    assert iscoroutinefunction(RateLimitMiddleware(async_view))
    assert not iscoroutinefunction(RateLimitMiddleware(lambda request: HttpResponse()))
    assert RateLimitMiddleware.sync_capable
    assert RateLimitMiddleware.async_capable


def test_behind_a_trusted_proxy_the_forwarded_client_is_the_key(client: httpx.Client, limiter: rk.Limiter) -> None:
    def get(forwarded_for: str) -> int:
        return client.get("/api/items", headers={"X-Forwarded-For": forwarded_for}).status_code

    assert [get("198.51.100.7") for _ in range(3)] == [200] * 3
    assert get("198.51.100.7") == 429
    assert get("198.51.100.8") == 200  # another client behind the proxy: a budget of its own
    # A client cannot pick its key by writing the header itself: the proxy appends what it saw.
    assert get("203.0.113.1, 198.51.100.7") == 429


def test_an_untrusted_peer_is_its_own_key_whatever_it_forwards(asgi_server: httpx.Client, limiter: rk.Limiter) -> None:
    transport = httpx.HTTPTransport(local_address=UNTRUSTED)
    with httpx.Client(base_url=asgi_server.base_url, transport=transport, timeout=10) as untrusted:
        codes = [
            untrusted.get("/api/items", headers={"X-Forwarded-For": f"198.51.100.{i}"}).status_code for i in range(4)
        ]
    assert codes == [200, 200, 200, 429]


def test_the_settings_modes_apply_shadow_and_on_refused(client: httpx.Client, site: ModuleType) -> None:
    from django.test import override_settings

    base = {"LIMITER": "django_site.limits.limiter", "TRUSTED_PROXIES": ["127.0.0.1"]}
    with override_settings(RATEKEEPER={**base, "SHADOW": True}):
        answers = [client.get("/api/items") for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5  # decided and counted, never refused
    assert members(answers[-1].headers["RateLimit"])["api"]["r"] == 0
    assert "Retry-After" not in answers[-1].headers
    with override_settings(RATEKEEPER={**base, "ON_REFUSED": "django_site.limits.teapot"}):
        answer = client.get("/api/items")
    assert (answer.status_code, answer.text) == (418, "refused in api, 1200.0 s")


def test_the_limiters_answers_are_not_logged_as_4xx_unless_log_refusals(
    site: ModuleType, limiter: rk.Limiter, caplog: pytest.LogCaptureFixture
) -> None:
    from django.test import AsyncClient, Client, override_settings

    def warnings() -> list[tuple[str, int]]:
        return [(r.getMessage(), r.status_code) for r in caplog.records if r.name == "django.request"]  # type: ignore[attr-defined]

    async def async_codes(count: int) -> list[int]:
        client = AsyncClient()
        return [(await client.get("/async/api/items")).status_code for _ in range(count)]

    base = {"LIMITER": "django_site.limits.limiter", "TRUSTED_PROXIES": ["127.0.0.1"]}
    caplog.set_level("WARNING", logger="django.request")
    # The default: the middleware's and @limit's refusals, WSGI and ASGI, and ON_REFUSED's, are not logged.
    assert [Client().get("/api/items").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert [Client().get("/login").status_code for _ in range(3)] == [200, 200, 429]
    assert asyncio.run(async_codes(4)) == [200, 200, 200, 429]
    with override_settings(RATEKEEPER={**base, "ON_REFUSED": "django_site.limits.teapot"}):
        assert Client().get("/api/items").status_code == 418
    assert warnings() == []
    assert Client().get("/no/such/page").status_code == 404  # Django's other 4xx are logged as ever
    assert warnings() == [("Not Found: /no/such/page", 404)]
    caplog.clear()
    limiter.reset()
    with override_settings(RATEKEEPER={**base, "LOG_REFUSALS": True}):
        assert [Client().get("/api/items").status_code for _ in range(4)] == [200, 200, 200, 429]
        assert [Client().get("/login").status_code for _ in range(3)] == [200, 200, 429]
        assert asyncio.run(async_codes(4)) == [200, 200, 200, 429]
    assert warnings() == [
        ("Too Many Requests: /api/items", 429),
        ("Too Many Requests: /login", 429),
        ("Too Many Requests: /async/api/items", 429),
    ]


def test_exempt_paths_joined_into_one_regex_match_as_each_would() -> None:
    import re

    from ratekeeper.django import _exempt_search

    paths = ["/health", "/HEALTH", "/healthz", "/static/a.css", "/a/a", "/a/b", "/b/b", "/x", ""]
    cases = [
        [r"^/health$", r"^/static/"],
        [r"^/(health|ready)$", r"^/static/(?P<name>.+)$"],
        [r"^/health$", r"(?i)^/health$"],  # a global flag: cannot be joined, tried one by one
        [r"^/(a)/\1$", r"^/(b)/\1$"],  # numbered references: cannot be joined either
        [r"^/x$"],
    ]
    for patterns in cases:
        compiled = tuple(re.compile(pattern) for pattern in patterns)
        search = _exempt_search(compiled)
        assert search is not None
        for path in paths:
            assert bool(search(path)) == any(p.search(path) for p in compiled), (patterns, path)
    assert _exempt_search(()) is None


def test_the_fields_are_added_alike_directly_or_through_djangos_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    import ratekeeper._django_gate as gate
    from django.http import HttpResponse

    def added(plain_store: bool) -> list[tuple[str, str]]:
        monkeypatch.setattr(gate, "_PLAIN_STORE", plain_store)
        response = HttpResponse("ok", headers={"RateLimit": '"view";r=1', "Retry-After": "5"})
        gate._add_fields(
            response,
            [("Retry-After", "60"), ("RateLimit-Policy", '"api";q=3;w=3600'), ("RateLimit", '"api";r=0;t=60')],
        )
        gate._add_fields(response, [("Retry-After", "7")])
        return list(response.items())

    assert gate._PLAIN_STORE  # this Django keeps its fields where the middleware writes them
    assert added(True) == added(False)
    assert dict(added(True)) == {
        "Content-Type": "text/html; charset=utf-8",
        "RateLimit": '"view";r=1, "api";r=0;t=60',
        "Retry-After": "60",
        "RateLimit-Policy": '"api";q=3;w=3600',
    }


# --- @limit -------------------------------------------------------------------------------------------------------


def test_a_function_view_gets_a_group_of_its_own(client: httpx.Client) -> None:
    answers = [client.get("/login") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert members(answers[0].headers["RateLimit-Policy"]) == {"django_site.views.login": {"q": 2, "w": 3600}}
    refused(answers[2], "django_site.views.login", 1800)


def test_an_async_view_with_its_own_key_and_a_missing_key(client: httpx.Client) -> None:
    def login(key: str | None) -> httpx.Response:
        return client.get("/async/login", headers={"X-API-Key": key} if key else {})

    assert [login("a").status_code for _ in range(3)] == [200, 200, 429]
    assert login("b").status_code == 200
    missing = login(None)
    assert missing.status_code == 429
    assert missing.json()["detail"] == "This request carries no key the rate limiter can use"


def test_a_class_based_view_shares_its_group_between_its_methods(client: httpx.Client) -> None:
    assert client.get("/report").json() == {"report": "get"}
    assert client.post("/report").json() == {"report": "post"}
    refused(client.get("/report"), "reports", 1800)
    assert client.get("/async/report").status_code == 200
    refused(client.get("/async/report"), "django_site.views.AsyncReport", 3600)


def test_method_decorator_limits_one_method(client: httpx.Client) -> None:
    assert [client.get("/export").status_code for _ in range(3)] == [200] * 3
    assert client.post("/export").status_code == 200
    refused(client.post("/export"), "exports", 3600)


def test_a_view_limit_and_the_middlewares_fields_are_one_list(client: httpx.Client, site: ModuleType) -> None:
    from django.test import Client, override_settings

    # /api/login: the middleware's "api" rule, and the view's own group: both in one RateLimit list.
    with override_settings(ROOT_URLCONF="django_site.urls_nested"):
        answer = Client().get("/api/login")
    assert answer.status_code == 200
    assert set(members(answer.headers["RateLimit"])) == {"api", "django_site.views.login"}
    assert set(members(answer.headers["RateLimit-Policy"])) == {"api", "django_site.views.login"}


# --- Django REST framework ------------------------------------------------------------------------------------------


def test_drf_refuses_with_its_own_429_and_ratekeepers_wait(client: httpx.Client, site: ModuleType) -> None:
    answers = [client.get("/drf/items") for _ in range(3)]
    assert [a.status_code for a in answers] == [200] * 3
    # "3/hour" as DRF's sliding log: the three leave the window an hour after they came.
    assert members(answers[0].headers["RateLimit"]) == {"items": {"r": 2, "t": 3600}}
    site.clock.advance(0.25)  # the wait is now 3599.75 s: DRF rounds it up
    throttled = client.get("/drf/items")
    assert throttled.status_code == 429
    assert throttled.json() == {"detail": "Request was throttled. Expected available in 3600 seconds."}
    assert throttled.headers["Retry-After"] == "3600"
    assert members(throttled.headers["RateLimit"]) == {"items": {"r": 0, "t": 3600}}
    assert members(throttled.headers["RateLimit-Policy"]) == {"items": {"q": 3, "w": 3600}}


def test_drf_views_without_a_scope_are_not_throttled(client: httpx.Client) -> None:
    assert [client.get("/drf/open").status_code for _ in range(5)] == [200] * 5
    assert "RateLimit" not in client.get("/drf/open").headers


def test_drf_scope_rates_follow_the_clock(client: httpx.Client, site: ModuleType) -> None:
    assert [client.post("/drf/uploads").status_code for _ in range(3)] == [201, 201, 429]
    site.clock.advance(59.5)  # "2/min" as DRF's sliding log: both come back when the minute is over
    assert client.post("/drf/uploads").status_code == 429
    site.clock.advance(0.5)
    assert [client.post("/drf/uploads").status_code for _ in range(3)] == [201, 201, 429]


def test_drf_user_throttle_keys_by_user_then_by_ip(client: httpx.Client) -> None:
    def get(user: str | None) -> int:
        return client.get("/drf/user", headers={"X-User": user} if user else {}).status_code

    assert [get("alice") for _ in range(5)] == [200] * 4 + [429]
    assert get("bob") == 200
    assert [get(None) for _ in range(5)] == [200] * 4 + [429]  # anonymous: by client IP


def test_drf_throttle_routed_by_the_limiters_rules(client: httpx.Client) -> None:
    answers = [client.get("/routed/drf") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].headers["Retry-After"] == "1800"
    assert members(answers[2].headers["RateLimit"]) == {"routed": {"r": 0, "t": 1800}}


def test_drf_throttle_wait_is_the_exact_retry_after(site: ModuleType, limiter: rk.Limiter) -> None:
    from django_site.views import ItemsAPI
    from ratekeeper.django import ScopedRateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    factory = APIRequestFactory()
    throttle = ScopedRateKeeperThrottle()
    view = ItemsAPI()
    view.headers = {}
    results = [throttle.allow_request(factory.get("/drf/items"), view) for _ in range(4)]
    assert results == [True, True, True, False]
    site.clock.advance(0.125)
    assert not throttle.allow_request(factory.get("/drf/items"), view)
    assert throttle.wait() == 3600 - 0.125
    assert throttle.decision is not None
    assert throttle.decision.retry_after == throttle.wait()


def test_drf_anon_throttle_leaves_users_alone(site: ModuleType, limiter: rk.Limiter) -> None:
    from django_site.auth import HeaderUser
    from django_site.views import OpenAPI
    from ratekeeper.django import AnonRateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    factory = APIRequestFactory()
    throttle = AnonRateKeeperThrottle()
    view = OpenAPI()
    anonymous = [throttle.allow_request(factory.get("/"), view) for _ in range(3)]
    assert anonymous == [True, True, False]  # "anon": "2/hour", by IP
    signed_in = factory.get("/")
    signed_in.user = HeaderUser("carol")
    assert all(throttle.allow_request(signed_in, view) for _ in range(5))


# --- every store ---------------------------------------------------------------------------------------------------


def test_middleware_decorator_and_throttle_on_every_store(site: ModuleType, make_limiter: MakeLimiter) -> None:
    from django.test import AsyncClient, Client, override_settings

    limiter = make_limiter(rules=[rk.Rule(r"^/api/", "api", "3/hour"), rk.Rule(r"^/async/api/", "a", "3/hour")])
    with override_settings(RATEKEEPER={"LIMITER": limiter}):
        client = Client()
        assert [client.get("/api/items").status_code for _ in range(4)] == [200, 200, 200, 429]
        assert [client.get("/login").status_code for _ in range(3)] == [200, 200, 429]
        assert [client.get("/drf/items").status_code for _ in range(4)] == [200, 200, 200, 429]

        async def async_requests() -> list[int]:
            async_client = AsyncClient()
            return [(await async_client.get("/async/api/items")).status_code for _ in range(4)]

        assert asyncio.run(async_requests()) == [200, 200, 200, 429]
    groups = limiter.stats()["groups"]
    assert {name: groups[name]["refused"] for name in ("api", "a", "django_site.views.login", "items")} == {
        "api": 1,
        "a": 1,
        "django_site.views.login": 1,
        "items": 1,
    }


# --- bad settings and arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "error", "loc"),
    [
        ({"MODE": "fast"}, rk.InvalidValue, ("RATEKEEPER", "MODE")),
        ({"MAX_DELAY": -1}, rk.InvalidValue, ("RATEKEEPER", "MAX_DELAY")),
        ({"SHADOW": "yes"}, rk.InvalidType, ("RATEKEEPER", "SHADOW")),
        ({"MISSING_KEY_STATUS": 500}, rk.InvalidValue, ("RATEKEEPER", "MISSING_KEY_STATUS")),
        ({"RATE": "10/min"}, rk.InvalidValue, ("RATEKEEPER", "RATE")),
        ({"LIMITER": "10/min"}, rk.InvalidValue, ("RATEKEEPER", "LIMITER")),
        ({"LIMITER": "django_site.settings.SECRET_KEY"}, rk.InvalidType, ("RATEKEEPER", "LIMITER")),
        ({"LIMITER": 3}, rk.InvalidType, ("RATEKEEPER", "LIMITER")),
        ({"CONFIG": "/no/such/file.toml"}, rk.InvalidValue, ("RATEKEEPER", "CONFIG")),
        ({"LIMITER": "django_site.limits.limiter", "CONFIG": "x.toml"}, rk.InvalidValue, ("RATEKEEPER", "CONFIG")),
        ({"KEY": "X-API-Key"}, rk.InvalidValue, ("RATEKEEPER", "KEY")),
        ({"KEY": 3}, rk.InvalidType, ("RATEKEEPER", "KEY")),
        ({"KEY": "ratekeeper.keys.client_ip"}, rk.InvalidType, ("RATEKEEPER", "KEY")),  # not called: client_ip()
        ({"TRUSTED_PROXIES": ["10.0.0.0/8", "proxy"]}, rk.InvalidValue, ("RATEKEEPER", "TRUSTED_PROXIES", 1)),
        ({"EXEMPT_PATHS": "^/health$"}, rk.InvalidType, ("RATEKEEPER", "EXEMPT_PATHS")),
        ({"EXEMPT_PATHS": ["^/(health"]}, rk.InvalidValue, ("RATEKEEPER", "EXEMPT_PATHS", 0)),
        ({"LOG_REFUSALS": "yes"}, rk.InvalidType, ("RATEKEEPER", "LOG_REFUSALS")),
    ],
)
def test_bad_settings_name_the_setting(
    site: ModuleType, setting: dict[str, Any], error: type[Exception], loc: tuple[str | int, ...]
) -> None:
    from django.test import override_settings
    from ratekeeper.django import get_limiter

    with override_settings(RATEKEEPER=setting), pytest.raises(error) as raised:
        get_limiter()
    assert raised.value.loc == loc  # type: ignore[attr-defined]


def test_the_middleware_needs_a_limiter(site: ModuleType) -> None:
    from django.http import HttpResponse
    from django.test import override_settings
    from ratekeeper.django import RateLimitMiddleware

    with override_settings(RATEKEEPER={}), pytest.raises(rk.InvalidValue) as raised:
        RateLimitMiddleware(lambda request: HttpResponse())
    assert raised.value.loc == ("RATEKEEPER", "LIMITER")
    with override_settings(RATEKEEPER=["LIMITER"]), pytest.raises(rk.InvalidType) as wrong:
        RateLimitMiddleware(lambda request: HttpResponse())
    assert wrong.value.loc == ("RATEKEEPER",)


@pytest.mark.parametrize(
    ("rates", "error", "loc"),
    [
        ({"items": "10/fortnight"}, rk.InvalidValue, ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES", "items", "rate")),
        ({"items": ["10/s", "x"]}, rk.InvalidValue, ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES", "items", 1, "rate")),
        ({"items": 10}, rk.InvalidType, ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES", "items")),
        ({"other": "10/min"}, rk.InvalidValue, ("REST_FRAMEWORK", "DEFAULT_THROTTLE_RATES", "items")),
    ],
)
def test_bad_throttle_rates_name_the_scope(
    site: ModuleType, rates: dict[str, Any], error: type[Exception], loc: tuple[str | int, ...]
) -> None:
    from django.conf import settings
    from django.test import override_settings
    from django_site.views import ItemsAPI
    from ratekeeper.django import ScopedRateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    fresh = rk.Limiter(rules=[])
    drf = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    with override_settings(RATEKEEPER={"LIMITER": fresh}, REST_FRAMEWORK=drf), pytest.raises(error) as raised:
        ScopedRateKeeperThrottle().allow_request(APIRequestFactory().get("/"), ItemsAPI())
    assert raised.value.loc == loc  # type: ignore[attr-defined]


def test_a_scope_whose_rate_is_none_is_not_throttled(site: ModuleType) -> None:
    from django.conf import settings
    from django.test import override_settings
    from django_site.views import ItemsAPI
    from ratekeeper.django import ScopedRateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    drf = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"items": None}}
    with override_settings(RATEKEEPER={"LIMITER": rk.Limiter(rules=[])}, REST_FRAMEWORK=drf):
        throttle = ScopedRateKeeperThrottle()
        assert all(throttle.allow_request(APIRequestFactory().get("/"), ItemsAPI()) for _ in range(10))
        assert throttle.wait() is None


def test_bad_decorator_arguments_name_the_field(site: ModuleType) -> None:
    from ratekeeper.django import limit, user

    cases: list[tuple[Any, type[Exception], tuple[str | int, ...]]] = [
        (lambda: limit(), rk.InvalidValue, ("limits",)),
        (lambda: limit("10/fortnight"), rk.InvalidValue, ("limits", 0, "rate")),
        (lambda: limit(10), rk.InvalidType, ("limits", 0)),
        (lambda: limit("5/min", key="X-API-Key"), rk.InvalidType, ("key",)),
        (lambda: limit("5/min", cost=2), rk.InvalidType, ("cost",)),
        (lambda: limit("5/min", limiter="default"), rk.InvalidType, ("limiter",)),
        (lambda: limit("5/min")(object), rk.InvalidType, ("view",)),
        (lambda: limit("5/min")(42), rk.InvalidType, ("view",)),
        (lambda: user("ip"), rk.InvalidType, ("fallback",)),
    ]
    for make, error, loc in cases:
        with pytest.raises(error) as raised:
            make()
        assert raised.value.loc == loc  # type: ignore[attr-defined]


# --- imports -------------------------------------------------------------------------------------------------------


def test_django_and_drf_are_imported_only_when_used() -> None:
    code = (
        "import sys, ratekeeper; assert 'django' not in sys.modules, 'ratekeeper imported django';"
        "import ratekeeper.django; assert 'rest_framework' not in sys.modules, 'ratekeeper.django imported DRF'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "DJANGO_SETTINGS_MODULE": ""})


# --- WSGI: gunicorn ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gunicorn_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """gunicorn serving the test project (WSGI): one worker of four threads; its clock stays at 0."""
    log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "django_site.settings"}
    with gunicorn_threads("django_site.wsgi:application", HERE, log, environment) as client:
        yield client


def test_on_gunicorn_the_middleware_refuses_with_exact_fields(gunicorn_site: httpx.Client) -> None:
    forwarded = {"X-Forwarded-For": "192.0.2.10"}
    answers = [gunicorn_site.get("/api/items", headers=forwarded) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused(answers[3], "api", 1200)
    assert gunicorn_site.get("/api/items", headers={"X-Forwarded-For": "192.0.2.11"}).status_code == 200


def test_on_gunicorn_drf_and_views_are_limited(gunicorn_site: httpx.Client) -> None:
    items = [gunicorn_site.get("/drf/items") for _ in range(4)]
    assert [a.status_code for a in items] == [200, 200, 200, 429]
    assert items[3].headers["Retry-After"] == "3600"
    assert json.loads(items[3].text)["detail"] == "Request was throttled. Expected available in 3600 seconds."
    assert [gunicorn_site.post("/report").status_code for _ in range(3)] == [200, 200, 429]
    assert [gunicorn_site.post("/export").status_code for _ in range(2)] == [200, 429]


def test_on_gunicorn_a_streamed_response_holds_its_permit_until_the_body_is_sent(gunicorn_site: httpx.Client) -> None:
    # One in flight per key: each stream starts once the previous one has been read to its end.
    for _ in range(20):
        with gunicorn_site.stream("GET", "/stream", headers={"Connection": "close"}) as response:
            assert response.status_code == 200
            assert sum(len(chunk) for chunk in response.iter_bytes()) == 64 * 1024
    with gunicorn_site.stream("GET", "/stream", params={"chunks": 100_000}) as open_stream:
        assert open_stream.status_code == 200
        chunks = open_stream.iter_raw()  # kept: dropping the iterator would close the stream now
        next(chunks)
        # The body goes on (more than the sockets hold): its permit is held.
        assert gunicorn_site.get("/stream").status_code == 429
    # The client left: the server's next write fails and Django closes the body. The server notices on its
    # own time, so ask (a bounded number of times) until the permit is back.
    codes = []
    for _ in range(200):
        codes.append(gunicorn_site.get("/stream").status_code)
        if codes[-1] == 200:
            break
        time.sleep(0.05)
    assert codes[-1] == 200, codes


# --- stacked and shared limits (issue 32, bug 1), changed DRF rates (bug 4) ----------------------------------------


@pytest.fixture
def fresh(site: ModuleType) -> Iterator[rk.ManualClock]:
    """A limiter of this test's own in the settings, on a ManualClock (returned)."""
    from django.test import override_settings

    clock = rk.ManualClock()
    with override_settings(RATEKEEPER={"LIMITER": rk.Limiter(rules=[], clock=clock)}):
        yield clock


def statuses(view: Any, count: int, method: str = "get", **extra: Any) -> list[int]:
    from django.test import RequestFactory

    factory = RequestFactory()
    return [view(getattr(factory, method)("/v", **extra)).status_code for _ in range(count)]


def test_two_limits_stacked_on_a_view_are_two_limits(fresh: rk.ManualClock) -> None:
    from django.http import HttpResponse
    from ratekeeper.django import get_limiter, limit

    @limit("2/min")
    @limit("2/min")
    def twice(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    @limit("1/min")
    @limit("3/min")
    def unlike(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    assert statuses(twice, 3) == [200, 200, 429]  # each counts the request once: both admit 2
    assert statuses(unlike, 2) == [200, 429]  # other limits: no clash of group names
    name = f"{__name__}.test_two_limits_stacked_on_a_view_are_two_limits.<locals>"
    assert {f"{name}.twice", f"{name}.twice#2", f"{name}.unlike", f"{name}.unlike#2"} <= set(get_limiter().groups)


def test_decorated_as_view_results_of_two_classes_are_limited_apart(fresh: rk.ManualClock) -> None:
    from django.http import HttpResponse
    from django.utils.decorators import method_decorator
    from django.views import View
    from ratekeeper.django import limit

    class First(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("first")

    class Second(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("second")

    first, second = limit("1/min")(First.as_view()), limit("1/min")(Second.as_view())
    assert statuses(first, 2) == [200, 429]
    assert statuses(second, 2) == [200, 429]  # a budget of its own
    stacked = limit("2/min")(limit("2/min")(First.as_view()))
    assert statuses(stacked, 3) == [200, 200, 429]

    @method_decorator(limit("1/min"), name="dispatch")
    class Third(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("third")

    @method_decorator(limit("1/min"), name="dispatch")
    class Fourth(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("fourth")

    # Both dispatch methods are View.dispatch: each class is a limit of its own all the same.
    assert statuses(Third.as_view(), 2) == [200, 429]
    assert statuses(Fourth.as_view(), 2) == [200, 429]


def test_changed_throttle_rates_change_the_scopes_group(site: ModuleType) -> None:
    from django.conf import settings
    from django.test import override_settings
    from django_site.views import ItemsAPI
    from ratekeeper.django import ScopedRateKeeperThrottle
    from rest_framework.test import APIRequestFactory

    limiter = rk.Limiter(rules=[], clock=rk.ManualClock())

    def allowed(rate: str, count: int) -> list[bool]:
        drf = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"items": rate}}
        with override_settings(RATEKEEPER={"LIMITER": limiter}, REST_FRAMEWORK=drf):
            throttle = ScopedRateKeeperThrottle()
            return [throttle.allow_request(APIRequestFactory().get("/"), ItemsAPI()) for _ in range(count)]

    assert allowed("1/min", 2) == [True, False]
    # The rate changes: the group's limit with it, and the key keeps its history (one request in the log).
    assert allowed("3/min", 3) == [True, True, False]
    assert limiter.rules[0].limits == [rk.Limit("3/min", algorithm="sliding_log")]
    assert allowed("1/min", 1) == [False]


def test_a_group_of_the_limiters_own_is_never_replaced(site: ModuleType) -> None:
    from django.test import override_settings
    from ratekeeper.django import limit

    limiter = rk.Limiter(rules=[], clock=rk.ManualClock())
    limiter.add_group("shared", ["5/min"])

    @limit("1/min", group="shared")
    def view(request: Any) -> Any:
        raise AssertionError("not served")

    with override_settings(RATEKEEPER={"LIMITER": limiter}), pytest.raises(rk.InvalidValue) as raised:
        statuses(view, 1)
    assert raised.value.loc == ("group",)
    assert limiter.rules[0].limits == [rk.Limit("5/min")]


# --- the peers' concepts on @limit -----------------------------------------------------------------------------------


def test_limit_methods_limits_only_those_methods(fresh: rk.ManualClock) -> None:
    from django.http import HttpResponse
    from ratekeeper.django import limit

    @limit("1/min", methods=["post"])
    def form(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    assert statuses(form, 3) == [200, 200, 200]
    assert "RateLimit" not in form(__import__("django.test").test.RequestFactory().get("/")).headers
    assert statuses(form, 2, "post") == [200, 429]


def test_block_false_serves_with_request_limited(fresh: rk.ManualClock) -> None:
    from django.http import JsonResponse
    from django.test import RequestFactory
    from ratekeeper.django import limit

    @limit("1/min", block=False)
    def soft(request: Any) -> JsonResponse:
        return JsonResponse({"limited": request.limited})

    answers = [soft(RequestFactory().get("/")) for _ in range(2)]
    assert [(a.status_code, json.loads(a.content)) for a in answers] == [
        (200, {"limited": False}),
        (200, {"limited": True}),
    ]
    assert (
        members(answers[1].headers["RateLimit"])[
            f"{__name__}.test_block_false_serves_with_request_limited.<locals>.soft"
        ]["r"]
        == 0
    )
    assert "Retry-After" not in answers[1].headers  # the view answered: nothing to retry


def test_a_rate_computed_per_request(fresh: rk.ManualClock) -> None:
    from django.http import HttpResponse
    from django.test import RequestFactory
    from ratekeeper.django import limit

    def plan(request: Any) -> str | None:
        tier = request.GET.get("tier")
        return None if tier == "internal" else "3/min" if tier == "pro" else "1/min"

    @limit(plan)
    def search(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    def codes(tier: str, count: int) -> list[int]:
        return [search(RequestFactory().get("/", {"tier": tier})).status_code for _ in range(count)]

    assert codes("free", 2) == [200, 429]
    assert codes("pro", 4) == [200, 200, 200, 429]  # another rate: a group, and a budget, of its own
    assert codes("internal", 5) == [200] * 5  # None: not limited
    refused_answer = search(RequestFactory().get("/", {"tier": "free"}))
    assert refused_answer.headers["Retry-After"] == "60"
    assert f"{__name__}.test_a_rate_computed_per_request.<locals>.search@1/min" in members(
        refused_answer.headers["RateLimit"]
    )


def test_the_algorithm_setting_decides_as_django_ratelimit(site: ModuleType) -> None:
    from django.http import HttpResponse
    from django.test import override_settings
    from ratekeeper.django import limit

    @limit("2/min")
    def view(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    clock = rk.ManualClock()
    with override_settings(RATEKEEPER={"LIMITER": rk.Limiter(rules=[], clock=clock), "ALGORITHM": "fixed_window"}):
        assert statuses(view, 3) == [200, 200, 429]
        clock.advance(30)  # GCRA would admit one now; a fixed window waits for its end
        assert statuses(view, 1) == [429]
        clock.advance(30)
        assert statuses(view, 3) == [200, 200, 429]


def test_the_peers_rate_spellings_on_limit(fresh: rk.ManualClock) -> None:
    from django.http import HttpResponse
    from ratekeeper.django import limit

    @limit("2 per 10 seconds; 3/minute")
    def view(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    assert statuses(view, 3) == [200, 200, 429]
    fresh.advance(10)
    assert statuses(view, 2) == [200, 429]  # the minute's 3 are used up
    with pytest.raises(rk.InvalidValue) as raised:
        limit("10/s", "0/m")
    assert raised.value.loc == ("limits", 1, "rate")
    with pytest.raises(rk.InvalidValue) as none:
        limit(None)  # type: ignore[arg-type]
    assert none.value.loc == ("limits",)


@pytest.mark.skipif(not hasattr(rk.Limiter, "peek"), reason="needs Limiter.peek")
def test_usage_reads_a_views_limit_without_counting(fresh: rk.ManualClock) -> None:
    from django.http import HttpResponse
    from django.test import RequestFactory
    from ratekeeper.django import limit, usage

    @limit("2/min")
    def view(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    request = RequestFactory().get("/")
    before = usage(view, request)
    assert before is not None
    assert (before.allowed, before.remaining) == (True, 2)
    assert [usage(view, request) is not None for _ in range(5)] == [True] * 5  # counting nothing
    assert statuses(view, 2) == [200, 200]
    after = usage(view, request)
    assert after is not None
    assert (after.allowed, after.remaining, after.retry_after) == (False, 0, 30.0)
    with pytest.raises(rk.InvalidType):
        usage(lambda request: None, request)


def test_new_settings_and_arguments_name_the_field(site: ModuleType) -> None:
    from django.test import override_settings
    from ratekeeper.django import get_limiter, limit

    for setting, error, loc in [
        ({"ALGORITHM": "fifo"}, rk.InvalidValue, ("RATEKEEPER", "ALGORITHM")),
        ({"THROTTLE_ALGORITHM": "gcra2"}, rk.InvalidValue, ("RATEKEEPER", "THROTTLE_ALGORITHM")),
    ]:
        with override_settings(RATEKEEPER=setting), pytest.raises(error) as raised:
            get_limiter()
        assert raised.value.loc == loc  # type: ignore[attr-defined]
    cases: list[tuple[Any, type[Exception], tuple[str | int, ...]]] = [
        (lambda: limit("5/min", methods=["GET", 3]), rk.InvalidValue, ("methods", 1)),
        (lambda: limit("5/min", methods=7), rk.InvalidType, ("methods",)),
        (lambda: limit("5/min", block="no"), rk.InvalidType, ("block",)),
        (lambda: limit("5/min", algorithm="fifo"), rk.InvalidValue, ("algorithm",)),
    ]
    for make, error, loc in cases:
        with pytest.raises(error) as raised:
            make()
        assert raised.value.loc == loc  # type: ignore[attr-defined]


def test_log_refusals_adds_one_ratekeeper_record_per_refusal(
    site: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    from django.test import override_settings

    caplog.set_level("WARNING", logger="ratekeeper.refusals")
    limiter = rk.Limiter(rules=[], clock=rk.ManualClock())
    for log_refusals, expected in ((False, 0), (True, 2)):
        limiter.reset()
        caplog.clear()
        with override_settings(RATEKEEPER={"LIMITER": limiter, "LOG_REFUSALS": log_refusals}):
            from django_site.views import login

            assert statuses(login, 4) == [200, 200, 429, 429]
        records = [r for r in caplog.records if r.name == "ratekeeper.refusals"]
        assert len(records) == expected
    assert records[0].group == "django_site.views.login"  # type: ignore[attr-defined]
    assert records[0].peer == "127.0.0.1"  # type: ignore[attr-defined]


def test_penalty_and_epoch_reset_settings(site: ModuleType) -> None:
    from django.test import override_settings
    from django_site.views import login

    clock = rk.ManualClock(1000.0)
    settings = {
        "LIMITER": rk.Limiter(rules=[], clock=clock),
        "PENALTY": rk.Penalty(breaches=2, within=60.0, block=3600.0),
        "HEADERS": rk.HeaderOptions(legacy=True, reset="epoch"),
    }
    with override_settings(RATEKEEPER=settings):
        assert statuses(login, 4) == [200, 200, 429, 429]  # "2/hour"; two refusals: blocked for an hour
        clock.advance(1800)  # a slot is back at the rate, but the penalty holds
        assert statuses(login, 1) == [429]
        clock.advance(1800)
        assert statuses(login, 1) == [200]
        from django.test import RequestFactory

        answer = login(RequestFactory().get("/"))
        assert int(answer.headers["X-RateLimit-Reset"]) > 1_000_000_000  # a Unix time, as the peers send it
