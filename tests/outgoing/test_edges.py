"""The outgoing engine at the edges a user meets: a call that may not wait while its host's first answer is
awaited, a bare ``Retry-After`` before any budget, ``wait=False`` and a 429, costs and corrections out of
range, a window no group can be made of, and tasks cancelled while Redis decides their turn."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from _redis import RedisServer
from _web import Server
from conftest import ServeApi, Served
from ratekeeper.httpx import AsyncTransport, Call, Transport

HOST = "https://api.example.com"


def held_first(started: threading.Event, release: threading.Event, sent: list[str]) -> httpx.MockTransport:
    """Answers 200 with GitHub's fields; the first request is held until ``release`` (``started`` set once it is)."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if len(sent) == 1:
            started.set()
            assert release.wait(10)
        return httpx.Response(200, headers={"x-ratelimit-limit": "100", "x-ratelimit-remaining": "99"})

    return httpx.MockTransport(answer)


def answering(status: int, headers: dict[str, str] | None = None) -> tuple[list[str], httpx.MockTransport]:
    """A server answering every request ``status`` with ``headers``, and the paths it received."""
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(status, headers=headers)

    return sent, httpx.MockTransport(answer)


@pytest.mark.parametrize("options", [{"wait": False}, {"timeout": 0.05}])
def test_a_call_that_may_not_wait_for_its_hosts_first_answer_is_refused_unsent(options: dict[str, object]) -> None:
    # Until a host's first answer its calls go one at a time: a call that may not wait that long (wait=False, or
    # a timeout shorter than the first call) raises RateLimited and is not sent beside the first.
    started, release, sent = threading.Event(), threading.Event(), []
    transport = Transport(rk.Limiter(rules=[]), inner=held_first(started, release, sent), **options)  # type: ignore[arg-type]
    with httpx.Client(transport=transport, base_url=HOST) as client:
        first = threading.Thread(target=client.get, args=("/first",))
        first.start()
        assert started.wait(10)
        with pytest.raises(rk.RateLimited) as refused:
            client.get("/second")
        release.set()
        first.join(10)
        assert client.get("/third").status_code == 200  # answered: the host's calls go as they come
    assert sent == ["/first", "/third"]
    assert refused.value.decision.group is None
    assert "api.example.com's first answer, which states its budgets, is awaited" in str(refused.value)
    stats = transport.stats()["api.example.com"]
    assert (stats["calls"], stats["refused"]) == (2, 1)
    assert stats["waits"] == (0 if options.get("wait") is False else 1)


def test_a_timeout_longer_than_a_lock_can_wait_waits_for_the_first_answer() -> None:
    # A thread waits for its host's first answer on a lock, which takes at most threading.TIMEOUT_MAX: a timeout
    # of 1e10 s raised a bare OverflowError there.
    started, release, sent = threading.Event(), threading.Event(), []
    transport = Transport(rk.Limiter(rules=[]), inner=held_first(started, release, sent), timeout=1e10)
    with httpx.Client(transport=transport, base_url=HOST) as client:
        first = threading.Thread(target=client.get, args=("/first",))
        first.start()
        assert started.wait(10)
        statuses: list[int] = []
        second = threading.Thread(target=lambda: statuses.append(client.get("/second").status_code))
        second.start()
        for _ in range(100_000):  # until the second call is counted waiting: counted, not timed
            if transport.stats().get("api.example.com", {}).get("waits"):
                break
            time.sleep(0.0001)
        release.set()
        first.join(10)
        second.join(10)
    assert statuses == [200]
    assert sent == ["/first", "/second"]


