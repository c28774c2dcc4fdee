"""What the README's and the guide's web examples build, run as they are written and driven on a real server.

Each page's blocks run in order in one namespace (``tests/_docs.py``); ``<!-- name: NAME -->`` marks the
block after which a test takes what it needs from that namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import ratekeeper as rk
from _docs import page_namespace
from _web import Server, members


@pytest.mark.parametrize("page", ["README.md", "docs/fastapi.md"])
def test_the_fastapi_example_limits_paths_and_routes(page: str) -> None:
    app = page_namespace(page, "fastapi")["app"]
    with Server(app) as client:
        items = client.get("/api/items")
        assert items.status_code == 200
        assert items.json() == [1, 2, 3]
        assert members(items.headers["RateLimit-Policy"]) == {"api": {"q": 100, "w": 60}}
        logins = [client.post("/login").status_code for _ in range(6)]
        assert logins == [200] * 5 + [429]
        health = client.get("/health")
        assert health.status_code == 200
        assert "RateLimit" not in health.headers


@pytest.mark.parametrize("page", ["README.md", "docs/flask.md"])
def test_the_flask_example_limits_paths_and_views(page: str) -> None:
    from test_flask import Served

    app = page_namespace(page, "flask")["app"]
    with Served(app) as client:
        items = client.get("/api/items", headers={"X-API-Key": "k"})
        assert items.status_code == 200
        assert members(items.headers["RateLimit"]) == {"api": {"r": 99, "t": 1}}
        # No key: the shared anonymous key, limited like any other.
        assert [client.post("/login").status_code for _ in range(6)] == [200] * 5 + [429]


def test_the_metrics_examples_serve_the_limiters_numbers_beside_the_limits() -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from test_flask import Served

    def requests_total(text: str) -> dict[str, float]:
        families = {f.name: f for f in text_string_to_metric_families(text)}
        return {s.labels["result"]: s.value for s in families["ratekeeper_requests"].samples}

    fastapi_app = page_namespace("docs/metrics.md", "metrics_fastapi")["app"]
    with Server(fastapi_app) as client:
        assert client.get("/api/items").status_code == 200
        scraped = [client.get("/metrics", follow_redirects=True) for _ in range(3)]
        assert [r.status_code for r in scraped] == [200] * 3
        assert requests_total(scraped[-1].text)["allowed"] == 1
    flask_app = page_namespace("docs/metrics.md", "metrics_flask")["app"]
    with Served(flask_app) as client:
        assert client.get("/api/items").status_code == 200
        scraped = [client.get("/metrics") for _ in range(3)]
        assert [r.status_code for r in scraped] == [200] * 3
        assert "RateLimit" not in scraped[-1].headers
        assert requests_total(scraped[-1].text)["allowed"] == 1


# --- Django and DRF ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def urlconf(name: str, namespace: dict[str, Any]) -> Iterator[str]:
    """An example's namespace as an importable module (Django imports ROOT_URLCONF by name)."""
    module = types.ModuleType(name)
    module.__dict__.update(namespace)
    sys.modules[name] = module
    try:
        yield name
    finally:
        del sys.modules[name]


def test_the_django_examples_limit_paths_and_views(django_site: None) -> None:
    from django.core.asgi import get_asgi_application
    from django.test import override_settings

    views = page_namespace("docs/django.md", "django_views")  # the settings block comes first
    # Django's own middleware as a project has it: a POST without a CSRF token is a 403 unless the view is exempt.
    middleware = ["django.middleware.csrf.CsrfViewMiddleware", *views["MIDDLEWARE"]]
    with (
        urlconf("docs_django", views) as name,
        override_settings(MIDDLEWARE=middleware, RATEKEEPER=views["RATEKEEPER"], ROOT_URLCONF=name),
        Server(get_asgi_application()) as client,
    ):
        items = client.get("/api/items")
        assert items.json() == {"items": [1, 2, 3]}
        assert members(items.headers["RateLimit-Policy"]) == {"api": {"q": 100, "w": 60}}
        # The page's login is exempt from CSRF: a POST without a token is decided by its limit, not refused 403.
        logins = [client.post("/login") for _ in range(6)]
        assert [r.status_code for r in logins] == [200] * 5 + [429]
        # The groups are named on the page: clients see "login" and "report", not the views' module paths.
        assert members(logins[0].headers["RateLimit"]) == {"login": {"r": 4, "t": 12}}
        assert members(logins[-1].headers["RateLimit"]) == {"login": {"r": 0, "t": 12}}
        report = client.get("/report")  # async, keyed by user: no user here, so by client IP
        assert report.json() == {"rows": 0}
        assert members(report.headers["RateLimit"]) == {"report": {"r": 9, "t": 6}}


