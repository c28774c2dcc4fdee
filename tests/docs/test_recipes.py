"""The recipes of ``docs/recipes/``, run as they are written, and held to what each page promises: the web
ones on a real server (uvicorn or Werkzeug, in a thread), the timing on a ``ManualClock``."""

from __future__ import annotations

from typing import Any

import httpx
import ratekeeper as rk
from _docs import page_namespace
from _web import Server, members


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- docs/recipes/fastapi-per-user.md ------------------------------------------------------------------------------


def test_fastapi_per_user_gives_two_users_separate_budgets() -> None:
    namespace = page_namespace("docs/recipes/fastapi-per-user.md", "app")
    lim: rk.Limiter = namespace["lim"]
    with Server(namespace["app"]) as client:
        alice = [client.get("/reports", headers=bearer("token-alice")) for _ in range(6)]
        bob = [client.get("/reports", headers=bearer("token-bob")) for _ in range(6)]
    assert [r.status_code for r in alice] == [200] * 5 + [429]
    assert [r.status_code for r in bob] == [200] * 5 + [429]
    assert alice[0].json() == {"owner": "Alice"}
    assert bob[0].json() == {"owner": "Bob"}
    assert members(alice[0].headers["RateLimit"]) == {"GET /reports": {"r": 4, "t": 12}}
    assert alice[5].headers["Retry-After"] == "12"  # "5/min": one back every 12 s
    # Keyed by the users' ids, not by the address both came from.
    assert not lim.check("u-1", group="GET /reports").allowed
    assert lim.check("127.0.0.1", group="GET /reports").remaining == 4


def test_fastapi_per_user_answers_a_request_without_a_user_as_the_page_says() -> None:
    namespace = page_namespace("docs/recipes/fastapi-per-user.md", "app")
    lim: rk.Limiter = namespace["lim"]
    with Server(namespace["app"]) as client:
        refused = client.get("/reports")
        bad_token = client.get("/reports", headers=bearer("token-mallory"))
        anonymous = [client.get("/search", params={"q": "x"}).status_code for _ in range(21)]
        signed_in = client.get("/search", headers=bearer("token-alice"))
    assert (refused.status_code, bad_token.status_code) == (401, 401)
    assert refused.json() == {"detail": "This request carries no key the rate limiter can use", "status": 401}
    assert lim.check("anonymous", group="GET /reports").remaining == 4  # counted nowhere
    # Anonymous visitors share one budget of 20; a signed-in user still has all of theirs.
    assert anonymous == [200] * 20 + [429]
    assert signed_in.status_code == 200
    assert members(signed_in.headers["RateLimit"]) == {"GET /search": {"r": 19, "t": 3}}
