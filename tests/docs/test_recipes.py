"""The recipes of ``docs/recipes/``, run as they are written, and held to what each page promises: the web
ones on a real server (uvicorn or Werkzeug, in a thread), the timing on a ``ManualClock``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from _docs import ROOT, page_namespace
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
        assert client.get("/reports", headers=bearer("token-alice")).status_code == 200
        refused = client.get("/reports")
        bad_token = client.get("/reports", headers=bearer("token-mallory"))
        anonymous = [client.get("/search", params={"q": "x"}).status_code for _ in range(21)]
        signed_in = client.get("/search", headers=bearer("token-alice"))
    # A 401 for a missing or unknown API key, as HTTP has it: with the scheme to authenticate by.
    for answer in (refused, bad_token):
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert answer.json() == {"detail": "Missing or unknown API key"}
    assert lim.check("anonymous", group="GET /reports").remaining == 4  # counted nowhere
    # Anonymous visitors share one budget of 20; a signed-in user still has all of theirs.
    assert anonymous == [200] * 20 + [429]
    assert signed_in.status_code == 200
    assert members(signed_in.headers["RateLimit"]) == {"GET /search": {"r": 19, "t": 3}}


# --- docs/recipes/login-failures.md --------------------------------------------------------------------------------


def on_clock(monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock, page: str, name: str) -> dict[str, Any]:
    """The namespace of ``page`` after block ``name``, run as written but with every ``rk.Limiter`` it makes
    on ``clock`` (unless the page gives one): the test moves time instead of sleeping."""
    real = rk.Limiter
    monkeypatch.setattr(rk, "Limiter", lambda *args, **kwargs: real(*args, **{"clock": clock, **kwargs}))
    try:
        return page_namespace(page, name)
    finally:
        monkeypatch.setattr(rk, "Limiter", real)


def werkzeug(monkeypatch: pytest.MonkeyPatch, app: Any) -> Any:
    """The Flask tests' server (Werkzeug's, threaded) for ``app``; their module is beside, in tests/web."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "web"))
    from test_flask import Served

    return Served(app)


def login_attempts(client: httpx.Client, passwords: list[str]) -> list[int]:
    return [client.post("/login", json={"username": "alice", "password": p}).status_code for p in passwords]


@pytest.mark.parametrize("framework", ["fastapi", "flask"])
def test_login_throttling_counts_only_failures(
    monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock, framework: str
) -> None:
    namespace = on_clock(monkeypatch, clock, "docs/recipes/login-failures.md", framework)
    served = Server(namespace["app"]) if framework == "fastapi" else werkzeug(monkeypatch, namespace["flask_app"])
    right, wrong = "correct horse", "guess"
    with served as client:
        # Successes are given back: ten of them leave the whole budget of 5 failures.
        assert login_attempts(client, [right] * 10) == [200] * 10
        assert login_attempts(client, [wrong] * 5) == [401] * 5
        locked = client.post("/login", json={"username": "alice", "password": right})
        assert locked.status_code == 429  # the right password too: a guesser cannot tell
        assert locked.headers["Retry-After"] == "180"
        assert locked.json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 180}
        clock.advance(179)
        assert login_attempts(client, [right]) == [429]
        clock.advance(1)
        # One attempt back: a success leaves it there, a failure spends it for another 3 minutes.
        assert login_attempts(client, [right, right, wrong, wrong, right]) == [200, 200, 401, 429, 429]
        clock.advance(180)
        assert login_attempts(client, [right]) == [200]


# --- docs/recipes/api-key-tiers.md ---------------------------------------------------------------------------------


def api_calls(client: httpx.Client, api_key: str, times: int) -> list[int]:
    return [client.get("/api/items", headers={"X-API-Key": api_key}).status_code for _ in range(times)]


