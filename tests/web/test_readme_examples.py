"""The README's complete web examples, run as they are written, on a real server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from _web import Server, members

README = Path(__file__).resolve().parent.parent.parent / "README.md"


def example(name: str) -> dict[str, Any]:
    """Runs the README's code block marked ``<!-- example: NAME ... -->`` and returns its namespace."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- example: {name}\b.*?-->\n```python\n(.*?)\n```", text, re.DOTALL)
    assert found, f"README.md has no example {name!r}"
    namespace: dict[str, Any] = {"__name__": f"readme_{name}"}
    exec(compile(found.group(1), f"README.md:{name}", "exec"), namespace)
    return namespace


def test_the_fastapi_example_limits_paths_and_routes() -> None:
    app = example("fastapi")["app"]
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


def test_the_flask_example_limits_paths_and_views() -> None:
    from test_flask import Served

    app = example("flask")["app"]
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

    fastapi_app = example("metrics_fastapi")["app"]
    with Server(fastapi_app) as client:
        assert client.get("/api/items").status_code == 200
        scraped = [client.get("/metrics", follow_redirects=True) for _ in range(3)]
        assert [r.status_code for r in scraped] == [200] * 3
        assert requests_total(scraped[-1].text)["allowed"] == 1
    flask_app = example("metrics_flask")["app"]
    with Served(flask_app) as client:
        assert client.get("/api/items").status_code == 200
        scraped = [client.get("/metrics") for _ in range(3)]
        assert [r.status_code for r in scraped] == [200] * 3
        assert "RateLimit" not in scraped[-1].headers
        assert requests_total(scraped[-1].text)["allowed"] == 1