@pytest.mark.asyncio
@pytest.mark.parametrize("wait", [True, False])
async def test_a_task_awaiting_its_hosts_first_answer_is_counted_or_refused_when_told_not_to_wait(wait: bool) -> None:
    arrived, release, sent = asyncio.Event(), asyncio.Event(), []

    async def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if len(sent) == 1:
            arrived.set()
            await release.wait()
        return httpx.Response(200, headers={"x-ratelimit-limit": "100", "x-ratelimit-remaining": "99"})

    transport = AsyncTransport(rk.Limiter(rules=[]), inner=httpx.MockTransport(answer), wait=wait)
    async with httpx.AsyncClient(transport=transport, base_url=HOST) as client:
        first = asyncio.create_task(client.get("/first"))
        await arrived.wait()
        second = asyncio.create_task(client.get("/second"))
        if wait:
            for _ in range(100_000):  # until the second call is counted waiting: counted, not timed
                if transport.stats().get("api.example.com", {}).get("waits"):
                    break
                await asyncio.sleep(0)
            assert not second.done()
        else:
            with pytest.raises(rk.RateLimited):
                await second
        release.set()
        assert (await first).status_code == 200
        if wait:
            assert (await second).status_code == 200
    stats = transport.stats()["api.example.com"]
    assert (stats["calls"], stats["waits"], stats["refused"]) == ((2, 1, 0) if wait else (1, 0, 1))
    assert (stats["waited"] > 0) is wait


def test_a_retry_after_before_any_budget_holds_every_later_call_until_it_passes() -> None:
    # A host's first word is a 429 with only Retry-After (no budget stated): the wait's own group holds the calls
    # after it, in the limiter's store (so with rk.Shared or rk.Redis, every process's).
    sent, server = answering(429, {"retry-after": "30"})
    limiter = rk.Limiter(rules=[])
    transport = Transport(limiter, inner=server, wait=False)
    with httpx.Client(transport=transport, base_url=HOST) as client:
        assert client.get("/a").status_code == 429  # wait=False: returned as it came, not retried
        for path in ("/b", "/c"):
            with pytest.raises(rk.RateLimited) as refused:
                client.get(path)
            assert refused.value.decision.group == "api.example.com retry-after"
            assert 29 < refused.value.retry_after <= 30
    assert sent == ["/a"]
    # The group counts nothing of its own: past the wait, calls go as they come.
    assert limiter.peek("api.example.com", group="api.example.com retry-after").remaining == 0


