"""The outgoing transports' counters: ``stats()`` and their Prometheus samples (``OutgoingCollector``)."""

from __future__ import annotations

import httpx
import pytest
import ratekeeper as rk
from prometheus_client import CollectorRegistry, generate_latest
from ratekeeper.httpx import Transport
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


def test_the_collector_takes_only_what_counts_calls() -> None:
    with pytest.raises(TypeError, match=r"^outgoing: "):
        OutgoingCollector(object())  # type: ignore[arg-type]
