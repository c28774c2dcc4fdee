"""``ratekeeper.httpx``'s transports against real rate-limited servers (uvicorn on loopback,
``tests/outgoing/_api.py``), one per dialect: what the servers say is read and obeyed, a 429 is retried, a
refusal raises at once when asked, a call's estimated cost is corrected from the response, and nothing a server
sends breaks a call.

Windows are 1-2 s and counts small, so that a test takes a few seconds at most and a slow machine still passes:
the assertions are on what the servers counted, never on how fast a call went.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import re
import time
import weakref
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from conftest import ServeApi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ratekeeper._outgoing import Reply
from ratekeeper.httpx import AsyncTransport, Outgoing, Transport

#: dialect of the test server -> (the dialect read, the budget it names)
DIALECTS = {
    "ietf": ("ietf", "api"),
    "x-ratelimit": ("x-ratelimit", "requests"),
    "x-ratelimit-epoch": ("x-ratelimit", "requests"),
    "github": ("github", "core"),
    "openai": ("openai", "requests"),
    "anthropic": ("anthropic", "requests"),
}


def fixed(rate: str) -> list[rk.Limit]:
    return [rk.Limit(rate, algorithm="fixed_window")]


def tokens_asked(call: Any) -> dict[str, int]:
    """The cost of a call: the tokens its JSON body asks for."""
    return {"tokens": int(json.loads(call.content)["tokens"])} if call.content else {}


def tokens_used(reply: Reply) -> dict[str, int] | None:
    """What a call spent: the usage the answer reports."""
    if reply.status != 200 or not reply.content:
        return None
    return {"tokens": int(json.loads(reply.content)["usage"]["total_tokens"])}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_is_read_and_obeyed(serve_api: ServeApi, dialect: str) -> None:
    served = serve_api(dialect, 5, 1.0)
    transport = Transport(rk.Limiter(rules=[]), window=1.0)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        codes = [client.get("/v1/things").status_code for _ in range(9)]
    assert codes == [200] * 9
    host = served.url.removeprefix("http://")
    read_as, budget = DIALECTS[dialect]
    stats = transport.stats()[host]
    assert stats["dialect"] == read_as
    assert set(stats["remaining"]) == {budget}
    assert 0 <= stats["remaining"][budget] < 5
    assert 0 <= stats["reset"][budget] <= 3
    assert f"{host} {budget}" in transport.outgoing.limiter.groups
    assert sum(served.api.accepted.values()) == 9
    # The server's word caps the budget: no call draws a 429.
    assert served.api.refused == 0, served.api.accepted
    assert stats["throttled"] == 0


def test_asyncio_tasks_share_the_budget_the_server_announces(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 20, 1.0)
    limiter = rk.Limiter(rules=[])
    # Declared up front, so that the first calls are paced too (an auto-group starts at the first word).
    limiter.add_group("api", fixed("20/s"))
    transport = AsyncTransport(limiter, groups={"api": "api"}, timeout=30.0)

    async def main() -> list[int]:
        async with httpx.AsyncClient(transport=transport, base_url=served.url) as client:

            async def task() -> list[int]:
                return [(await client.get("/")).status_code for _ in range(5)]

            return [code for codes in await asyncio.gather(*(task() for _ in range(16))) for code in codes]

    assert asyncio.run(main()) == [200] * 80
    assert served.api.refused == 0
    assert sum(served.api.accepted.values()) == 80


def test_a_429_is_retried_after_the_wait_the_server_asks_for(serve_api: ServeApi) -> None:
    served = serve_api("x-ratelimit", 2, 1.0)
    # obey=False: nothing paces the calls, so the server's limit is met and its 429 retried.
    transport = Transport(rk.Limiter(rules=[]), obey=False, retries=2)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        codes = [client.get("/").status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    stats = transport.stats()[served.url.removeprefix("http://")]
    assert (stats["calls"], stats["throttled"], stats["retries"]) == (4, 1, 1)
    assert stats["waited"] > 0
    assert served.api.refused == 1


def test_after_its_retries_a_429_is_returned_as_it_came(serve_api: ServeApi) -> None:
    served = serve_api("x-ratelimit", 1, 60.0)
    transport = Transport(rk.Limiter(rules=[]), obey=False, retries=0)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        first, second = client.get("/"), client.get("/")
    assert (first.status_code, second.status_code) == (200, 429)
    assert second.json() == {"error": "rate limited"}
    assert second.headers["retry-after"]
    assert transport.stats()[served.url.removeprefix("http://")]["throttled"] == 1


def test_a_refusal_raises_at_once_when_asked_and_sends_nothing(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("api", fixed("2/min"))
    transport = Transport(limiter, groups={"api": "api"}, wait=False)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        assert [client.get("/").status_code for _ in range(2)] == [200, 200]
        started = time.monotonic()
        with pytest.raises(rk.RateLimited) as refused:
            client.get("/")
    assert time.monotonic() - started < 1.0
    assert refused.value.decision.group == "api"
    assert refused.value.retry_after > 0
    assert sum(served.api.accepted.values()) == 2
    assert transport.stats()[served.url.removeprefix("http://")]["refused"] == 1


def test_a_wait_longer_than_the_timeout_raises(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("api", fixed("1/min"))
    transport = Transport(limiter, groups={"api": "api"}, timeout=0.5)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        assert client.get("/").status_code == 200
        with pytest.raises(rk.RateLimited):
            client.get("/")
    assert sum(served.api.accepted.values()) == 1


def test_the_limiters_rules_limit_a_route(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    limiter = rk.Limiter(rules=[rk.Rule("^/v1/search", "search", "1/min", algorithm="fixed_window")])
    transport = Transport(limiter, wait=False)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        assert client.get("/v1/search").status_code == 200
        with pytest.raises(rk.RateLimited) as refused:
            client.get("/v1/search")
        assert [client.get("/v1/other").status_code for _ in range(3)] == [200] * 3
    assert refused.value.decision.group == "search"


def test_each_api_key_has_budgets_of_its_own_and_the_key_is_not_kept(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("api", fixed("1/min"))
    transport = Transport(limiter, groups={"api": "api"}, api_key_header="Authorization", wait=False)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        for token in ("sk-alice", "sk-bob"):
            assert client.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with pytest.raises(rk.RateLimited):
            client.get("/", headers={"Authorization": "Bearer sk-alice"})
    keys = list(transport.stats())
    assert len(keys) == 2
    assert all(key.startswith("127.0.0.1:") and "sk-" not in key for key in keys)


def test_a_calls_estimated_cost_is_corrected_from_the_response(serve_api: ServeApi) -> None:
    served = serve_api("openai", 100, 60.0, tokens=1000)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("requests", fixed("100/min"))
    limiter.add_group("tokens", fixed("1000/min"))
    groups = {"requests": "requests", "tokens": "tokens"}
    transport = Transport(limiter, groups=groups, cost=tokens_asked, spent=tokens_used, obey=False)
    host = served.url.removeprefix("http://")
    with httpx.Client(transport=transport, base_url=served.url) as client:
        # Asked for 300, used 100: 200 come back.
        assert client.post("/v1/chat", json={"tokens": 300, "used": 100}).json() == {"usage": {"total_tokens": 100}}
        assert limiter.peek(host, group="tokens").remaining == 900
        # Asked for 50, used 250: 200 more are spent.
        client.post("/v1/chat", json={"tokens": 50, "used": 250})
        assert limiter.peek(host, group="tokens").remaining == 650
    assert limiter.peek(host, group="requests").remaining == 98


def test_two_budgets_are_spent_all_or_nothing() -> None:
    limiter = rk.Limiter(rules=[])
    limiter.add_group("requests", fixed("10/min"))
    limiter.add_group("tokens", fixed("100/min"))
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    transport = Transport(
        limiter,
        inner=httpx.MockTransport(answer),
        groups={"requests": "requests", "tokens": "tokens"},
        cost=tokens_asked,
        wait=False,
    )
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        client.post("/", json={"tokens": 80})
        with pytest.raises(rk.RateLimited) as refused:
            client.post("/", json={"tokens": 30})  # the requests budget admits it, the tokens budget does not
    assert refused.value.decision.group == "tokens"
    assert limiter.peek("api.example.com", group="requests").remaining == 9  # given back
    assert len(sent) == 1


def test_a_first_call_refused_holds_no_other_back() -> None:
    # Until a host's first answer its calls go one at a time; a first call that is refused must let the next go.
    limiter = rk.Limiter(rules=[rk.Rule("^/search", "search", "1/min", algorithm="fixed_window")])
    limiter.check("api.example.com", "/search")  # the search budget is spent
    transport = Transport(limiter, inner=httpx.MockTransport(lambda request: httpx.Response(200)), wait=False)
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        with pytest.raises(rk.RateLimited):
            client.get("/search")
        started = time.monotonic()
        assert client.get("/other").status_code == 200
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("url", "key", "path"),
    [
        ("https://api.example.com:443/a", "api.example.com", "/a"),  # the scheme's port is left out
        ("http://api.example.com:8080/a", "api.example.com:8080", "/a"),
        ("http://xn--fiqs8s.icom.museum:8080/a%20b", "xn--fiqs8s.icom.museum:8080", "/a b"),  # IDNA as sent, escapes
        ("http://api.example.com", "api.example.com", "/"),  # no path
        ("http://[::1]:8080/a", "[::1]:8080", "/a"),  # an IPv6 address in brackets, as in the URL
    ],
)
def test_calls_are_keyed_by_their_host_and_routed_by_their_path_the_short_way_too(
    url: str, key: str, path: str
) -> None:
    # The first call goes the long way; the next ones the short way, which reads the URL in the core when it can.
    limiter = rk.Limiter(rules=[rk.Rule(f"^{re.escape(path)}$", "routed", "100/min", algorithm="fixed_window")])
    transport = Transport(limiter, inner=httpx.MockTransport(lambda request: httpx.Response(200)))
    with httpx.Client(transport=transport) as client:
        for _ in range(4):
            assert client.get(url).status_code == 200
    assert list(transport.stats()) == [key]
    assert transport.stats()[key]["calls"] == 4
    assert limiter.peek(key, path).remaining == 96


def test_the_transports_own_inner_default_and_close() -> None:
    transport = Transport(rk.Limiter(rules=[]))
    assert isinstance(transport.inner, httpx.HTTPTransport)
    transport.close()
    shared = Outgoing(rk.Limiter(rules=[]))
    assert AsyncTransport(shared).outgoing is shared
    with pytest.raises(rk.InvalidValue, match=r"^retries"):
        AsyncTransport(shared, retries=3)


def answering(status: int, sent: list[str], **headers: str) -> httpx.MockTransport:
    """A transport answering every request with ``status`` and ``headers``, noting each URL's path in ``sent``."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(status, headers=headers)

    return httpx.MockTransport(answer)


