"""The async transports' short way (a host heard from, a call admitted at once), as whoever awaits it sees it:
what the inner call yields reaches the event loop, a cancellation reaches the inner call and spoils no later
call, the inner call's errors come back unchanged, a reply that asks for a retry is retried, nothing is spent
before the call is awaited, and a new inner transport or a subclass's own method takes the calls after it.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable, Callable

import aiohttp
import httpx
import pytest
import ratekeeper as rk
from conftest import ServeApi
from ratekeeper.aiohttp import Middleware
from ratekeeper.httpx import AsyncTransport

WORD = {"x-ratelimit-limit": "3", "x-ratelimit-remaining": "1", "x-ratelimit-reset": "60"}


class Inner(httpx.AsyncBaseTransport):
    """An inner transport that yields to the event loop ``hops`` times before it answers ``status`` with
    ``headers``, noting each path sent, or waits on ``gate`` when one is set (noting a cancellation)."""

    def __init__(self, status: int = 200, hops: int = 3, **headers: str) -> None:
        self.status, self.hops, self.headers = status, hops, headers
        self.sent: list[str] = []
        self.log: list[str] = []  # "hop" each time the inner call yields to the loop
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()
        self.cancelled = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.url.path)
        for _ in range(self.hops):
            self.log.append("hop")
            await asyncio.sleep(0)
        if self.gate is not None:
            self.waiting.set()
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return httpx.Response(self.status, headers=self.headers)


def short_way_transport(inner: httpx.AsyncBaseTransport, **options: object) -> AsyncTransport:
    return AsyncTransport(rk.Limiter(rules=[]), inner=inner, **options)  # type: ignore[arg-type]


def test_the_short_way_yields_to_the_loop_and_obeys_the_server() -> None:
    inner = Inner(hops=3, **WORD)
    transport = short_way_transport(inner, wait=False)

    async def main() -> list[int]:
        async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
            codes = [(await client.get("/a")).status_code]  # the long way: makes the group, at 1 left
            # Another task runs while the short way's inner call awaits: what it yields reached the loop.
            inner.log.clear()

            async def tick() -> None:
                for _ in range(3):
                    inner.log.append("tick")
                    await asyncio.sleep(0)

            answer, _ = await asyncio.gather(client.get("/b"), tick())
            codes.append(answer.status_code)
            first, last = inner.log.index("hop"), len(inner.log) - 1 - inner.log[::-1].index("hop")
            assert "tick" in inner.log[first:last]
            with pytest.raises(rk.RateLimited):
                await client.get("/c")  # the word capped the budget: no call left
            return codes

    assert asyncio.run(main()) == [200, 200]
    assert inner.sent == ["/a", "/b"]
    assert transport.stats()["api.example.com"]["calls"] == 2


def test_a_cancelled_call_cancels_its_inner_call_and_the_next_call_goes_on() -> None:
    inner = Inner(hops=0)
    transport = short_way_transport(inner)

    async def main() -> int:
        async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
            await client.get("/a")
            inner.gate = asyncio.Event()
            call = asyncio.ensure_future(client.get("/b"))
            await inner.waiting.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            inner.gate.set()
            return (await client.get("/c")).status_code

    assert asyncio.run(main()) == 200
    assert inner.cancelled == 1
    assert inner.sent == ["/a", "/b", "/c"]


def test_the_inner_calls_error_comes_back_unchanged_from_the_short_way() -> None:
    class Failing(Inner):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/b":
                await asyncio.sleep(0)
                raise httpx.ConnectError("refused", request=request)
            return await super().handle_async_request(request)

    transport = short_way_transport(Failing())

    async def main() -> int:
        async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
            await client.get("/a")
            with pytest.raises(httpx.ConnectError, match="refused"):
                await client.get("/b")
            return (await client.get("/c")).status_code

    assert asyncio.run(main()) == 200


def test_nothing_is_spent_before_the_call_is_awaited_and_it_is_awaited_once() -> None:
    limiter = rk.Limiter(rules=[])
    inner = Inner(hops=1, **WORD)
    transport = AsyncTransport(limiter, inner=inner)

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
            await client.get("/a")  # the long way: makes the group, at 1 left
        request = httpx.Request("GET", "https://api.example.com/b")
        unawaited = transport.handle_async_request(request)
        unawaited.close()  # type: ignore[attr-defined]  # a coroutine, typed as an Awaitable
        assert limiter.peek("api.example.com", group="api.example.com requests").remaining == 1
        awaited = transport.handle_async_request(request)
        assert (await awaited).status_code == 200
        with pytest.raises(RuntimeError, match="cannot reuse"):  # as any coroutine
            await awaited

    asyncio.run(main())
    assert inner.sent == ["/a", "/b"]


def test_a_reply_that_asks_for_a_retry_is_retried_on_the_short_way() -> None:
    answers = [200, 429, 200]

    class Retrying(Inner):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            self.status = answers[len(self.sent)]
            self.headers = {"retry-after": "0"} if self.status == 429 else {}
            return await super().handle_async_request(request)

    inner = Retrying(hops=1)
    transport = short_way_transport(inner)

    async def main() -> list[int]:
        async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
            return [(await client.get(path)).status_code for path in ("/a", "/b")]

    assert asyncio.run(main()) == [200, 200]
    assert inner.sent == ["/a", "/b", "/b"]
    assert transport.stats()["api.example.com"]["retries"] == 1


def test_a_new_inner_and_a_subclasss_own_method_take_the_calls_after_them() -> None:
    first, then = Inner(hops=1), Inner(hops=1)
    transport = short_way_transport(first)
    seen: list[str] = []

    class Noting(AsyncTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.url.path)
            return await super().handle_async_request(request)

    noted = Inner(hops=1)
    noting = Noting(rk.Limiter(rules=[]), inner=noted)

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
            await client.get("/a")
            await client.get("/b")
            transport.inner = then
            await client.get("/c")
            await client.get("/d")
        async with httpx.AsyncClient(transport=noting, base_url="https://api.example.com") as client:
            for path in ("/a", "/b", "/c"):
                await client.get(path)

    asyncio.run(main())
    assert (first.sent, then.sent) == (["/a", "/b"], ["/c", "/d"])
    assert seen == noted.sent == ["/a", "/b", "/c"]


def test_an_async_transport_dropped_is_freed_at_once() -> None:
    transport = short_way_transport(Inner(hops=1))

    async def main(transport: AsyncTransport) -> None:
        async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
            await client.get("/a")
            await client.get("/b")

    asyncio.run(main(transport))
    dropped = weakref.ref(transport)
    gc.disable()
    try:
        del transport
        assert dropped() is None
    finally:
        gc.enable()


# --- aiohttp -----------------------------------------------------------------------------------------------------


def gated(
    gate: asyncio.Event, waiting: asyncio.Event, cancelled: list[str]
) -> Callable[..., Awaitable[aiohttp.ClientResponse]]:
    """An aiohttp middleware after ratekeeper's that waits on ``gate`` before the request goes out (setting
    ``waiting`` then), noting a cancellation."""

    async def middleware(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        if request.url.path == "/held":
            waiting.set()
            try:
                await gate.wait()
            except asyncio.CancelledError:
                cancelled.append(request.url.path)
                raise
        return await handler(request)

    return middleware


def test_aiohttp_short_way_cancels_the_inner_call_and_goes_on(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    pace = Middleware(rk.Limiter(rules=[]))
    cancelled: list[str] = []

    async def main() -> list[int]:
        gate, waiting = asyncio.Event(), asyncio.Event()
        async with aiohttp.ClientSession(middlewares=(pace, gated(gate, waiting, cancelled))) as session:
            codes = []
            for path in ("/a", "/b"):  # the long way, then the short way
                async with session.get(f"{served.url}{path}") as answer:
                    codes.append(answer.status)
            held = asyncio.ensure_future(session.get(f"{served.url}/held"))
            await waiting.wait()  # past ratekeeper, into the inner call
            held.cancel()
            with pytest.raises(asyncio.CancelledError):
                await held
            async with session.get(f"{served.url}/c") as answer:
                codes.append(answer.status)
            return codes

    assert asyncio.run(main()) == [200, 200, 200]
    assert cancelled == ["/held"]
    assert sum(served.api.accepted.values()) == 3
    assert pace.stats()[served.url.removeprefix("http://")]["calls"] == 3


def test_aiohttp_middleware_called_directly_is_a_lazy_awaitable(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    limiter = rk.Limiter(rules=[])
    pace = Middleware(limiter)
    host = served.url.removeprefix("http://")

    async def main() -> None:
        async with aiohttp.ClientSession(middlewares=(pace,)) as session:
            for _ in range(2):  # the long way, then the short way: the URL's place is known
                async with session.get(served.url) as answer:
                    assert answer.status == 200
        before = limiter.peek(host, group=f"{host} api").remaining
        request = aiohttp.ClientRequest("GET", aiohttp.client.URL(served.url), loop=asyncio.get_running_loop())

        async def never(request: aiohttp.ClientRequest) -> aiohttp.ClientResponse:
            raise AssertionError("not awaited, not sent")

        pace(request, never).close()
        assert limiter.peek(host, group=f"{host} api").remaining == before

    asyncio.run(main())
    assert sum(served.api.accepted.values()) == 2


def test_aiohttp_middleware_without_a_short_way_and_a_subclasss_call(serve_api: ServeApi) -> None:
    served = serve_api("ietf", 100, 60.0)
    keyed = Middleware(rk.Limiter(rules=[]), api_key_header="authorization")
    seen: list[str] = []

    class Noting(Middleware):
        def __call__(
            self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
        ) -> Awaitable[aiohttp.ClientResponse]:
            seen.append(request.url.path)
            return super().__call__(request, handler)

    noting = Noting(rk.Limiter(rules=[]))

    async def main() -> list[int]:
        codes = []
        for pace in (keyed, noting):
            async with aiohttp.ClientSession(middlewares=(pace,), headers={"authorization": "k"}) as session:
                for path in ("/a", "/b", "/c"):
                    async with session.get(f"{served.url}{path}") as answer:
                        codes.append(answer.status)
        return codes

    assert asyncio.run(main()) == [200] * 6
    assert seen == ["/a", "/b", "/c"]
    # The keyed middleware kept its calls under the host and the key's fingerprint, every one of them: none went
    # a short way keyed by the host alone.
    (key,) = keyed.stats()
    assert key.startswith(served.url.removeprefix("http://") + " ")
    assert keyed.stats()[key]["calls"] == 3
    assert sum(served.api.accepted.values()) == 6
