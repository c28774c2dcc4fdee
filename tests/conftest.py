"""Shared fixtures and hypothesis profiles.

``HYPOTHESIS_PROFILE=ci`` runs the property tests with more examples than the default ``fast`` profile.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ratekeeper as rk
from _redis import ENGINES, EngineServers, RedisCluster, RedisServer
from _support import STORES, MakeLimiter, Store, removed_with
from hypothesis import settings

# Hypothesis imports its patch writer (libcst, then mypy_extensions) while reporting a failing example, and
# that import warns. Under filterwarnings=error the warning would turn one failing property into an
# INTERNALERROR that ends the whole session, so the import is done here, once, with the warning ignored.
with warnings.catch_warnings(), contextlib.suppress(ImportError):
    warnings.simplefilter("ignore", DeprecationWarning)
    import hypothesis.extra._patching  # noqa: F401

settings.register_profile("fast", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture
def clock() -> rk.ManualClock:
    """A clock frozen at t=0: it moves only when the test advances it or a limiter waits on it."""
    return rk.ManualClock()


@pytest.fixture(scope="session")
def django_site() -> None:
    """Django set up in this process with the test project's settings (``tests/web/django_site``), for the
    Django tests and the guide's Django and DRF pages. Django and DRF are test dependencies: never skipped."""
    import sys

    import django

    web = str(Path(__file__).resolve().parent / "web")
    if web not in sys.path:
        sys.path.insert(0, web)
    os.environ["DJANGO_SETTINGS_MODULE"] = "django_site.settings"
    django.setup()


@pytest.fixture(scope="session")
def engine_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServers]:
    """One real server per engine for the session, started at its first use (tests keep apart by key prefix)."""
    servers = EngineServers(tmp_path_factory.mktemp("servers"))
    yield servers
    servers.stop()


@pytest.fixture(scope="session", params=ENGINES)
def redis_server(request: pytest.FixtureRequest, engine_servers: EngineServers) -> RedisServer:
    """The session's server of each engine in turn (Redis, then Valkey): a test that takes it runs on both."""
    return engine_servers.get(request.param)


@pytest.fixture(params=ENGINES)
def own_redis_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisServer]:
    """A server of this test's own, of each engine in turn, to restart, stop or pause (the shared one must
    stay up)."""
    server = RedisServer(tmp_path, request.param)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own, so that tests sharing the server never share a key; without glob
    characters (a parametrized test's id has brackets), so that ``KEYS prefix*`` finds its keys."""
    return "test:" + re.sub(r"[][*?\\]", "_", request.node.nodeid) + ":"


@pytest.fixture(params=STORES, ids=STORES)
def store(request: pytest.FixtureRequest) -> Store:
    """Each store in turn, like the ``limits`` library's ``@all_storage``: a test that takes it (or
    ``make_limiter``) runs once with its limiters on each of ``STORES``."""
    name: Store = request.param
    return name


@pytest.fixture
def make_limiter(store: Store, request: pytest.FixtureRequest) -> MakeLimiter:
    """``make_limiter(*args, **options)``: ``rk.Limiter(*args, **options)`` on the store, a new one at every call.

    In Redis exact mode it has ``on_error="raise"`` (a Redis failure fails the test instead of being
    decided in memory), under a key prefix of its own at every call, so that limiters, and hypothesis
    examples, never share a key. Its timeout is 2 s, not 50 ms: on a loaded machine a round trip now and
    then takes 100 ms, which would fail a test of decisions for no fault of the decisions. With a
    ManualClock the script decides at the clock's time, as memory does.
    Only the Redis runs ask for the session's redis-server: memory-only runs never start one.

    In Redis sync mode it is one node alone (the others' usage is what sync mode trades exactness for; its
    bound across nodes is tested in tests/stores/test_redis_sync.py), which decides as memory does. It
    syncs every 50 ms, so the syncs run during the tests and must leave a lone node's decisions alone.

    In a shared region it is a region of its own at every call, its file removed when the limiter is
    collected (a file removed under a live limiter would be made anew at its first decision, which
    follows the file at its path), ``max_keys`` 100,000 unless the test gives one.
    """
    if store == "memory":

        def in_memory(*args: Any, **options: Any) -> rk.Limiter:
            return rk.Limiter(*args, **options)

        return in_memory
    if store == "shared":
        folder: Path = request.getfixturevalue("tmp_path")
        regions = itertools.count()

        def in_shared(*args: Any, **options: Any) -> rk.Limiter:
            path = folder / f"region-{next(regions)}"
            options.setdefault("max_keys", 100_000)
            return removed_with(rk.Limiter(*args, backend=rk.Shared(path=path), **options), path)

        return in_shared
    servers: EngineServers = request.getfixturevalue("engine_servers")
    server = servers.get("valkey" if store.startswith("valkey") else "redis")
    prefix: str = request.getfixturevalue("redis_prefix")
    numbers = itertools.count()

    def in_redis(*args: Any, **options: Any) -> rk.Limiter:
        where = f"{prefix}{next(numbers)}:"
        if store.endswith("_sync"):
            backend = rk.Redis(server.url, mode="sync", prefix=where, sync_interval=0.05, timeout=2.0)
        else:
            backend = rk.Redis(server.url, prefix=where, on_error="raise", timeout=2.0)
        return rk.Limiter(*args, backend=backend, **options)

    return in_redis


@pytest.fixture(scope="session", params=ENGINES)
def redis_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A real three-master Cluster of each engine in turn, for the session."""
    cluster = RedisCluster(tmp_path_factory.mktemp("cluster"), request.param)
    cluster.start()
    yield cluster
    cluster.stop()