def test_a_new_inner_transport_takes_the_calls_after_it_on_the_short_way_too() -> None:
    # The short way is made of the inner transport's method: setting `inner` must remake it, or calls would
    # still go to the transport replaced.
    first: list[str] = []
    then: list[str] = []
    transport = Transport(rk.Limiter(rules=[]), inner=answering(200, first))
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        client.get("/a")
        client.get("/b")  # the short way
        transport.inner = answering(200, then)
        client.get("/c")
        client.get("/d")
    assert (first, then) == (["/a", "/b"], ["/c", "/d"])
    assert transport.stats()["api.example.com"]["calls"] == 4


def test_a_new_engine_takes_the_calls_after_it_on_the_short_way_too() -> None:
    # The short way is made of the engine too: setting `outgoing` must remake it, or calls would still be
    # admitted and counted by the engine replaced.
    transport = Transport(rk.Limiter(rules=[]), inner=answering(200, []))
    replaced, then = transport.outgoing, Outgoing(rk.Limiter(rules=[]))
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        client.get("/a")
        client.get("/b")  # the short way
        transport.outgoing = then
        client.get("/c")
        client.get("/d")  # the short way, in the new engine
    assert replaced.stats()["api.example.com"]["calls"] == 2
    assert then.stats()["api.example.com"]["calls"] == 2


