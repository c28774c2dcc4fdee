"""The Redis backend on a real three-master Redis Cluster: a decision's keys share one slot (no
CROSSSLOT), peers spread over the masters, and sync mode's pushes reach each key's node."""

from __future__ import annotations

import pytest
import ratekeeper as rk
from _redis import RedisCluster, command


def keys_per_node(cluster: RedisCluster, prefix: str) -> list[int]:
    counts = []
    for node in cluster.nodes:
        reply = command(node.port, "KEYS", f"{prefix}*")
        counts.append(int(reply.split(b"\r\n")[0][1:]))  # the array's length
    return counts


def test_multi_limit_decisions_touch_one_slot_and_peers_spread(redis_cluster: RedisCluster, redis_prefix: str) -> None:
    rules = [
        rk.Rule(r"^/", "api", limits=[rk.Limit("3/s"), rk.Limit("100/h", algorithm="sliding_window")]),
    ]
    lim = rk.Limiter(rules=rules, backend=rk.Redis(redis_cluster.url, prefix=redis_prefix, on_error="raise", timeout=1))
    for peer in range(30):
        assert [lim.allow(f"peer-{peer}", "/") for _ in range(4)] == [True, True, True, False]
    # Two keys per peer, on the node of the peer's slot; thirty peers land on every master.
    counts = keys_per_node(redis_cluster, redis_prefix)
    assert sum(counts) == 60
    assert all(count > 0 for count in counts)
    assert all(count % 2 == 0 for count in counts)


@pytest.mark.asyncio
async def test_asyncio_calls_reach_every_node(redis_cluster: RedisCluster, redis_prefix: str) -> None:
    lim = rk.Limiter("2/min", backend=rk.Redis(redis_cluster.url, prefix=redis_prefix, on_error="raise", timeout=1))
    admitted = [await lim.aallow(f"p{i % 10}") for i in range(30)]
    assert sum(admitted) == 20


def test_sync_mode_pushes_to_each_keys_node(redis_cluster: RedisCluster, redis_prefix: str) -> None:
    backend = rk.Redis(redis_cluster.url, mode="sync", sync_interval=3600, prefix=redis_prefix, timeout=1)
    a, b = (rk.Limiter("5/h", clock=rk.ManualClock(), backend=backend) for _ in range(2))
    for peer in range(10):
        assert sum(a.allow(f"p{peer}") for _ in range(3)) == 3
        assert sum(b.allow(f"p{peer}") for _ in range(3)) == 3
    assert a.sync_now() == (10, 0)
    assert b.sync_now() == (10, 30)
    assert not any(b.allow(f"p{peer}") for peer in range(10))
    assert all(count > 0 for count in keys_per_node(redis_cluster, redis_prefix))


def test_lease_mode_leases_from_each_keys_node(redis_cluster: RedisCluster, redis_prefix: str) -> None:
    rules = [
        rk.Rule(r"^/api", "api", limits=[rk.Limit("5/h", algorithm="fixed_window"), rk.Limit("8/h")]),
        rk.Rule(r"^/slow", "slow", limits=[rk.Limit(concurrency=2)]),
    ]
    clock = rk.ManualClock()
    leased = [
        rk.Limiter(
            rules=rules,
            clock=clock,
            backend=rk.Redis(redis_cluster.url, mode="lease", prefix=redis_prefix, on_error="raise", timeout=1),
        )
        for _ in range(2)
    ]
    for peer in range(10):
        # Two processes leasing one key's budget on its node: five in all, never more.
        assert sum(leased[i % 2].allow(f"p{peer}", "/api") for i in range(12)) == 5
        first, second, third = (leased[i % 2].concurrent(f"p{peer}", "/slow") for i in range(3))
        with first, second, pytest.raises(rk.RateLimited), third:
            pass
    assert all(count > 0 for count in keys_per_node(redis_cluster, redis_prefix))
