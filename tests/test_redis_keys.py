"""The Redis backend's keys (issue 19) on a real redis-server: a (group, peer) pair is encoded without
ambiguity (a ``:`` in a name never makes two limits share a budget), and one key's keys keep one Cluster
hash tag."""

from __future__ import annotations

import itertools
import re

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
    # README says.
    rules = [rk.Rule(r"^/", "x:a", limits=[rk.Limit("3/s"), rk.Limit("9/h", algorithm="fixed_window")])]
    lim = rk.Limiter(rules=rules, backend=rk.Redis(redis_server.url, prefix=redis_prefix, on_error="raise"))
    assert lim.allow("b", "/")
    prefix = f"{redis_prefix}{next(prefixes)}:"
    synced = rk.Limiter(rules=rules, backend=rk.Redis(redis_server.url, mode="sync", sync_interval=HOUR, prefix=prefix))
    assert synced.allow("b", "/")
    synced.sync_now()
    assert keys_of(redis_server.port, redis_prefix, "{*") == [
        f"{redis_prefix}{{3:x:a:b}}:0:gcra",
        f"{redis_prefix}{{3:x:a:b}}:1:fixed_window",
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
