"""The outgoing transports' counters: ``stats()`` and their Prometheus samples (``OutgoingCollector``)."""

from __future__ import annotations

import httpx
import pytest
import ratekeeper as rk
from _redis import RedisServer
from prometheus_client import CollectorRegistry, generate_latest
from ratekeeper.httpx import AsyncTransport, Transport
from ratekeeper.prometheus import OutgoingCollector


def test_the_counters_reach_prometheus() -> None:
    answers = iter([429, 200, 200])

    def answer(request: httpx.Request) -> httpx.Response:
        status = next(answers)
        headers = {"x-ratelimit-limit": "10", "x-ratelimit-remaining": "7", "x-ratelimit-reset": "30"}
        if status == 429:
            headers["retry-after"] = "0"
        return httpx.Response(status, headers=headers)

    transport = Transport(rk.Limiter(rules=[]), inner=httpx.MockTransport(answer))
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        assert [client.get("/").status_code for _ in range(2)] == [200, 200]
    stats = transport.stats()["api.example.com"]
    assert (stats["calls"], stats["throttled"], stats["retries"]) == (3, 1, 1)
    assert stats["remaining"] == {"requests": 7}
    assert stats["dialect"] == "x-ratelimit"

    registry = CollectorRegistry()
    registry.register(OutgoingCollector(transport, const_labels={"worker": "1"}))
    text = generate_latest(registry).decode()
    assert 'ratekeeper_outgoing_calls_total{key="api.example.com",worker="1"} 3.0' in text
    assert 'ratekeeper_outgoing_throttled_total{key="api.example.com",worker="1"} 1.0' in text
    assert 'ratekeeper_outgoing_remaining{budget="requests",key="api.example.com",worker="1"} 7.0' in text
    assert 'ratekeeper_outgoing_reset_seconds{budget="requests",key="api.example.com",worker="1"} 30.0' in text


@pytest.mark.parametrize("given", [(object(),), (rk.Limiter(rules=[]),), ()])
def test_the_collector_takes_only_transports(given: tuple[object, ...]) -> None:
    # A Limiter has a stats() too: taken, it failed every scrape of the registry ('bool' not subscriptable).
    with pytest.raises(TypeError, match=r"^outgoing: "):
        OutgoingCollector(*given)  # type: ignore[arg-type]


def test_one_collector_exports_several_transports_a_shared_key_as_one_series() -> None:
    # Two collectors of one registry clashed (DuplicateTimeseries): one takes every transport of the process.
    def answer(request: httpx.Request) -> httpx.Response:
        remaining = "5" if request.url.path == "/first" else "4"
        return httpx.Response(200, headers={"x-ratelimit-remaining": remaining, "x-ratelimit-reset": "30"})

    limiter = rk.Limiter(rules=[])
    transports = [Transport(limiter, inner=httpx.MockTransport(answer)) for _ in range(2)]
    for transport, path in zip(transports, ("/first", "/second"), strict=True):
        with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
            assert client.get(path).status_code == 200
    registry = CollectorRegistry()
    registry.register(OutgoingCollector(*transports, transports[0].outgoing))  # a shared Outgoing counted once
    text = generate_latest(registry).decode()
    assert 'ratekeeper_outgoing_calls_total{key="api.example.com"} 2.0' in text
    assert 'ratekeeper_outgoing_remaining{budget="requests",key="api.example.com"} 4.0' in text  # the latest word


def _spending_answer(request: httpx.Request) -> httpx.Response:
    """One call left after the first (which makes the group), none after the second."""
    left = "1" if request.url.path == "/first" else "0"
    return httpx.Response(
        200, headers={"x-ratelimit-limit": "5", "x-ratelimit-remaining": left, "x-ratelimit-reset": "30"}
    )


def test_a_transports_looks_at_its_turn_are_not_refusals_in_the_limiters_counts() -> None:
    # A waiting call looks at its turn every quarter second at most: each look counted as a refused request in
    # the limiter's stats (331 refusals for 100 calls all answered 200). The transport counts its refusals.
    limiter = rk.Limiter(rules=[])
    transport = Transport(limiter, inner=httpx.MockTransport(_spending_answer), wait=False)
    with httpx.Client(transport=transport, base_url="https://api.example.com") as client:
        assert client.get("/first").status_code == 200
        assert client.get("/").status_code == 200
        for _ in range(3):
            with pytest.raises(rk.RateLimited):
                client.get("/")
    group = limiter.stats()["groups"]["api.example.com requests"]
    assert (group["requests"], group["allowed"], group["refused"]) == (1, 1, 0)
    assert transport.stats()["api.example.com"]["refused"] == 3


@pytest.mark.asyncio
async def test_a_transports_looks_are_not_refusals_in_the_limiters_counts_on_redis_too(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    backend = rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise")
    limiter = rk.Limiter(rules=[], backend=backend)
    transport = AsyncTransport(limiter, inner=httpx.MockTransport(_spending_answer), wait=False)
    async with httpx.AsyncClient(transport=transport, base_url="https://api.example.com") as client:
        assert (await client.get("/first")).status_code == 200
        assert (await client.get("/")).status_code == 200
        with pytest.raises(rk.RateLimited):
            await client.get("/")
    group = limiter.stats()["groups"]["api.example.com requests"]
    assert (group["allowed"], group["refused"]) == (1, 0)