def test_api_key_tiers_give_each_key_its_plans_rate(monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock) -> None:
    namespace = on_clock(monkeypatch, clock, "docs/recipes/api-key-tiers.md", "upgrade")
    lim: rk.Limiter = namespace["lim"]
    with Server(namespace["app"]) as client, lim:
        assert client.get("/api/items").status_code == 401  # no key
        # Each key's first request is decided on the failsafe and queues its fetch.
        first = {key: client.get("/api/items", headers={"X-API-Key": key}) for key in ("key-free-1", "key-pro-1")}
        assert members(first["key-pro-1"].headers["RateLimit-Policy"]) == {"api": {"q": 10, "w": 60}}
        assert lim.wait_quotas(5)
        assert lim.quota("key-pro-1", "api").source == "provider"
        pro = client.get("/api/items", headers={"X-API-Key": "key-pro-1"})
        assert members(pro.headers["RateLimit-Policy"]) == {"api": {"q": 100, "w": 60}}
        assert api_calls(client, "key-pro-1", 99) == [200] * 98 + [429]  # 100 in all, the first on the failsafe
        assert api_calls(client, "key-free-1", 10) == [200] * 9 + [429]
        # A made-up key runs on the failsafe, the free plan.
        assert api_calls(client, "key-invented", 11) == [200] * 10 + [429]
        assert lim.wait_quotas(5)
        assert lim.quota("key-invented", "api").source == "failsafe"
        # The upgrade is in force at the next request; the 10 used carry over: 90 left of 100.
        namespace["on_plan_changed"]("key-free-1", "pro")
        assert api_calls(client, "key-free-1", 91) == [200] * 90 + [429]
        assert lim.quota("key-free-1", "api").source == "set"


# --- docs/recipes/behind-a-proxy.md --------------------------------------------------------------------------------

PROXY_PAGE = "docs/recipes/behind-a-proxy.md"
CLIENT = "203.0.113.7"  # a client behind the proxy
OTHER_CLIENT = "198.51.100.9"
DIRECT = "127.0.0.2"  # a peer that is not a proxy: it reaches the app directly (the proxy is 127.0.0.1)


class ProxyHeadersServer(Server):
    """uvicorn as ``uvicorn --proxy-headers --forwarded-allow-ips ALLOWED`` runs it."""

    def __init__(self, app: Any, forwarded_allow_ips: str) -> None:
        super().__init__(app, proxy_headers=True, forwarded_allow_ips=forwarded_allow_ips)


def direct_client(proxied: httpx.Client) -> httpx.Client:
    """A client of the same server connecting from ``DIRECT``, not from the proxy's address."""
    return httpx.Client(
        base_url=proxied.base_url, transport=httpx.HTTPTransport(local_address=DIRECT), timeout=proxied.timeout
    )


def forwarded(value: str) -> dict[str, str]:
    return {"X-Forwarded-For": value}


def test_behind_a_proxy_ratekeeper_keys_on_the_client_the_proxy_names(
    monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock
) -> None:
    namespace = on_clock(monkeypatch, clock, PROXY_PAGE, "key")
    with Server(namespace["app"]) as proxy, direct_client(proxy) as direct:
        # The requests of the test client come from 127.0.0.1: they stand for nginx's.
        assert proxy.get("/whoami", headers=forwarded(CLIENT)).json() == {"peer": "127.0.0.1", "key": CLIENT}
        spoofed = proxy.get("/whoami", headers=forwarded(f"6.6.6.6, {CLIENT}")).json()
        assert spoofed == {"peer": "127.0.0.1", "key": CLIENT}
        assert direct.get("/whoami", headers=forwarded("6.6.6.6")).json() == {"peer": DIRECT, "key": DIRECT}
        # Budgets: the spoofer spends its own; another client behind the proxy and a direct peer have theirs.
        codes = [proxy.get("/api/items", headers=forwarded(CLIENT)).status_code for _ in range(2)]
        codes += [proxy.get("/api/items", headers=forwarded(f"6.6.6.6, {CLIENT}")).status_code for _ in range(2)]
        assert codes == [200, 200, 200, 429]
        assert proxy.get("/api/items", headers=forwarded(OTHER_CLIENT)).status_code == 200
        assert direct.get("/api/items", headers=forwarded(CLIENT)).status_code == 200
        # Without the header, the proxy's own requests share the proxy's key.
        assert proxy.get("/api/items").status_code == 200
    assert namespace["lim"].top_refused(5) == [(CLIENT, 1)]