def test_a_subclass_with_its_own_handle_request_is_called_for_every_call() -> None:
    seen: list[str] = []

    class Noting(Transport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.url.path)
            return super().handle_request(request)

    sent: list[str] = []
    transport = Noting(rk.Limiter(rules=[]), inner=answering(200, sent))
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        for path in ("/a", "/b", "/c"):
            client.get(path)
    assert seen == sent == ["/a", "/b", "/c"]
    assert transport.stats()["api.example.com"]["calls"] == 3


def test_the_short_way_obeys_the_server_and_a_failed_send_raises_as_it_came() -> None:
    # After the first answer calls go the short way in the core: the word it reads caps the budget there as
    # it does the long way, and the inner transport's error reaches the caller unchanged.
    sent: list[str] = []
    word = {"x-ratelimit-limit": "3", "x-ratelimit-remaining": "1", "x-ratelimit-reset": "60"}
    transport = Transport(rk.Limiter(rules=[]), inner=answering(200, sent, **word), wait=False)
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        client.get("/a")  # the long way: makes the group, at 1 left
        client.get("/b")  # the short way: spends the 1
        with pytest.raises(rk.RateLimited):
            client.get("/c")
    assert sent == ["/a", "/b"]

    def failing(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = Transport(rk.Limiter(rules=[]), inner=answering(200, sent))
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        client.get("/d")
        transport.inner = httpx.MockTransport(failing)
        with pytest.raises(httpx.ConnectError, match="refused"):
            client.get("/e")


def test_a_transport_dropped_is_freed_at_once() -> None:
    # The short way holds the engine and the inner transport's method, not the transport: no reference cycle
    # keeps a dropped transport (and its connection pool) alive until the garbage collector runs.
    transport = Transport(rk.Limiter(rules=[]), inner=answering(200, []))
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        client.get("/a")
        client.get("/b")
    dropped = weakref.ref(transport)
    gc.disable()
    try:
        del transport, client
        assert dropped() is None
    finally:
        gc.enable()


@pytest.mark.parametrize(
    ("options", "error", "loc"),
    [
        ({"retries": -1}, rk.InvalidValue, "retries"),
        ({"retries": 1.5}, rk.InvalidType, "retries"),
        ({"timeout": 0}, rk.InvalidValue, "timeout"),
        ({"timeout": "1"}, rk.InvalidType, "timeout"),
        ({"window": float("inf")}, rk.InvalidValue, "window"),
        ({"window": 1e12}, rk.InvalidValue, "window"),  # no limit is made of thirty thousand years
        ({"wait": 1}, rk.InvalidType, "wait"),
        ({"dialect": "klingon"}, rk.InvalidValue, "dialect"),
        ({"dialect": 1}, rk.InvalidType, "dialect"),
        ({"timout": 5}, rk.InvalidType, "timout"),  # a typo: named, with the options there are
        ({"inner": 5}, rk.InvalidType, "inner"),
        ({"cost": 3}, rk.InvalidType, "cost"),
        ({"api_key_header": ""}, rk.InvalidValue, "api_key_header"),
        ({"groups": {"requests": "nowhere"}}, rk.InvalidValue, "groups.requests"),
        ({"groups": {"requests": "sliding"}}, rk.InvalidValue, "groups.requests"),
        ({"groups": ["requests"]}, rk.InvalidType, "groups"),
    ],
)
def test_options_are_checked_when_the_transport_is_made(options: dict[str, Any], error: type, loc: str) -> None:
    limiter = rk.Limiter(rules=[rk.Rule("^/x", "sliding", limits=[rk.Limit("1/s", algorithm="sliding_window")])])
    with pytest.raises(error, match=rf"^{re.escape(loc)}: "):
        Transport(limiter, **options)
    with pytest.raises(rk.InvalidType, match=r"^limiter: "):
        Outgoing("not a limiter")  # type: ignore[arg-type]


def test_a_limiter_on_a_manual_clock_is_refused() -> None:
    """Calls take real time and waits sleep it: a ManualClock's time would make every word look stale."""
    with pytest.raises(rk.InvalidValue, match=r"^limiter: .*ManualClock"):
        Transport(rk.Limiter(rules=[], clock=rk.ManualClock()))


def test_a_routed_group_with_concurrency_limits_is_logged_as_not_held(caplog: pytest.LogCaptureFixture) -> None:
    """A transport spends rates only: a group whose concurrency (or adaptive) limits would pace nothing says so
    when the transport is made, instead of letting every call through unheld in silence."""
    rules = [
        rk.Rule("^/held", "held", limits=["10/s", rk.Limit(concurrency=2)]),
        rk.Rule("^/learned", "learned", limits=[rk.Limit(adaptive="aimd")]),
        rk.Rule("^/rated", "rated", "10/s"),
    ]
    limiter = rk.Limiter(rules=rules)
    limiter.add_group("by name", [rk.Limit(concurrency=1)])  # no path reaches it
    with caplog.at_level("WARNING", logger="ratekeeper.outgoing"):
        Transport(limiter)
    named = [record.args[0] for record in caplog.records if isinstance(record.args, tuple)]
    assert named == ["held", "learned"]
    assert all("Limiter.concurrent" in record.getMessage() for record in caplog.records)


# --- whatever a server sends -----------------------------------------------------------------------------------

FIELD_NAMES = [
    "ratelimit",
    "ratelimit-policy",
    "retry-after",
    "retry-after-ms",
    "date",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-reset-after",
    "x-ratelimit-resource",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
]
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(
        ["", " ", "-0", "1e9", "nan", "6m0s", "1.5s", "20ms", "-3s", "2026-11-27T03:00:00Z", '"api";r=-1;t=5']
    ),
    st.sampled_from(['"api";q=0;w=0', '"api";r=9999999999999999;t=99999999', "api;r=1;t=1", '"a";r=1, "b";q=5;w=1']),
    st.text(alphabet=st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=30),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    headers=st.dictionaries(st.sampled_from(FIELD_NAMES), NUMBERS, max_size=6),
    status=st.sampled_from([200, 403, 429, 503]),
)
def test_no_header_value_breaks_a_call(headers: dict[str, str], status: int) -> None:
    limiter = rk.Limiter(rules=[])

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=[(name, value.encode("latin-1")) for name, value in headers.items()])

    transport = Transport(limiter, inner=httpx.MockTransport(answer), wait=False, retries=0)
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        for _ in range(3):
            # What the server said may well leave nothing to spend: a refusal, not a crash.
            with contextlib.suppress(rk.RateLimited):
                assert client.get("/").status_code == status
    stats = transport.stats()["api.example.com"]
    assert stats["calls"] + stats["refused"] == 3


@pytest.mark.parametrize(
    "override",
    [
        {"ratelimit": '"api";r=-5;t=-1'},
        {"ratelimit": '"api";r=99999999999999999999999;t=1e99'},
        {"ratelimit-policy": '"api";q=0;w=0'},
        {"ratelimit-policy": '"api";q=5;w=999999999999'},
        {"ratelimit": "garbage ;;; ="},
        {"retry-after": "-3"},
    ],
)
def test_a_real_server_sending_bad_fields_breaks_no_call(serve_api: ServeApi, override: dict[str, str]) -> None:
    served = serve_api("ietf", 100, 60.0)
    served.api.override = override
    transport = Transport(rk.Limiter(rules=[]), timeout=2.0, retries=0)
    with httpx.Client(transport=transport, base_url=served.url) as client:
        for _ in range(3):
            with contextlib.suppress(rk.RateLimited):
                assert client.get("/").status_code == 200