def test_githubs_secondary_limit_holds_every_call_for_its_wait_though_the_hour_has_thousands_left() -> None:
    # GitHub's secondary limit: a 403 with Retry-After beside a primary budget far from spent. The wait holds
    # every call of the host (the budget keeps its own remaining for after it); before, only the call that met
    # the 403 waited, and every other call went on to meet one.
    sent: list[str] = []
    fields = {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4000", "x-ratelimit-resource": "core"}

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        reset = {"x-ratelimit-reset": "1800"}
        if len(sent) == 2:
            return httpx.Response(403, headers={**fields, **reset, "retry-after": "60"})
        return httpx.Response(200, headers={**fields, **reset})

    limiter = rk.Limiter(rules=[])
    transport = Transport(limiter, inner=httpx.MockTransport(answer), wait=False)
    with httpx.Client(transport=transport, base_url=HOST) as client:
        assert client.get("/a").status_code == 200
        assert client.get("/b").status_code == 403
        with pytest.raises(rk.RateLimited) as refused:
            client.get("/c")
    assert refused.value.decision.group == "api.example.com retry-after"
    assert 59 < refused.value.retry_after <= 60
    assert sent == ["/a", "/b"]


@pytest.mark.parametrize(
    "fields",
    [
        {"x-ratelimit-limit": "0", "x-ratelimit-remaining": "{left}", "x-ratelimit-reset": "40"},  # a limit of 0
        {"ratelimit": '"day";r={left};t=40'},  # an IETF budget without its policy: no size stated
        {"x-ratelimit-remaining": "{left}", "x-ratelimit-reset": "40"},  # nor here
    ],
)
def test_a_budget_of_no_size_is_kept_to_what_is_left_until_its_reset(fields: dict[str, str]) -> None:
    # "No more than r before t", whatever the size: before, only r = 0 was held, and 13 to 19 of 57 calls drew 429s.
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        left = str(max(2 - len(sent), 0))  # two calls in the window: the first's answer says one is left
        return httpx.Response(200, headers={name: value.format(left=left) for name, value in fields.items()})

    transport = Transport(rk.Limiter(rules=[]), inner=httpx.MockTransport(answer), wait=False)
    with httpx.Client(transport=transport, base_url=HOST) as client:
        assert client.get("/a").status_code == 200
        assert client.get("/b").status_code == 200
        with pytest.raises(rk.RateLimited) as refused:
            client.get("/c")
    assert 39 < refused.value.retry_after <= 40
    assert sent == ["/a", "/b"]


def test_a_retry_after_longer_than_a_day_holds_the_host_for_a_day(caplog: pytest.LogCaptureFixture) -> None:
    # A server saying "stop" for two weeks is obeyed for a day, not retried every second.
    sent, server = answering(429, {"retry-after": str(14 * 86_400)})
    transport = Transport(rk.Limiter(rules=[]), inner=server, timeout=5.0)
    with (
        caplog.at_level(logging.WARNING, logger="ratekeeper.outgoing"),
        httpx.Client(transport=transport, base_url=HOST) as client,
    ):
        assert client.get("/a").status_code == 429  # its retry would be a day away: returned as it came
        with pytest.raises(rk.RateLimited) as refused:
            client.get("/b")
    assert 86_399 < refused.value.retry_after <= 86_400
    assert sent == ["/a"]
    assert "longer than a day, so obeyed for a day" in caplog.text


def test_a_transport_made_later_on_the_same_limiter_plans_with_the_groups_already_made() -> None:
    # One transport per call (as an aiohttp middleware made in each session) spent in no budget until an answer
    # of its own: 80 of 120 calls drew a 429. It now starts from the groups the limiter has for the host.
    sent, server = answering(200, {"x-ratelimit-limit": "5", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "30"})
    limiter = rk.Limiter(rules=[])
    for path in ("/a", "/b"):
        transport = Transport(limiter, inner=server, wait=False)
        with httpx.Client(transport=transport, base_url=HOST) as client:
            if path == "/a":
                assert client.get(path).status_code == 200
            else:
                with pytest.raises(rk.RateLimited) as refused:
                    client.get(path)
                assert refused.value.decision.group == "api.example.com requests"
    assert sent == ["/a"]


def test_a_github_call_spends_only_in_its_routes_resource() -> None:
    # GitHub's resources are budgets of their own: a call spends in one, as its answer names. Every call spent in
    # every budget the host had named, so a spent search budget held every core call too.
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        search = request.url.path.startswith("/search/")
        limit, left = ("30", "0") if search else ("5000", "4000")
        reset = str(int(time.time()) + 1800)  # GitHub's resets are epoch seconds
        fields = {"x-ratelimit-limit": limit, "x-ratelimit-remaining": left, "x-ratelimit-reset": reset}
        return httpx.Response(200, headers={**fields, "x-ratelimit-resource": "search" if search else "core"})

    transport = Transport(rk.Limiter(rules=[]), inner=httpx.MockTransport(answer), wait=False)
    with httpx.Client(transport=transport, base_url=HOST) as client:
        for path in ("/repos/o/r", "/search/issues", "/user", "/repos/o/r/pulls", "/users/u"):
            assert client.get(path).status_code == 200
        for path in ("/search/issues", "/search/commits"):  # the search budget is spent, for every search route
            with pytest.raises(rk.RateLimited) as refused:
                client.get(path)
            assert refused.value.decision.group == "api.example.com search"
    assert sent == ["/repos/o/r", "/search/issues", "/user", "/repos/o/r/pulls", "/users/u"]


def test_a_server_that_changes_dialect_is_paced_by_its_new_budgets_alone() -> None:
    # A budget the server no longer names was never capped again, and its group went on pacing the host: after a
    # switch from X-RateLimit to IETF fields, calls per window went 10, 10, 10, 0, 0.
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if len(sent) == 1:
            return httpx.Response(
                200, headers={"x-ratelimit-limit": "2", "x-ratelimit-remaining": "1", "x-ratelimit-reset": "30"}
            )
        policy, left = '"default";q=10;w=60', f'"default";r={11 - len(sent)};t=30'
        return httpx.Response(200, headers={"ratelimit-policy": policy, "ratelimit": left})

    transport = Transport(rk.Limiter(rules=[]), inner=httpx.MockTransport(answer), wait=False)
    with httpx.Client(transport=transport, base_url=HOST) as client:
        assert [client.get(f"/{n}").status_code for n in range(4)] == [200] * 4
    assert len(sent) == 4


def test_wait_false_returns_a_429_at_once_without_its_retries() -> None:
    sent, server = answering(429, {"retry-after": "5", "x-ratelimit-limit": "10", "x-ratelimit-remaining": "0"})
    transport = Transport(rk.Limiter(rules=[]), inner=server, wait=False, retries=2)
    with httpx.Client(transport=transport, base_url=HOST) as client:
        assert client.get("/a").status_code == 429
    stats = transport.stats()["api.example.com"]
    assert (len(sent), stats["retries"], stats["waited"]) == (1, 0, 0.0)


@pytest.mark.parametrize("units", [0, -1, 2**63, 2**64, 2**70])
def test_a_cost_out_of_range_is_an_invalid_value_naming_its_budget(units: int) -> None:
    transport = Transport(
        rk.Limiter(rules=[]),
        inner=httpx.MockTransport(lambda request: httpx.Response(200)),
        cost=lambda call: {"tokens": units},
    )
    with (
        httpx.Client(transport=transport, base_url=HOST) as client,
        pytest.raises(rk.InvalidValue, match=r"^cost\.tokens: "),
    ):
        client.get("/")


@pytest.mark.parametrize("spent", [12, "many", {"tokens": 2**64}, {"tokens": -3}, {"tokens": 1.5}])
def test_a_spent_reading_out_of_range_is_logged_and_the_response_returned(
    spent: object, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = rk.Limiter(rules=[])
    limiter.add_group("tokens", [rk.Limit("1000/min", algorithm="fixed_window")])
    transport = Transport(
        limiter,
        inner=httpx.MockTransport(lambda request: httpx.Response(200)),
        groups={"tokens": "tokens"},
        cost=lambda call: {"tokens": 10},
        spent=lambda reply: spent,  # type: ignore[arg-type,return-value]
    )
    with (
        caplog.at_level(logging.ERROR, "ratekeeper.outgoing"),
        httpx.Client(transport=transport, base_url=HOST) as client,
    ):
        assert client.get("/").status_code == 200
    assert "spent(...)" in caplog.text
    assert limiter.peek("api.example.com", group="tokens").remaining == 990  # the estimate stands


def test_a_group_the_limiter_cannot_make_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    # A window of thirty years: no limit is made of it, and every reply says the same.
    headers = {"ratelimit-policy": '"a";q=10;w=999999999', "ratelimit": '"a";r=9;t=60'}
    transport = Transport(
        rk.Limiter(rules=[]), inner=httpx.MockTransport(lambda request: httpx.Response(200, headers=headers))
    )
    with (
        caplog.at_level(logging.WARNING, "ratekeeper.outgoing"),
        httpx.Client(transport=transport, base_url=HOST) as client,
    ):
        for _ in range(5):
            assert client.get("/").status_code == 200
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "no group for api.example.com's budget 'a'" in caplog.records[0].getMessage()


@pytest.mark.asyncio
async def test_tasks_cancelled_while_redis_decides_their_turn_keep_nothing(redis_server: RedisServer) -> None:
    # With rk.Redis each group's check is a round trip the task awaits: cancelled at any point of it (here while
    # the tokens budget, spent, refuses them all), what a call spent goes back. Cancellation points are random;
    # what is asserted holds for any of them.
    backend = rk.Redis(redis_server.url, prefix=f"edges-{uuid.uuid4().hex}:", on_error="raise")
    limiter = rk.Limiter(rules=[], backend=backend)
    limiter.add_group("requests", [rk.Limit("1000/hour", algorithm="fixed_window")])
    limiter.add_group("tokens", [rk.Limit("1000/hour", algorithm="fixed_window")])
    assert limiter.check("api.example.com", group="tokens", cost=1000).allowed
    sent, server = answering(200)
    transport = AsyncTransport(limiter, inner=server, groups={"requests": "requests", "tokens": "tokens"}, obey=False)
    async with httpx.AsyncClient(transport=transport, base_url=HOST) as client:
        for round_ in range(20):
            tasks = [asyncio.create_task(client.get("/")) for _ in range(8)]
            for _ in range(round_ % 5):
                await asyncio.sleep(0)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    # One more check on the same connection: its answer comes after theirs, which are then in.
    assert await limiter.aallow("another key", group="requests")
    for _ in range(10_000):  # their give-backs run on worker threads: counted, not timed
        if (await asyncio.to_thread(limiter.peek, "api.example.com", group="requests")).remaining == 1000:
            break
        await asyncio.sleep(0.001)
    assert sent == []
    assert limiter.peek("api.example.com", group="requests").remaining == 1000


@pytest.mark.parametrize("failure", ["raises", "cost"])
def test_a_first_call_that_gets_no_answer_lets_one_more_go_first_not_all(failure: str) -> None:
    # Until a host answers, its calls go one at a time: the first failing (the connection refused, or its cost
    # function raising) hands the turn to one more call, not to every call waiting.
    lock, in_flight, most, sent, before_answer = threading.Lock(), [0], [0], [], []
    let_go_early: list[bool] = []
    first_in, second_in, let_go = threading.Event(), threading.Event(), threading.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        with lock:
            sent.append(request.url.path)
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            turn = len(sent)
        try:
            if turn == 1 and failure == "raises":
                first_in.set()
                assert let_go.wait(10)
                raise httpx.ConnectError("refused")
            if turn == (2 if failure == "raises" else 1):  # the call going first after the failure
                second_in.set()
                before_answer.append(most[0])
                # Nothing lets the waiting calls go before this call's answer: the host is not taken as answered.
                let_go_early.append("api.example.com" in transport.outgoing._answered)
            return httpx.Response(200, headers={"x-ratelimit-limit": "100", "x-ratelimit-remaining": "90"})
        finally:
            with lock:
                in_flight[0] -= 1

    def cost(call: Call) -> dict[str, int]:
        if call.path == "/bad":
            raise ValueError("no estimate")
        return {}

    transport = Transport(rk.Limiter(rules=[]), inner=httpx.MockTransport(answer), cost=cost)
    outcomes: list[object] = []

    def get(path: str) -> None:
        try:
            outcomes.append(client.get(path).status_code)
        except Exception as error:  # the outcome is what is checked
            outcomes.append(type(error).__name__)

    with httpx.Client(transport=transport, base_url=HOST) as client:
        head = threading.Thread(target=get, args=("/first" if failure == "raises" else "/bad",))
        head.start()
        if failure == "raises":
            assert first_in.wait(10)
        head.join(0.1 if failure == "raises" else 10)
        rest = [threading.Thread(target=get, args=(f"/{n}",)) for n in range(5)]
        for thread in rest:
            thread.start()
        let_go.set()
        for thread in [head, *rest]:
            thread.join(10)
    assert sorted(map(str, outcomes)) == sorted(["200"] * 5 + ["ConnectError" if failure == "raises" else "ValueError"])
    assert second_in.is_set()
    assert before_answer == [1]  # until the host's first answer, no call beside the one going first
    assert let_go_early == [False]


@pytest.mark.parametrize("dialect", ["github", "x-ratelimit"])
def test_a_server_whose_windows_are_shorter_than_the_auto_groups_is_followed_window_after_window(
    serve_api: ServeApi, dialect: str
) -> None:
    # GitHub's and the X-RateLimit fields state no window: an auto-group counts `window` (60 s here) once the
    # server's reset has passed. A call refused by that window of its own waits on for the words of the calls on
    # their way, which end it where the server's ends, rather than fail as if a minute were certain.
    served = serve_api(dialect, 6, 3.0)  # resets in whole seconds tell windows of more than two apart
    transport = AsyncTransport(rk.Limiter(rules=[]), timeout=30.0)

    async def main() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=transport, base_url=served.url) as client:
            return list(await asyncio.gather(*(client.get("/") for _ in range(14))))

    codes = [response.status_code for response in asyncio.run(main())]
    assert codes == [200] * 14
    assert served.api.refused == 0
    assert len(served.api.accepted) >= 3  # three windows of the server's at least


def call_for_three_windows(served: Served, window: float) -> AsyncTransport:
    """8 asyncio tasks calling ``served`` through one transport, flat out, for three of its windows."""
    transport = AsyncTransport(rk.Limiter(rules=[]), timeout=30.0)
    start = time.monotonic()

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url=served.url) as client:

            async def task() -> None:
                while time.monotonic() - start < 3 * window:
                    await client.get("/")

            await asyncio.gather(*(task() for _ in range(8)))

    asyncio.run(main())
    return transport


