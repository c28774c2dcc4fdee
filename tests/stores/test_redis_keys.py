"""The Redis backend's keys on a real redis-server: a (group, peer) pair is encoded without
ambiguity (a ``:`` in a name never makes two limits share a budget), one key's keys keep one Cluster hash
tag, and ``reset`` removes what the limiter owns in Redis, and only that."""

from __future__ import annotations

import itertools
import re

import pytest
import ratekeeper as rk
from _redis import RedisCluster, RedisServer, command

HOUR = 3600.0
prefixes = itertools.count()


def glob(prefix: str) -> str:
    """``prefix`` matched literally in a ``KEYS`` pattern (a parametrized test's id holds ``[...]``)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix)


def keys_of(port: int, prefix: str, rest: str = "*") -> list[str]:
    """The names of the keys that start with ``prefix`` then match ``rest``, sorted."""
    lines = command(port, "KEYS", glob(prefix) + rest).split(b"\r\n")
    return sorted(line.decode() for line in lines[2::2] if line)


def grouped_limiter(backend: rk.Redis, clock: rk.ManualClock | None = None) -> rk.Limiter:
    """Groups ``x`` and ``x:a``, reached by name: the pair whose keys collided."""
    lim = rk.Limiter(rules=[rk.Rule(r"^/", "default", "1/h")], backend=backend, clock=clock)
    lim.add_group("x", ["1/h"])
    lim.add_group("x:a", ["1/h"])
    return lim


def test_a_colon_in_a_name_never_shares_a_budget_in_exact_mode(redis_server: RedisServer, redis_prefix: str) -> None:
    lim = grouped_limiter(rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    assert lim.allow("a:b", group="x")
    assert lim.allow("b", group="x:a")  # its own budget: not the one "a:b" spent in "x"
    assert not lim.allow("a:b", group="x")
    assert not lim.allow("b", group="x:a")
    # The same holds for peers hashed for their length or braces.
    long = "p" * 100
    assert lim.allow(f"a:{long}", group="x")
    assert lim.allow(long, group="x:a")
    assert lim.allow("a:{b}", group="x")
    assert lim.allow("{b}", group="x:a")


def test_a_colon_in_a_name_never_shares_a_budget_in_sync_mode(redis_server: RedisServer, redis_prefix: str) -> None:
    backend = rk.Redis(redis_server.url, mode="sync", sync_interval=HOUR, prefix=redis_prefix)
    a, b = (grouped_limiter(backend, rk.ManualClock()) for _ in range(2))
    assert a.allow("a:b", group="x")
    assert a.sync_now() == (1, 0)
    assert b.allow("b", group="x:a")
    assert b.sync_now() == (1, 0)  # nothing of "a:b" in "x" is charged to "b" in "x:a"
    assert a.sync_now() == (1, 0)
    assert not b.allow("b", group="x:a")  # its own admission still counts


def test_the_key_format(redis_server: RedisServer, redis_prefix: str) -> None:
    # <prefix>{<len(group)>:<group>:<peer>}:<limit index>:<algorithm>, and :used in sync mode: as the
    # key format in docs/workers-and-machines.md says.
    rules = [rk.Rule(r"^/", "x:a", limits=[rk.Limit("3/s"), rk.Limit("9/h", algorithm="fixed_window")])]
    lim = rk.Limiter(rules=rules, backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    assert lim.allow("b", "/")
    prefix = f"{redis_prefix}{next(prefixes)}:"
    synced = rk.Limiter(rules=rules, backend=rk.Redis(redis_server.url, mode="sync", sync_interval=HOUR, prefix=prefix))
    assert synced.allow("b", "/")
    synced.sync_now()
    assert keys_of(redis_server.port, redis_prefix, "{*") == [
        f"{redis_prefix}{{3:x:a:b}}:0",
        f"{redis_prefix}{{3:x:a:b}}:1",
    ]
    assert keys_of(redis_server.port, prefix) == [f"{prefix}{{3:x:a:b}}:used"]


def test_one_keys_keys_share_a_cluster_slot(redis_cluster: RedisCluster, redis_prefix: str) -> None:
    rules = [
        rk.Rule(r"^/", "x:a", limits=[rk.Limit("2/s"), rk.Limit("100/h", algorithm="sliding_log")]),
    ]
    backend = rk.Redis(redis_cluster.url, prefix=redis_prefix, on_error="raise", timeout=1)
    lim = rk.Limiter(rules=rules, backend=backend)
    # A decision whose keys spanned two slots would fail with CROSSSLOT (and raise here).
    for peer in ["b", "b:c", "{b}", "b" * 100]:
        assert [lim.allow(peer, "/") for _ in range(3)] == [True, True, False]
    found = [keys_of(node.port, redis_prefix) for node in redis_cluster.nodes]
    assert sum(map(len, found)) == 8
    for keys in found:
        assert len(keys) % 2 == 0  # both limits of a peer on one node
        tags = {key[key.index("{") : key.index("}") + 1] for key in keys}
        assert len(tags) == len(keys) // 2
    # Every master is scanned by reset().
    other = f"{redis_prefix}other:"
    untouched = rk.Limiter(rules=rules, backend=rk.Redis(redis_cluster.url, prefix=other, on_error="raise", timeout=1))
    for peer in range(30):
        assert untouched.allow(f"p{peer}", "/")
        assert lim.allow(f"p{peer}", "/")
    assert all(keys_of(node.port, redis_prefix, "{*") for node in redis_cluster.nodes)
    lim.reset()
    assert not any(keys_of(node.port, redis_prefix, "{*") for node in redis_cluster.nodes)
    assert sum(len(keys_of(node.port, other)) for node in redis_cluster.nodes) == 60
    assert lim.allow("b", "/")


def spend(lim: rk.Limiter, peers: list[str]) -> None:
    for peer in peers:
        for group in ("x", "x:a"):
            assert lim.allow(peer, group=group)
            assert not lim.allow(peer, group=group)


@pytest.mark.parametrize("how", ["peer", "all"])
def test_reset_forgets_usage_in_redis_in_exact_mode(redis_server: RedisServer, redis_prefix: str, how: str) -> None:
    lim = grouped_limiter(rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    # Another limiter's keys on the same server, under a prefix that starts like this one's.
    other = f"{redis_prefix}other:"
    neighbour = grouped_limiter(rk.Redis(redis_server.url, prefix=other, on_error="raise"))
    spend(lim, ["alice", "bob"])
    spend(neighbour, ["alice"])
    if how == "peer":
        lim.reset("alice")
        assert lim.allow("alice", group="x")
        assert lim.allow("alice", group="x:a")
        assert not lim.allow("bob", group="x")
        assert not lim.allow("bob", group="x:a")
    else:
        lim.reset()
        assert keys_of(redis_server.port, redis_prefix, "{*") == []
        assert lim.allow("alice", group="x")
        assert lim.allow("bob", group="x:a")
    assert len(keys_of(redis_server.port, other)) == 2
    assert not neighbour.allow("alice", group="x")
    assert not neighbour.allow("alice", group="x:a")


@pytest.mark.parametrize("how", ["peer", "all"])
def test_reset_forgets_usage_in_redis_in_sync_mode(redis_server: RedisServer, redis_prefix: str, how: str) -> None:
    backend = rk.Redis(redis_server.url, mode="sync", sync_interval=HOUR, prefix=redis_prefix)
    a, b = (grouped_limiter(backend, rk.ManualClock()) for _ in range(2))
    other = f"{redis_prefix}other:"
    neighbour = grouped_limiter(rk.Redis(redis_server.url, mode="sync", sync_interval=HOUR, prefix=other))
    spend(a, ["alice", "bob"])
    spend(neighbour, ["alice"])
    assert a.sync_now() == (4, 0)
    assert neighbour.sync_now() == (2, 0)
    # Usage admitted after the last push (pending) is forgotten too: the next sync pushes none of it.
    assert a.allow("carol", group="x")
    a.reset("alice") if how == "peer" else a.reset()
    assert a.allow("alice", group="x")  # the local state is forgotten
    assert b.allow("alice", group="x")
    assert b.sync_now() == (1, 0)  # and so is the counter: b is charged nothing of a's old usage
    assert b.allow("alice", group="x:a")
    if how == "peer":
        assert b.allow("bob", group="x")
        assert b.sync_now() == (3, 1)  # bob's counter was kept
        assert not b.allow("bob", group="x")
        # a pushes alice's and carol's 1 and learns of b's 1 on alice and on bob in "x".
        assert a.sync_now() == (4, 2)
    else:
        assert a.sync_now() == (1, 1)  # a pushes alice's 1 (carol's pending 1 is gone), learns of b's
        assert b.allow("bob", group="x")
    assert not a.allow("alice", group="x")
    assert len(keys_of(redis_server.port, other)) == 2
    neighbour.sync_now()
    assert not neighbour.allow("alice", group="x")


def test_a_reset_that_cannot_reach_redis_says_so(tmp_path: object) -> None:
    from pathlib import Path

    server = RedisServer(Path(str(tmp_path)))
    server.start()
    try:
        for backend in (
            rk.Redis(server.url, on_error="local", timeout=0.05),
            rk.Redis(server.url, mode="sync", sync_interval=HOUR, timeout=0.05),
        ):
            lim = rk.Limiter("1/h", backend=backend)
            lim.reset()
            server.stop()
            for peer in (None, "alice"):
                with pytest.raises(rk.BackendUnavailable, match="reset"):
                    lim.reset(peer)
            server.start()
    finally:
        server.stop()
