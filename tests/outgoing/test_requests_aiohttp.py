"""``ratekeeper.requests``'s adapter and ``ratekeeper.aiohttp``'s client middleware against real rate-limited
servers: both are thin over the engine the httpx transports use, so these tests show that each hands it the
request and the response whole (host, path, headers, body; status, fields, body) and retries on its client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
import ratekeeper as rk
import requests
from _api import request_body
from _web import Server
from conftest import ServeApi
from ratekeeper._outgoing import Reply
from ratekeeper.aiohttp import Middleware
from ratekeeper.requests import Adapter
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict


def fixed(rate: str) -> list[rk.Limit]:
    return [rk.Limit(rate, algorithm="fixed_window")]


def tokens_used(reply: Reply) -> dict[str, int] | None:
    if reply.status != 200 or not reply.content:
        return None
    return {"tokens": int(json.loads(reply.content)["usage"]["total_tokens"])}


def session_with(adapter: Adapter) -> requests.Session:
    session = requests.Session()
    session.mount("http://", adapter)
    return session


# --- requests ----------------------------------------------------------------------------------------------------


def test_requests_adapter_reads_the_openai_fields_and_corrects_the_cost(serve_api: ServeApi) -> None:
    served = serve_api("openai", 50, 60.0, tokens=1000)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("tokens", fixed("1000/min"))

    def asked(call: object) -> dict[str, int]:
        return {"tokens": int(json.loads(call.content)["tokens"])}  # type: ignore[attr-defined]

    adapter = Adapter(limiter, groups={"tokens": "tokens"}, cost=asked, spent=tokens_used)
    host = served.url.removeprefix("http://")
    with session_with(adapter) as session:
        answer = session.post(f"{served.url}/v1/chat/completions", json={"tokens": 400, "used": 150})
    assert answer.json() == {"usage": {"total_tokens": 150}}
    stats = adapter.stats()[host]
    assert stats["dialect"] == "openai"
    assert stats["remaining"] == {"requests": 49, "tokens": 850}
    # The estimate (400) was taken, the 250 not used given back; the server's word caps it at what it says.
    assert limiter.peek(host, group="tokens").remaining == 850
    assert f"{host} requests" in limiter.groups  # the server states 50 requests: an auto-group of that size


def test_requests_adapter_retries_a_429_after_the_servers_wait(serve_api: ServeApi) -> None:
    served = serve_api("github", 2, 1.0)
    adapter = Adapter(rk.Limiter(rules=[]), obey=False)
    with session_with(adapter) as session:
        codes = [session.get(f"{served.url}/repos/x/issues").status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    assert served.api.refused == 1
    assert adapter.stats()[served.url.removeprefix("http://")]["retries"] == 1


def test_requests_adapter_keeps_under_what_the_server_says(serve_api: ServeApi) -> None:
    served = serve_api("github", 4, 1.0)
    adapter = Adapter(rk.Limiter(rules=[]), window=1.0)
    with session_with(adapter) as session:
        codes = [session.get(f"{served.url}/").status_code for _ in range(7)]
    assert codes == [200] * 7
    assert served.api.refused == 0


def test_requests_adapter_raises_at_once_when_asked(serve_api: ServeApi) -> None:
    served = serve_api("x-ratelimit", 100, 60.0)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("requests", fixed("1/min"))
    adapter = Adapter(limiter, groups={"requests": "requests"}, wait=False)
    with session_with(adapter) as session:
        assert session.get(served.url).status_code == 200
        with pytest.raises(rk.RateLimited):
            session.get(served.url)
    assert sum(served.api.accepted.values()) == 1


def test_requests_adapter_passes_each_calls_options_on_the_short_way_too(serve_api: ServeApi) -> None:
    # The first call goes the long way, the next ones the short way: both hand requests' options on to
    # HTTPAdapter.send as they came, so a streamed answer is left unread and an unstreamed one read.
    served = serve_api("github", 100, 60.0)
    adapter = Adapter(rk.Limiter(rules=[]))
    with session_with(adapter) as session:
        for _ in range(2):
            assert session.get(f"{served.url}/a", timeout=5).json() == {"usage": {"total_tokens": 0}}
        streamed = session.get(f"{served.url}/b", stream=True, timeout=(5, 5))
        assert not streamed._content_consumed  # type: ignore[attr-defined]
        assert streamed.json() == {"usage": {"total_tokens": 0}}
    assert adapter.stats()[served.url.removeprefix("http://")]["calls"] == 3
    assert sum(served.api.accepted.values()) == 3


def test_requests_adapter_subclass_with_its_own_send_is_called_for_every_call(serve_api: ServeApi) -> None:
    served = serve_api("github", 100, 60.0)
    seen: list[str] = []

    class Noting(Adapter):
        def send(self, request: requests.PreparedRequest, *options: Any, **named: Any) -> requests.Response:
            seen.append(request.path_url)
            return super().send(request, *options, **named)

    adapter = Noting(rk.Limiter(rules=[]))
    with session_with(adapter) as session:
        for path in ("/a", "/b", "/c"):
            assert session.get(f"{served.url}{path}").status_code == 200
    assert seen == ["/a", "/b", "/c"]
    assert adapter.stats()[served.url.removeprefix("http://")]["calls"] == 3


def test_requests_adapter_sends_through_the_next_adapter_in_its_mro_on_the_short_way_too() -> None:
    # Adapter mixed with another HTTPAdapter subclass (a TLS or mocking adapter) sends through that one's send,
    # as super().send would, the long way and the short way alike.
    answered: list[str] = []

    class Canned(HTTPAdapter):
        def send(self, request: requests.PreparedRequest, *options: Any, **named: Any) -> requests.Response:
            answered.append(request.path_url)
            response = requests.Response()
            response.status_code, response.request = 200, request
            response.headers = CaseInsensitiveDict(
                {"x-ratelimit-limit": "50", "x-ratelimit-remaining": "40", "x-ratelimit-reset": "60"}
            )
            response._content = b"{}"
            return response

    class Paced(Adapter, Canned):
        pass

    adapter = Paced(rk.Limiter(rules=[]))
    session = requests.Session()
    session.mount("http://", adapter)
    for path in ("/a", "/b", "/c"):
        assert session.get(f"http://api.invalid{path}").status_code == 200
    assert answered == ["/a", "/b", "/c"]
    assert adapter.stats()["api.invalid"]["calls"] == 3
    assert adapter.stats()["api.invalid"]["remaining"] == {"requests": 40}


# --- aiohttp -----------------------------------------------------------------------------------------------------


def test_aiohttp_middleware_reads_the_anthropic_fields_and_corrects_the_cost(serve_api: ServeApi) -> None:
    served = serve_api("anthropic", 50, 60.0, tokens=1000)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("tokens", fixed("1000/min"))

    def asked(call: object) -> dict[str, int]:
        return {"tokens": int(json.loads(call.content)["tokens"])}  # type: ignore[attr-defined]

    pace = Middleware(limiter, groups={"tokens": "tokens"}, cost=asked, spent=tokens_used)
    host = served.url.removeprefix("http://")

    async def main() -> object:
        async with (
            aiohttp.ClientSession(middlewares=(pace,)) as session,
            session.post(f"{served.url}/v1/messages", json={"tokens": 300, "used": 100}) as answer,
        ):
            return await answer.json()

    assert asyncio.run(main()) == {"usage": {"total_tokens": 100}}
    stats = pace.stats()[host]
    assert stats["dialect"] == "anthropic"
    assert stats["remaining"] == {"requests": 49, "tokens": 900}
    assert limiter.peek(host, group="tokens").remaining == 900


def test_aiohttp_middleware_retries_a_429_after_the_servers_wait(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 2, 1.0)
    pace = Middleware(rk.Limiter(rules=[]), obey=False)

    async def main() -> list[int]:
        async with aiohttp.ClientSession(middlewares=(pace,)) as session:
            codes = []
            for _ in range(3):
                async with session.get(served.url) as answer:
                    codes.append(answer.status)
            return codes

    assert asyncio.run(main()) == [200, 200, 200]
    assert served.api.refused == 1
    assert pace.stats()[served.url.removeprefix("http://")]["retries"] == 1


def test_aiohttp_tasks_keep_under_what_the_server_says(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 10, 1.0)
    pace = Middleware(rk.Limiter(rules=[]))

    async def main() -> list[int]:
        async with aiohttp.ClientSession(middlewares=(pace,)) as session:

            async def task() -> list[int]:
                codes = []
                for _ in range(3):
                    async with session.get(served.url) as answer:
                        codes.append(answer.status)
                return codes

            return [code for codes in await asyncio.gather(*(task() for _ in range(8))) for code in codes]

    assert asyncio.run(main()) == [200] * 24
    assert served.api.refused == 0


def test_aiohttp_middleware_raises_at_once_when_asked(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    limiter = rk.Limiter(rules=[])
    limiter.add_group("api", fixed("1/min"))
    pace = Middleware(limiter, groups={"api": "api"}, wait=False)

    async def main() -> None:
        async with aiohttp.ClientSession(middlewares=(pace,)) as session:
            async with session.get(served.url) as answer:
                assert answer.status == 200
            with pytest.raises(rk.RateLimited):
                await session.get(served.url)

    asyncio.run(main())
    assert sum(served.api.accepted.values()) == 1


class Streaming:
    """An ASGI app: POST answers 429 (``retry-after: 0``) the first time, then 200, noting each body received;
    GET answers a stream of three server-sent events."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        if scope["method"] == "POST":
            self.bodies.append(body)
            status = 429 if len(self.bodies) == 1 else 200
            await send({"type": "http.response.start", "status": status, "headers": [(b"retry-after", b"0")]})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for n in range(3):
            await send({"type": "http.response.body", "body": f"data: {n}\n\n".encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def test_aiohttp_middleware_with_spent_leaves_a_streamed_body_to_read() -> None:
    # spent= reads the body: the caller iterating the response's stream still gets all of it.
    with Server(Streaming()) as client:
        url = str(client.base_url)
        pace = Middleware(rk.Limiter(rules=[]), spent=lambda reply: {"requests": 1})

        async def main() -> list[bytes]:
            async with aiohttp.ClientSession(middlewares=(pace,)) as session, session.get(url) as answer:
                return [line async for line in answer.content if line.strip()]

        assert asyncio.run(main()) == [b"data: 0\n", b"data: 1\n", b"data: 2\n"]


def test_aiohttp_middleware_returns_a_429_whose_streamed_body_cannot_be_sent_again() -> None:
    # A body from an async generator is read once: a retry would send it empty. Bytes are sent again.
    app = Streaming()
    with Server(app) as client:
        url = str(client.base_url)
        pace = Middleware(rk.Limiter(rules=[]), obey=False)

        async def parts() -> Any:
            for part in (b"one;", b"two;"):
                yield part

        async def post(data: Any) -> int:
            async with aiohttp.ClientSession(middlewares=(pace,)) as session, session.post(url, data=data) as answer:
                return answer.status

        assert asyncio.run(post(parts())) == 429
        assert app.bodies == [b"one;two;"]
        app.bodies.clear()
        assert asyncio.run(post(b"again")) == 200
        assert app.bodies == [b"again", b"again"]


@pytest.mark.parametrize("body", ["generator", "file"])
@pytest.mark.parametrize("client", ["httpx", "async httpx", "requests"])
def test_httpx_and_requests_return_a_429_whose_body_cannot_be_sent_again(client: str, body: str) -> None:
    # As aiohttp's: a body from a generator or a file is read once. A retry raised httpx's StreamConsumed, or sent
    # an empty body, or (requests, a file) declared its length and sent nothing, hanging until the timeout.
    import io

    import httpx
    import requests
    from ratekeeper.httpx import AsyncTransport, Transport
    from ratekeeper.requests import Adapter

    app = Streaming()
    limiter = rk.Limiter(rules=[])

    def content() -> Any:
        if body == "file":
            return io.BytesIO(b"one;two;")
        return iter((b"one;", b"two;"))

    def post(data: Any) -> int:
        if client == "httpx":
            with httpx.Client(transport=Transport(limiter, obey=False)) as session:
                return session.post(url, content=data).status_code
        if client == "async httpx":

            async def apost() -> int:
                async def parts() -> Any:
                    for part in data if not isinstance(data, bytes) else (data,):
                        yield part

                async with httpx.AsyncClient(transport=AsyncTransport(limiter, obey=False)) as session:
                    sent = data if isinstance(data, bytes) else parts()
                    return (await session.post(url, content=sent)).status_code

            return asyncio.run(apost())
        with requests.Session() as session:
            session.mount("http://", Adapter(limiter, obey=False))
            return session.post(url, data=data, timeout=5).status_code

    with Server(app) as served:
        url = str(served.base_url)
        assert post(content()) == 429
        assert app.bodies == [b"one;two;"]
        app.bodies.clear()
        assert post(b"again") == 200
        assert app.bodies == [b"again", b"again"]


# --- imports -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://b\u00fccher.example/x",  # an IDNA name: keyed as sent, xn--
        "http://www.xn--bcher-kva.example/",  # httpx decodes a first label only, yarl every label
        "http://xn--bcher-kva.example:8080/a%2Fb%20c",  # an escaped path: routed decoded
        "https://API.example.com:443/v1",  # the scheme's port left out, the host lowered
        "http://api.example.com:443/v1",
        "http://[::1]:8000/x",  # keyed [::1]:8000, which ::1:8000 would not tell from [::1:8000]
        "http://[::1]/x",
        "http://api.example.com",
    ],
)
def test_every_client_keys_and_routes_a_url_alike(url: str) -> None:
    # One Outgoing may serve an httpx, a requests and an aiohttp client: a URL must be the same key (its budgets,
    # its auto-groups) and the same path (the rules it routes to) whichever sends it.
    import httpx
    import yarl
    from ratekeeper import aiohttp as rk_aiohttp
    from ratekeeper import httpx as rk_httpx
    from ratekeeper import requests as rk_requests

    places = {
        "httpx": rk_httpx._place(httpx.URL(url)),
        "requests": rk_requests._place(requests.Request("GET", url).prepare().url or ""),
        "aiohttp": rk_aiohttp._read_place(yarl.URL(url)),
    }
    assert len(set(places.values())) == 1, places