@pytest.mark.parametrize("dialect", ["ietf-refill", "ietf"])
def test_an_ietf_budget_that_refills_is_told_from_windows_and_paced_as_it_refills(
    serve_api: ServeApi, dialect: str
) -> None:
    # A GCRA server's `t` is when its next unit comes: taken as a window's end, each `t` opened a full window
    # the server does not give, and drew a burst of 429s at every one. Its words show it within its first
    # window (their resets fall inside the stated window, as a fixed window's never do), and from then on each
    # word is taken as the bucket's: what is left now, full again once the rest has refilled. A server of
    # fixed windows is followed as before.
    served = serve_api(dialect, 20, 4.0)
    call_for_three_windows(served, 4.0)
    # After the first window, not one 429; and the calls used what the server gave (20 a window either way).
    assert served.api.refused_in[1] + served.api.refused_in[2] == 0, served.api.refused_in
    assert served.api.accepted[1] + served.api.accepted[2] >= 0.85 * 40, served.api.accepted


def test_an_ietf_server_that_rounds_its_resets_down_is_followed_a_second_later(serve_api: ServeApi) -> None:
    # `t` as int(end - now) says a window ends up to a second before it does: the calls sent at that end were
    # counted in the window still, which was spent, and drew 429s at every window. Such a call shows it (a `t`
    # rounded up, or exact, is never early), and from then on the host's windows end a second after its word.
    served = serve_api("ietf-down", 20, 4.0)
    call_for_three_windows(served, 4.0)
    assert served.api.refused_in[1] + served.api.refused_in[2] == 0, served.api.refused_in
    # A second of each 4-s window is given up to the rounding: 20 calls a window all the same.
    assert served.api.accepted[1] + served.api.accepted[2] >= 0.85 * 40, served.api.accepted


