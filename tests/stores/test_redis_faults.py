"""The Redis client when the server misbehaves: restarted while the limiter is idle, stalled (SIGSTOP, or
a listener that never answers), slow through setup, not Redis at all (an HTTP server on the port), and
restarted under many callers at once. Each against a real ``redis-server`` or a loopback fake."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import ratekeeper as rk
from _redis import FakeServer, RedisServer, free_port, functions_not_loaded_answer, http_answer, paused

# The promise under test: a decision ends within `timeout`. The margin covers a loaded 2-core machine
# (thread wake-ups, the GIL), not a second wait: the old client took 2-4x the timeout.
TIMEOUT = 0.2
BOUND = TIMEOUT + 0.15


@pytest.fixture
def fake_server() -> Iterator[Callable[..., FakeServer]]:
    """Starts loopback fakes for the test and always stops them."""
    started: list[FakeServer] = []

    def start(answer: Callable[[bytes], bytes | None], delay: float = 0.0) -> FakeServer:
        server = FakeServer(answer, delay)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def elapsed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.monotonic()
    result = call()
    return time.monotonic() - started, result


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ratekeeper" and r.levelno >= logging.WARNING]


# A restart while idle -------------------------------------------------------------------------------


def test_a_restart_while_idle_costs_blocking_callers_nothing(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    lim = rk.Limiter("1000/s", backend=rk.Redis(own_redis_server.url, on_error="raise", timeout=1.0))
    # Four threads at once leave four connections in the pool, all dead after the restart.
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(lambda _: lim.allow("warm"), range(40)))
    own_redis_server.restart()
    with caplog.at_level(logging.WARNING, logger="ratekeeper"), ThreadPoolExecutor(4) as pool:
        # A dead pooled connection is replaced and the decision sent again, not failed.
        assert all(pool.map(lambda _: lim.allow("after"), range(40)))
    stats = lim.stats()
    assert (stats["backend_errors"], stats["backend_outages"], stats["backend_down"]) == (0, 0, False)
    assert warnings_of(caplog) == []


@pytest.mark.asyncio
async def test_a_restart_while_idle_costs_asyncio_callers_nothing(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    lim = rk.Limiter("1000/s", backend=rk.Redis(own_redis_server.url, on_error="raise", timeout=1.0))
    assert all(await asyncio.gather(*(lim.aallow("warm") for _ in range(64))))
    own_redis_server.restart()
    with caplog.at_level(logging.WARNING, logger="ratekeeper"):
        assert all(await asyncio.gather(*(lim.aallow("after") for _ in range(64))))
    stats = lim.stats()
    assert (stats["backend_errors"], stats["backend_outages"], stats["backend_down"]) == (0, 0, False)
    assert warnings_of(caplog) == []


# A stalled server: one deadline over connect, setup and the command -------------------------------


def test_a_stalled_server_fails_blocking_decisions_within_the_timeout(own_redis_server: RedisServer) -> None:
    warm = rk.Limiter("100/s", backend=rk.Redis(own_redis_server.url, on_error="deny", timeout=TIMEOUT))
    assert warm.allow("a")
    with paused(own_redis_server):
        # A pooled connection: the command's reply never comes.
        took, allowed = elapsed(lambda: warm.allow("a"))
        assert (allowed, took < BOUND) == (False, True), took
        # A new connection: the TCP handshake succeeds (the kernel answers), then nothing.
        fresh = rk.Limiter("100/s", backend=rk.Redis(own_redis_server.url, on_error="deny", timeout=TIMEOUT))
        took, allowed = elapsed(lambda: fresh.allow("a"))
        assert (allowed, took < BOUND) == (False, True), took
        raising = rk.Limiter("100/s", backend=rk.Redis(own_redis_server.url, on_error="raise", timeout=TIMEOUT))
        started = time.monotonic()
        with pytest.raises(rk.BackendUnavailable, match="did not answer within"):
            raising.allow("a")
        assert time.monotonic() - started < BOUND


@pytest.mark.asyncio
async def test_a_stalled_server_fails_asyncio_decisions_within_the_timeout(own_redis_server: RedisServer) -> None:
    warm = rk.Limiter("100/s", backend=rk.Redis(own_redis_server.url, on_error="deny", timeout=TIMEOUT))
    assert await warm.aallow("a")
    with paused(own_redis_server):
        fresh = rk.Limiter("100/s", backend=rk.Redis(own_redis_server.url, on_error="deny", timeout=TIMEOUT))
        for lim in (warm, fresh):
            started = time.monotonic()
            assert not await lim.aallow("a")
            assert time.monotonic() - started < BOUND


def test_a_listener_that_never_answers_fails_within_the_timeout(fake_server: Callable[..., FakeServer]) -> None:
    silent = fake_server(lambda _: None)
    lim = rk.Limiter("100/s", backend=rk.Redis(silent.url, on_error="deny", timeout=TIMEOUT))
    for _ in range(2):
        took, allowed = elapsed(lambda: lim.allow("a"))
        assert (allowed, took < BOUND) == (False, True), took


def test_setup_commands_share_the_decisions_deadline(fake_server: Callable[..., FakeServer]) -> None:
    # Each answer comes within the timeout, but a decision on a server without the library takes
    # FCALL, FUNCTION LOAD and FCALL again (and the connection's own setup): one deadline for them all.
    slow = fake_server(functions_not_loaded_answer, delay=TIMEOUT * 0.6)
    lim = rk.Limiter("100/s", backend=rk.Redis(slow.url, on_error="raise", timeout=TIMEOUT))
    started = time.monotonic()
    with pytest.raises(rk.BackendUnavailable, match="did not answer within"):
        lim.allow("a")
    assert time.monotonic() - started < BOUND


# Not Redis at all --------------------------------------------------------------------------------


def test_an_http_server_on_the_port_is_named_as_the_cause(
    fake_server: Callable[..., FakeServer], caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    http = fake_server(http_answer)
    raising = rk.Limiter("1/min", backend=rk.Redis(http.url, on_error="raise", timeout=1.0))
    with pytest.raises(rk.BackendUnavailable) as raised:
        raising.allow("a")
    message = str(raised.value)
    assert "not the Redis protocol" in message
    assert "\n" not in message
    denying = rk.Limiter("1/min", backend=rk.Redis(http.url, on_error="deny", timeout=1.0))
    with caplog.at_level(logging.WARNING, logger="ratekeeper"):
        assert not denying.allow("a")
        assert not asyncio.run(denying.aallow("a"))
    # The cause is logged once, on one line; nothing was written to the process's stderr.
    (warning,) = warnings_of(caplog)
    assert "not the Redis protocol" in warning
    assert "\n" not in warning
    assert capfd.readouterr().err == ""


@pytest.mark.asyncio
async def test_a_refused_connection_is_named_as_the_cause_in_asyncio_too() -> None:
    # The connection manager's first retry came after 100 ms, past the 50 ms timeout: asyncio callers were told
    # the server "did not answer", as if it were stalled, while blocking ones were told it refused.
    lim = rk.Limiter("10/s", backend=rk.Redis(f"redis://127.0.0.1:{free_port()}", on_error="raise"))
    for _ in range(2):
        with pytest.raises(rk.BackendUnavailable, match="refused"):
            await lim.aallow("a")
    with pytest.raises(rk.BackendUnavailable, match="refused"):
        lim.allow("a")


def test_an_application_without_logging_set_up_gets_nothing_on_stderr(
    fake_server: Callable[..., FakeServer], capfd: pytest.CaptureFixture[str]
) -> None:
    # Without a handler of the application's, Python writes a library's warnings to stderr (logging's
    # "last resort"): the package's logger must have a handler of its own that drops them.
    http = fake_server(http_answer)
    program = textwrap.dedent(
        f"""
        import asyncio
        import ratekeeper as rk
        lim = rk.Limiter("1/min", backend=rk.Redis({http.url!r}, on_error="deny", timeout=1.0))
        print(lim.allow("a"), asyncio.run(lim.aallow("a")))
        """
    )
    # stderr is inherited: capfd sees whatever the child writes to it.
    out = subprocess.run([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert capfd.readouterr().err == ""


# Outages counted once -----------------------------------------------------------------------------


def test_each_restart_under_load_is_one_outage_and_one_pair_of_warnings(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A stopped server refuses connections at once: its outage needs no timeout to be seen, and a long one
    # keeps a loaded machine's slow answer from counting as an outage of its own.
    lim = rk.Limiter("1000000/s", backend=rk.Redis(own_redis_server.url, on_error="local", timeout=5.0))
    stopping = threading.Event()
    decided = [0]

    def blocking_caller(n: int) -> None:
        while not stopping.is_set():
            lim.allow(f"thread-{n}")
            decided[0] += 1

    async def asyncio_callers() -> None:
        async def caller(n: int) -> None:
            while not stopping.is_set():
                await lim.aallow(f"task-{n}")
                decided[0] += 1

        await asyncio.gather(*(caller(n) for n in range(64)))

    def wait_for(condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 15
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    def decisions_flow() -> bool:
        # Decisions made in Redis since the check began: the callers are busy on a healthy server.
        seen = decided[0]
        wait_for(lambda: decided[0] > seen + 100, "the callers stopped deciding")
        return not lim.stats()["backend_down"]

    restarts = 3
    callers = [threading.Thread(target=blocking_caller, args=(n,)) for n in range(4)]
    callers.append(threading.Thread(target=asyncio.run, args=(asyncio_callers(),)))
    with caplog.at_level(logging.WARNING, logger="ratekeeper"):
        for thread in callers:
            thread.start()
        try:
            wait_for(decisions_flow, "decisions never flowed")
            for _ in range(restarts):
                own_redis_server.stop()
                wait_for(lambda: lim.stats()["backend_down"], "the outage was never noticed")
                own_redis_server.start()
                wait_for(decisions_flow, "decisions never went back to Redis")
        finally:
            stopping.set()
            for thread in callers:
                thread.join(timeout=30)
    assert lim.stats()["backend_outages"] == restarts
    warnings = warnings_of(caplog)
    # One pair per restart and nothing else. The transitions are ordered (a compare-exchange on one
    # health word), but each is logged by the thread that made it, once it holds the GIL: when Redis
    # answers again within microseconds of failing, two threads' lines may come out swapped.
    began = [w for w in warnings if w.startswith("ratekeeper: the Redis backend is unavailable")]
    ended = [w for w in warnings if w.startswith("ratekeeper: the Redis backend answers again")]
    assert (len(began), len(ended), len(warnings)) == (restarts, restarts, 2 * restarts), warnings