def test_behind_a_proxy_the_pages_check_prints_what_the_page_shows(
    monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock
) -> None:
    # The page's curl check, run on the proxy's host: curl connects from 127.0.0.2 (--interface), so nginx
    # appends 127.0.0.2 to the forged header, and a request straight to the app comes from 127.0.0.2.
    page = (ROOT / PROXY_PAGE).read_text(encoding="utf-8")
    check = page.split("## Check it", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert check.count("curl --interface 127.0.0.2 -H 'X-Forwarded-For: 6.6.6.6'") == 2
    shown = [json.loads(line.removeprefix("# ")) for line in check.splitlines() if line.startswith("# {")]
    namespace = on_clock(monkeypatch, clock, PROXY_PAGE, "key")
    with Server(namespace["app"]) as proxy, direct_client(proxy) as direct:
        through_nginx = proxy.get("/whoami", headers=forwarded(f"6.6.6.6, {DIRECT}")).json()
        straight = direct.get("/whoami", headers=forwarded("6.6.6.6")).json()
        # Without --interface, curl's own address is the proxy's: the forged address would be the key.
        from_the_proxys_host = proxy.get("/whoami", headers=forwarded("6.6.6.6")).json()
    assert shown == [through_nginx, straight]
    assert from_the_proxys_host == {"peer": "127.0.0.1", "key": "6.6.6.6"}


def test_behind_a_proxy_uvicorn_rewrites_the_client_for_the_allowed_proxies_only(
    monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock
) -> None:
    namespace = on_clock(monkeypatch, clock, PROXY_PAGE, "uvicorn")
    with ProxyHeadersServer(namespace["uvicorn_app"], "127.0.0.1") as proxy, direct_client(proxy) as direct:
        answer = proxy.get("/whoami", headers=forwarded(f"6.6.6.6, {CLIENT}")).json()
        assert answer == {"peer": CLIENT, "key": CLIENT}
        assert direct.get("/whoami", headers=forwarded("6.6.6.6")).json() == {"peer": DIRECT, "key": DIRECT}
        # The variant limits /api/items as the first app does: 3 a minute for each client.
        codes = [proxy.get("/api/items", headers=forwarded(CLIENT)).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        assert proxy.get("/api/items", headers=forwarded(OTHER_CLIENT)).json() == [1, 2, 3]


def test_behind_a_proxy_both_at_once_key_on_the_client(monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock) -> None:
    # The page's first app on a uvicorn that rewrites too: the rewritten peer is no proxy, read as it is.
    namespace = on_clock(monkeypatch, clock, PROXY_PAGE, "key")
    with ProxyHeadersServer(namespace["app"], "127.0.0.1") as proxy:
        answer = proxy.get("/whoami", headers=forwarded(f"6.6.6.6, {CLIENT}")).json()
    assert answer == {"peer": CLIENT, "key": CLIENT}


# --- docs/recipes/outgoing-hard-window.md --------------------------------------------------------------------------

HARD_WINDOW_PAGE = "docs/recipes/outgoing-hard-window.md"


def test_outgoing_hard_window_measurement_shows_what_the_page_prints(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = page_namespace(HARD_WINDOW_PAGE, "measure")
    printed = capsys.readouterr().out.strip()
    page = (ROOT / HARD_WINDOW_PAGE).read_text(encoding="utf-8")
    assert f"```text\n{printed}\n```" in page  # the output shown is the output of the block above it
    assert namespace["worst"] == {
        "gcra": 99,
        "token_bucket": 99,
        "fixed_window": 99,
        "leaky_bucket": 99,
        "sliding_window": 98,
        "sliding_log": 50,
    }
    # GCRA's 99 are in the caller's first minute: the burst of 50, then one every 1.2 s.
    first_minute = [stamp for stamp in namespace["greedy_caller"]("gcra") if stamp < 60]
    assert len(first_minute) == 99
    assert first_minute[50] == pytest.approx(1.2)


class Answer:
    def __init__(self, body: Any) -> None:
        self.body = body

    def json(self) -> Any:
        return self.body


def test_outgoing_hard_window_never_sends_more_than_50_in_any_minute(
    monkeypatch: pytest.MonkeyPatch, clock: rk.ManualClock
) -> None:
    namespace = on_clock(monkeypatch, clock, HARD_WINDOW_PAGE, "calls")
    most_in_any_window = page_namespace(HARD_WINDOW_PAGE, "measure")["most_in_any_window"]
    sent: list[float] = []  # when each call reached the partner's client, on the limiter's clock

    class Partner:
        def get(self, url: str) -> Answer:
            sent.append(clock.now())
            return Answer({"order": url.rsplit("/", 1)[-1]})

    class AsyncPartner:
        async def get(self, url: str) -> Answer:
            return Partner().get(url)

    namespace["client"].close()
    asyncio.run(namespace["async_client"].aclose())
    namespace["client"], namespace["async_client"] = Partner(), AsyncPartner()
    assert [namespace["order_status"](str(i)) for i in range(120)] == [{"order": str(i)} for i in range(120)]
    # 50 at once; the 51st when the first is 60 s old, then each as the oldest leaves the window.
    assert sent[:51] == [0.0] * 50 + [60.0]
    assert sent[-1] == 120.0
    orders = [str(i) for i in range(100)]
    assert asyncio.run(namespace["statuses"](orders)) == [{"order": order} for order in orders]
    assert most_in_any_window(sent) == 50
    assert len(sent) == 220
    assert sent[-1] == pytest.approx(240.0)