def test_a_server_that_lowers_its_limit_is_followed_from_its_next_window(serve_api: ServeApi) -> None:
    # The auto-group is resized to the new limit: what the calls of the window at the change used is not carried
    # into the server's next windows at the new size, which would leave the client idle for windows on end.
    served = serve_api("ietf", 6, 3.0)
    transport = AsyncTransport(rk.Limiter(rules=[]), timeout=30.0)

    async def calls(n: int) -> list[int]:
        async with httpx.AsyncClient(transport=transport, base_url=served.url) as client:
            return [r.status_code for r in await asyncio.gather(*(client.get("/") for _ in range(n)))]

    assert asyncio.run(calls(6)) == [200] * 6
    served.api.limit = 2
    assert asyncio.run(calls(6)) == [200] * 6
    windows = sorted(served.api.accepted)
    assert windows == list(range(windows[0], windows[-1] + 1)), served.api.accepted  # no window left idle


@pytest.mark.parametrize("options", [{}, {"groups": {"requests": "api"}}, {"obey": False}, {"auto_groups": False}])
def test_a_host_that_answered_takes_the_short_way_whatever_its_groups(options: dict[str, object]) -> None:
    limiter = rk.Limiter(rules=[])
    limiter.add_group("api", [rk.Limit("100/min", algorithm="fixed_window")])
    transport = Transport(limiter, inner=httpx.MockTransport(lambda request: httpx.Response(200)), **options)  # type: ignore[arg-type]
    outgoing = transport.outgoing
    assert outgoing._admit_heard is not None
    assert outgoing._admit_heard("api.example.com", "/") is None  # not heard from: the long way
    with httpx.Client(transport=transport, base_url=HOST) as client:
        assert client.get("/").status_code == 200
    assert outgoing._admit_heard("api.example.com", "/") is not None