def test_the_drf_example_throttles_with_drfs_own_settings(django_site: None) -> None:
    from django.conf import settings
    from django.test import Client, override_settings
    from django.utils.module_loading import import_string

    drf = page_namespace("docs/django.md", "drf")
    rest_framework = {**settings.REST_FRAMEWORK, **drf["REST_FRAMEWORK"]}
    # DRF reads DEFAULT_THROTTLE_CLASSES once, when rest_framework.views is imported (before this test):
    # the view gets them as a project that starts with these settings would.
    drf["Upload"].throttle_classes = [import_string(name) for name in rest_framework["DEFAULT_THROTTLE_CLASSES"]]
    limiter = rk.Limiter(rules=[])
    with (
        urlconf("readme_drf_urls", {"urlpatterns": drf["urlpatterns"]}) as name,  # the page's, with its /upload
        override_settings(
            REST_FRAMEWORK=rest_framework, RATEKEEPER={"LIMITER": limiter}, MIDDLEWARE=[], ROOT_URLCONF=name
        ),
    ):
        uploads = [Client().post("/upload") for _ in range(21)]
    assert [r.status_code for r in uploads] == [201] * 20 + [429]
    # "20/hour" as DRF decides it, a sliding log: the first of the 20 frees its place an hour on.
    assert uploads[-1].headers["Retry-After"] == "3600"
    assert members(uploads[-1].headers["RateLimit"])["uploads"] == {"r": 0, "t": 3600}
    # Every throttle of the view adds its fields: one list (a sliding log's t: when its first stamp leaves).
    assert members(uploads[0].headers["RateLimit"]) == {
        "anon": {"r": 99, "t": 86400},
        "user": {"r": 999, "t": 86400},
        "uploads": {"r": 19, "t": 3600},
    }


# --- limiting calls you make ---------------------------------------------------------------------------------------


class Answer:
    def __init__(self, body: Any) -> None:
        self.body = body

    def json(self) -> Any:
        return self.body


def test_the_sync_calls_example_waits_its_turn() -> None:
    namespace = page_namespace("docs/outgoing-calls.md", "limited_sync")
    asked: list[tuple[str, str]] = []

    class FakeClient:
        def get(self, url: str, headers: dict[str, str]) -> Answer:
            asked.append((url, headers["Authorization"]))
            return Answer([{"number": 1}] if "issues" in url else {"rate": {}})

    namespace["github_api"].close()
    namespace["github_api"] = FakeClient()
    assert namespace["issues"]("octo/repo", token="t1") == [{"number": 1}]
    assert namespace["rate_limit_status"]("t1") == {"rate": {}}
    assert asked == [("/repos/octo/repo/issues", "Bearer t1"), ("/rate_limit", "Bearer t1")]
    github: rk.Limiter = namespace["github"]
    assert github.check("t1").remaining == 97  # two calls of the token's burst of 100, and this check


def test_the_async_calls_example_waits_its_turn() -> None:
    namespace = page_namespace("docs/outgoing-calls.md", "limited_async")
    posted: list[tuple[str, str]] = []

    class FakeAsyncClient:
        async def post(self, url: str, json: dict[str, str], headers: dict[str, str]) -> Answer:
            posted.append((url, headers["X-API-Key"]))
            return Answer({"text": "done"} if url.endswith("complete") else [0.5])

    namespace["github_api"].close()
    asyncio.run(namespace["models_api"].aclose())
    namespace["models_api"] = FakeAsyncClient()
    assert asyncio.run(namespace["complete"]("x" * 8000, api_key="k")) == "done"
    assert asyncio.run(namespace["embed_all"](["a", "b"], "k")) == [[0.5], [0.5]]
    assert posted == [("/v1/complete", "k"), ("/v1/embed", "k"), ("/v1/embed", "k")]
    models: rk.Limiter = namespace["models"]
    assert models.check("k").remaining == 54  # 3 for the long prompt, 1 per embedding, 1 for this check
