"""Exact mode runs its decision script as a Redis Function (``FCALL``: its definitions are made once, at
load), loads it again when the server lost it, and falls back to ``EVALSHA`` on a server without
functions (Redis 6, or ``FUNCTION`` renamed away), deciding the same either way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import ratekeeper as rk
import redis
from _redis import RedisServer


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server has run ``command`` (INFO commandstats)."""
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def burst_then_refusal(lim: rk.Limiter, peer: str) -> list[bool]:
    """Three allowed of 3/min, then refused; the asyncio twin decides the fourth again."""
    seen = [lim.allow(peer) for _ in range(4)]
    seen.append(asyncio.run(lim.aallow(peer)))
    return seen


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis(port=redis_server.port, decode_responses=True) as connection:
        yield connection


def test_decisions_are_function_calls_on_a_server_with_functions(
    redis_server: RedisServer, redis_prefix: str, client: redis.Redis
) -> None:
    lim = rk.Limiter("3/min", backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    fcalls, evalshas = calls(client, "fcall"), calls(client, "evalsha")

    assert burst_then_refusal(lim, "alice") == [True, True, True, False, False]

    # One FCALL per decision (the first fails until the library is loaded, then runs again).
    assert calls(client, "fcall") - fcalls in (5, 6)
    assert calls(client, "evalsha") == evalshas
    # RESP2: each library is a flat list of field, value pairs.
    libraries = [dict(zip(library[::2], library[1::2], strict=True)) for library in client.function_list()]
    assert any(library["library_name"].startswith("ratekeeper_") for library in libraries)


def test_a_library_the_server_lost_is_loaded_again(
    redis_server: RedisServer, redis_prefix: str, client: redis.Redis
) -> None:
    lim = rk.Limiter("3/min", backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    assert lim.allow("alice")
    assert lim.allow("alice")
    client.function_flush()  # as a restart without persistence would; the keys stay

    # No error reaches the caller (on_error="raise" would raise it), and the count goes on.
    assert lim.allow("alice")
    assert not lim.allow("alice")
    client.function_flush()
    assert not asyncio.run(lim.aallow("alice"))
    assert client.function_list() != []


@pytest.fixture
def server_without_functions(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server whose FCALL and FUNCTION commands are renamed away, as a Redis 6 has none."""
    server = RedisServer(tmp_path)
    server.extra = ["--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""]
    server.start()
    yield server
    server.stop()


def test_a_server_without_functions_is_served_by_evalsha(server_without_functions: RedisServer) -> None:
    lim = rk.Limiter("3/min", backend=rk.Redis(server_without_functions.url, on_error="raise"))

    assert burst_then_refusal(lim, "alice") == [True, True, True, False, False]

    with redis.Redis(port=server_without_functions.port, decode_responses=True) as client:
        assert calls(client, "evalsha") >= 5
        assert calls(client, "fcall") == 0
    refused = lim.check("alice")
    assert not refused.allowed
    assert 0 < refused.retry_after <= 20  # one slot of 3/min


def test_concurrent_asyncio_decisions_each_get_their_own_reply(redis_server: RedisServer, redis_prefix: str) -> None:
    # Many decisions from one loop at once go to Redis together (one call for several): each must
    # come back to its own caller. Two peers on different limits, interleaved: each peer's allowed
    # decisions count down its own limit, one `remaining` each.
    rules = [rk.Rule(r"^/a", "a", "10/min"), rk.Rule(r"^/b", "b", "20/min")]
    lim = rk.Limiter(rules=rules, backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))

    async def flood() -> list[tuple[str, rk.Decision]]:
        asks = [("alice", "/a"), ("bob", "/b")] * 60
        decisions = await asyncio.gather(*(lim.acheck(peer, path) for peer, path in asks))
        return [(peer, decision) for (peer, _), decision in zip(asks, decisions, strict=True)]

    decided = asyncio.run(flood())
    for peer, limit in (("alice", 10), ("bob", 20)):
        allowed = [d for p, d in decided if p == peer and d.allowed]
        assert sorted(d.remaining for d in allowed) == list(range(limit))
        assert all(d.group == ("a" if peer == "alice" else "b") for p, d in decided if p == peer)
    assert asyncio.run(lim.aallow("carol", "/a"))  # a new peer, after the flood