def test_each_client_is_imported_only_by_its_own_module() -> None:
    code = (
        "import sys, ratekeeper\n"
        "clients = ('httpx', 'requests', 'aiohttp', 'http_sfv')\n"
        "assert not [c for c in clients if c in sys.modules], 'ratekeeper imported a client'\n"
        "import ratekeeper.requests\n"
        "assert 'httpx' not in sys.modules and 'aiohttp' not in sys.modules\n"
        "import ratekeeper.aiohttp\n"
        "assert 'httpx' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_urls_with_credentials_or_a_query_are_not_kept_in_the_adapters_caches() -> None:
    # The adapters keep the host and path of the URLs they read again and again; a token in a URL's query or
    # credentials must not stay in memory for the process's life.
    import yarl
    from ratekeeper import aiohttp as rk_aiohttp
    from ratekeeper import requests as rk_requests

    secret = "https://user:s3cret@api.example.com/v1?token=s3cret"
    assert rk_requests._place(secret) == ("api.example.com", "/v1")
    assert rk_requests._place("https://api.example.com/v1?token=s3cret") == ("api.example.com", "/v1")
    assert not any("s3cret" in url for url in rk_requests._PLACES)

    class Request:
        url = yarl.URL(secret)

    assert rk_aiohttp._place(Request()) == ("api.example.com", "/v1")  # type: ignore[arg-type]
    assert not any("s3cret" in str(parts) for parts in rk_aiohttp._PLACES)