async def answer_ok(
    scope: dict[str, object], receive: object, send: Callable[[dict[str, object]], Awaitable[None]]
) -> None:
    """An ASGI app answering 200 to every request."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize("client", ["httpx", "httpx-async", "requests", "aiohttp"])
def test_a_call_that_never_reached_the_server_gives_its_units_back(client: str) -> None:
    # The server answers once, then goes away: the calls after it (the short way, the host having answered) are
    # refused a connection, which the server never counted, and neither does the budget.
    import aiohttp
    import requests
    from ratekeeper.aiohttp import Middleware
    from ratekeeper.requests import Adapter

    limiter = rk.Limiter(rules=[])
    limiter.add_group("api", [rk.Limit("5/min", algorithm="fixed_window")])
    options: dict[str, Any] = {"groups": {"requests": "api"}}
    server = Server(answer_ok)
    url = f"http://127.0.0.1:{server.port}/"
    gone = (httpx.ConnectError, requests.ConnectionError, aiohttp.ClientConnectorError)

    def calls(get: Callable[[], object]) -> list[str]:
        outcomes = []
        with server:
            outcomes.append(str(get()))
        for _ in range(3):
            with pytest.raises(gone) as failed:
                get()
            outcomes.append(type(failed.value).__name__)
        return outcomes

    async def acalls(get: Callable[[], Awaitable[object]]) -> list[str]:
        outcomes = []
        with server:
            outcomes.append(str(await get()))
        for _ in range(3):
            with pytest.raises(gone) as failed:
                await get()
            outcomes.append(type(failed.value).__name__)
        return outcomes

    if client == "httpx":
        with httpx.Client(transport=Transport(limiter, **options)) as session:
            outcomes = calls(lambda: session.get(url).status_code)
    elif client == "httpx-async":

        async def with_httpx() -> list[str]:
            async with httpx.AsyncClient(transport=AsyncTransport(limiter, **options)) as session:

                async def get() -> int:
                    return (await session.get(url)).status_code

                return await acalls(get)

        outcomes = asyncio.run(with_httpx())
    elif client == "requests":
        with requests.Session() as session:
            session.mount("http://", Adapter(limiter, **options))
            outcomes = calls(lambda: session.get(url).status_code)
    else:

        async def with_aiohttp() -> list[str]:
            # No connection kept alive: one the server closed as it went could carry a request before it failed.
            connector = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(
                middlewares=(Middleware(limiter, **options),), connector=connector
            ) as session:

                async def get() -> int:
                    async with session.get(url) as answer:
                        return answer.status

                return await acalls(get)

        outcomes = asyncio.run(with_aiohttp())
    assert outcomes[0] == "200"
    assert len(outcomes) == 4
    assert limiter.peek(f"127.0.0.1:{server.port}", group="api").remaining == 4  # the answered call's unit only
