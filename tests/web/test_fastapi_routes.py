"""Per-route limits declared at the route with a FastAPI dependency, on a real uvicorn."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import ratekeeper as rk
from _web import Server, members
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from ratekeeper.fastapi import RouteLimits
from ratekeeper.keys import header

KEY = {"X-API-Key": "alice"}


def make_app(limiter: rk.Limiter) -> FastAPI:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.post("/login", dependencies=[Depends(limits.route("2/min"))])
    def login() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/items/{item}", dependencies=[Depends(limits.route("3/min"))])
    def item(item: int) -> dict[str, int]:
        return {"item": item}

    router = APIRouter()

    @router.get("/a", dependencies=[Depends(limits.route("1/min", group="shared"))])
    def a() -> str:
        return "a"

    @router.get("/b", dependencies=[Depends(limits.route("1/min", group="shared"))])
    def b() -> str:
        return "b"

    app.include_router(router, prefix="/shared")
    return app


def said(error: BaseException) -> str:
    """An error's text without the file and line that ``route(...)`` prefixes (where it was called)."""
    assert isinstance(error, rk.InvalidArgument)
    return str(type(error)(error.loc, error.msg))


@pytest.fixture
def limiter(clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter("1000/min", clock=clock)


def test_a_route_has_its_own_limit_by_its_template(limiter: rk.Limiter) -> None:
    with Server(make_app(limiter)) as client:
        logins = [client.post("/login", headers=KEY) for _ in range(3)]
        assert [r.status_code for r in logins] == [200, 200, 429]
        assert members(logins[0].headers["RateLimit-Policy"]) == {"POST /login": {"q": 2, "w": 60}}
        assert logins[2].json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 30}
        assert logins[2].headers["Retry-After"] == "30"
        # One group for every item: the route template, not the path.
        codes = [client.get(f"/items/{i}", headers=KEY).status_code for i in range(4)]
        assert codes == [200, 200, 200, 429]
    assert "GET /items/{item}" in limiter.groups


def test_routes_of_an_included_router_share_a_named_group(limiter: rk.Limiter) -> None:
    with Server(make_app(limiter)) as client:
        assert client.get("/shared/a", headers=KEY).status_code == 200
        assert client.get("/shared/b", headers=KEY).status_code == 429
        assert client.get("/shared/b", headers={"X-API-Key": "bob"}).status_code == 200


def test_a_route_limit_with_no_limits_is_refused_at_declaration() -> None:
    with pytest.raises(rk.InvalidValue) as error:
        RouteLimits(FastAPI(), limiter=rk.Limiter("1/s")).route()
    assert error.value.loc == ("limits",)


def test_a_route_concurrency_limit_holds_its_permit_until_the_response_is_sent(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))
    inside = threading.Semaphore(0)  # one release per request that reached the route
    finish = threading.Event()  # lets the admitted request's body end

    def body() -> Iterator[bytes]:
        yield b"started "
        finish.wait(10)
        yield b"done"

    @app.get("/slow", dependencies=[Depends(limits.route(rk.Limit(concurrency=1)))])
    def slow() -> StreamingResponse:
        inside.release()
        return StreamingResponse(body())

    with Server(app) as client, ThreadPoolExecutor(3) as pool:
        requests = [pool.submit(client.get, "/slow", headers=KEY) for _ in range(3)]
        assert inside.acquire(timeout=10)  # the first one is in the route, its body streaming
        # Every other request is answered while the first one's body is still being sent, or reaches
        # the route too (a limit ignored): 3 events in all, then the first response may end.
        for request in requests:
            request.add_done_callback(lambda _: inside.release())
        for _ in range(2):
            assert inside.acquire(timeout=10)
        finish.set()
        statuses = sorted(request.result().status_code for request in requests)
        assert statuses == [200, 429, 429]
        refused = next(request.result() for request in requests if request.result().status_code == 429)
        assert refused.json()["detail"] == "Too many concurrent requests"


# --- keys from a dependency (the user an auth dependency found) ----------------------------------------------------

TOKENS = {"token-alice": "alice", "token-bob": "bob"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def sync_current_user(request: Request) -> str | None:
    """The user of the request's bearer token, or None when it has none (an anonymous visitor)."""
    authorization = request.headers.get("Authorization", "")
    return TOKENS.get(authorization.removeprefix("Bearer "))


async def async_current_user(request: Request) -> str | None:
    return sync_current_user(request)


@pytest.mark.parametrize("current_user", [sync_current_user, async_current_user], ids=["sync", "async"])
def test_a_key_dependency_gives_each_user_a_budget_of_their_own(
    limiter: rk.Limiter, current_user: Callable[[Request], object]
) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter)

    @app.get("/reports", dependencies=[Depends(limits.route("2/min", key=Depends(current_user)))])
    def reports() -> str:
        return "reports"

    with Server(app) as client:
        alice = [client.get("/reports", headers=bearer("token-alice")).status_code for _ in range(3)]
        bob = [client.get("/reports", headers=bearer("token-bob")).status_code for _ in range(3)]
    assert alice == [200, 200, 429]
    assert bob == [200, 200, 429]
    assert not limiter.check("alice", group="GET /reports").allowed
    # Not the client's address, which both users share here: it has its whole budget (2, less this check).
    assert limiter.check("127.0.0.1", group="GET /reports").remaining == 1


def test_a_key_dependency_given_to_route_limits_is_every_routes_default(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=Depends(sync_current_user))

    @app.get("/a", dependencies=[Depends(limits.route("1/min"))])
    def a() -> str:
        return "a"

    @app.get("/b", dependencies=[Depends(limits.route("1/min", key=header("X-API-Key")))])
    def b() -> str:
        return "b"

    with Server(app) as client:
        assert client.get("/a", headers=bearer("token-alice")).status_code == 200
        assert client.get("/a", headers=bearer("token-alice")).status_code == 429
        assert client.get("/a", headers=bearer("token-bob")).status_code == 200
        # A route's own key function replaces the default dependency.
        assert client.get("/b", headers={**bearer("token-alice"), **KEY}).status_code == 200
        assert client.get("/b", headers={**bearer("token-bob"), **KEY}).status_code == 429


def test_the_key_dependency_runs_once_per_request_when_the_route_uses_it_too(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter)
    calls: list[str | None] = []

    async def current_user(request: Request) -> str | None:
        user = sync_current_user(request)
        calls.append(user)
        return user

    @app.get("/me", dependencies=[Depends(limits.route("5/min", key=Depends(current_user)))])
    def me(user: str | None = Depends(current_user)) -> dict[str, str | None]:
        return {"user": user}

    with Server(app) as client:
        answers = [client.get("/me", headers=bearer(token)) for token in ("token-alice", "token-bob")]
    assert [answer.json() for answer in answers] == [{"user": "alice"}, {"user": "bob"}]
    assert calls == ["alice", "bob"]


def test_an_int_key_is_its_decimal_text(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter)

    def user_id() -> int:
        return 42

    @app.get("/n", dependencies=[Depends(limits.route("1/min", key=Depends(user_id)))])
    def n() -> str:
        return "n"

    with Server(app) as client:
        assert client.get("/n").status_code == 200
    assert not limiter.check("42", group="GET /n").allowed


def test_a_key_dependency_returning_an_object_is_a_clear_error(limiter: rk.Limiter) -> None:
    class User:
        name = "alice"

    def current_user() -> User:
        return User()

    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter)

    @app.get("/x", dependencies=[Depends(limits.route("1/min", key=Depends(current_user)))])
    def x() -> str:
        return "x"

    async def ask() -> None:
        # In process: the app's exception reaches the test (a real server would answer 500 and log it).
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
            await client.get("/x")

    # Not str(user): an object's default text holds its address, a new key on every request.
    with pytest.raises(rk.InvalidType) as error:
        asyncio.run(ask())
    assert error.value.loc == ("key",)
    assert "current_user must return a str, an int or None, got User" in str(error.value)


def anonymous_app(limiter: rk.Limiter, **options: Any) -> FastAPI:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=Depends(sync_current_user), **options)

    @app.get("/default", dependencies=[Depends(limits.route("2/min"))])
    def default() -> str:
        return "default"

    @app.get("/members", dependencies=[Depends(limits.route("2/min", on_missing_key="refuse", missing_key_status=401))])
    def members_only() -> str:
        return "members"

    return app


def test_a_missing_user_shares_the_anonymous_key_by_default(limiter: rk.Limiter) -> None:
    with Server(anonymous_app(limiter)) as client:
        anonymous = [client.get("/default").status_code for _ in range(3)]
        assert client.get("/default", headers=bearer("token-alice")).status_code == 200
        # A route's own on_missing_key: refused at once, counted nowhere.
        refused = client.get("/members")
        assert refused.status_code == 401
        assert refused.json() == {"detail": "This request carries no key the rate limiter can use", "status": 401}
        assert client.get("/members", headers=bearer("token-alice")).status_code == 200
    assert anonymous == [200, 200, 429]
    assert limiter.check("anonymous", group="GET /members").remaining == 1  # 2, less this check


def test_on_missing_key_refuse_answers_missing_key_status(limiter: rk.Limiter) -> None:
    with Server(anonymous_app(limiter, on_missing_key="refuse", missing_key_status=403)) as client:
        assert client.get("/default").status_code == 403
        assert client.get("/members").status_code == 401  # the route's own status
        assert client.get("/default", headers=bearer("token-bob")).status_code == 200
    assert limiter.check("anonymous", group="GET /default").remaining == 1  # 2, less this check


def test_a_custom_anonymous_key_is_the_one_missing_users_share(limiter: rk.Limiter) -> None:
    with Server(anonymous_app(limiter, anonymous_key="guests")) as client:
        assert client.get("/default").status_code == 200
    assert limiter.check("guests", group="GET /default").remaining == 0  # 1 used of 2, less this check


def test_bad_key_arguments_are_refused_at_declaration_naming_the_field() -> None:
    limiter = rk.Limiter("1/s")

    def current_user(token: str = Depends(sync_current_user)) -> str:
        return token

    with pytest.raises(rk.InvalidValue) as empty:
        RouteLimits(FastAPI(), limiter=limiter, key=Depends())
    assert empty.value.loc == ("key",)
    assert "Depends() needs the dependency" in str(empty.value)
    with pytest.raises(rk.InvalidType) as not_callable:
        RouteLimits(FastAPI(), limiter=limiter).route("1/s", key="X-API-Key")  # type: ignore[arg-type]
    assert said(not_callable.value) == (
        "key: must be a callable of the request or Depends(dependency), got the str 'X-API-Key'; "
        "for a header: header('X-API-Key')"
    )
    # A dependency given as a plain key function would be called with the request and nothing it needs.
    with pytest.raises(rk.InvalidType) as undeclared:
        RouteLimits(FastAPI(), limiter=limiter, key=current_user)
    assert str(undeclared.value) == (
        "key: current_user(token=Depends(sync_current_user)) is a FastAPI dependency, but ratekeeper calls "
        "key(request) with the request alone, so FastAPI never fills token; give key=Depends(current_user) for "
        "FastAPI to resolve it, or a key function reading the request itself (request.headers, "
        "request.query_params, request.cookies)"
    )


def test_bad_missing_key_options_are_refused_naming_the_field_and_value() -> None:
    limiter = rk.Limiter("1/s")
    with pytest.raises(rk.InvalidValue) as allow:
        RouteLimits(FastAPI(), limiter=limiter, on_missing_key="allow")  # type: ignore[arg-type]
    assert str(allow.value) == "on_missing_key: must be 'refuse' or 'anonymous', got 'allow'"
    limits = RouteLimits(FastAPI(), limiter=limiter)
    with pytest.raises(rk.InvalidValue) as per_route:
        limits.route("1/s", on_missing_key="deny")  # type: ignore[arg-type]
    assert per_route.value.loc == ("on_missing_key",)
    assert "'deny'" in str(per_route.value)
    with pytest.raises(rk.InvalidValue) as status:
        limits.route("1/s", missing_key_status=500)
    assert said(status.value) == "missing_key_status: must be 401, 403 or 429, got 500"
    with pytest.raises(rk.InvalidType) as cost:
        limits.route("1/s", cost="3")  # type: ignore[arg-type]
    assert said(cost.value) == "cost: must be an int or a callable of the request, got str"
    with pytest.raises(rk.InvalidType) as group:
        limits.route("1/s", group=7)  # type: ignore[arg-type]
    assert said(group.value) == "group: must be a str, got int"


# --- stacked route limits (issue 32, bug 1) -------------------------------------------------------------------------


def test_two_equal_route_limits_on_one_route_each_count_a_request_once(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.get("/twice", dependencies=[Depends(limits.route("5/minute")), Depends(limits.route("5/minute"))])
    def twice() -> str:
        return "twice"

    with Server(app) as client:
        codes = [client.get("/twice", headers=KEY).status_code for _ in range(6)]
    # Two independent limits of 5, each counting the request once: the 6th is the first refused.
    assert codes == [200] * 5 + [429]
    assert {"GET /twice", "GET /twice #2"} <= set(limiter.groups)


def test_stacked_route_limits_with_other_rates_and_keys_are_independent(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))
    per_key = limits.route("3/minute")
    everyone = limits.route("5/minute", key=lambda request: "everyone")

    @app.get("/stacked", dependencies=[Depends(per_key), Depends(everyone)])
    def stacked() -> str:
        return "stacked"

    with Server(app) as client:
        alice = [client.get("/stacked", headers=KEY) for _ in range(4)]
        bob = [client.get("/stacked", headers={"X-API-Key": "bob"}).status_code for _ in range(3)]
    # Alice's 4th is refused by her own limit, before the shared one counts it: 3 of the 5 used.
    assert [response.status_code for response in alice] == [200, 200, 200, 429]
    assert bob == [200, 200, 429]
    # An allowed response names both groups, each with its own quota and what is left of it.
    assert members(alice[0].headers["RateLimit"]) == {
        "GET /stacked": {"r": 2, "t": 20},
        "GET /stacked #2": {"r": 4, "t": 12},
    }
    assert members(alice[3].headers["RateLimit-Policy"]) == {"GET /stacked": {"q": 3, "w": 60}}
    # A refused request counts against none of its limits: Bob's 3rd, refused by the shared limit, gave
    # back what his own limit had counted.
    assert limiter.peek("bob", group="GET /stacked").remaining == 1


# --- fields on allowed responses whatever the route returns (issue 32, bug 3) ---------------------------------------


@pytest.mark.parametrize("returns", ["dict", "PlainTextResponse", "JSONResponse", "Response"])
def test_an_allowed_response_carries_the_fields_whatever_the_route_returns(limiter: rk.Limiter, returns: str) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"), headers=rk.HeaderOptions(legacy=True))
    answers: dict[str, Callable[[], object]] = {
        "dict": lambda: {"ok": True},
        "PlainTextResponse": lambda: PlainTextResponse("ok"),
        "JSONResponse": lambda: JSONResponse({"ok": True}),
        "Response": lambda: Response(b"ok", media_type="text/plain"),
    }

    @app.get("/answer", dependencies=[Depends(limits.route("2/minute"))])
    def answer() -> Any:
        return answers[returns]()

    with Server(app) as client:
        allowed = client.get("/answer", headers=KEY)
        client.get("/answer", headers=KEY)
        refused = client.get("/answer", headers=KEY)
    assert allowed.status_code == 200
    assert members(allowed.headers["RateLimit-Policy"]) == {"GET /answer": {"q": 2, "w": 60}}
    assert members(allowed.headers["RateLimit"]) == {"GET /answer": {"r": 1, "t": 30}}
    assert (allowed.headers["X-RateLimit-Limit"], allowed.headers["X-RateLimit-Remaining"]) == ("2", "1")
    # Once each: not added by both the route's response and the app's.
    assert allowed.headers.get_list("RateLimit") == ['"GET /answer";r=1;t=30']
    assert refused.status_code == 429
    assert refused.headers.get_list("RateLimit") == ['"GET /answer";r=0;t=30']


# --- what slowapi's users declare at a route (issue 32) -------------------------------------------------------------


def test_methods_limits_only_those_methods_of_a_route(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.api_route("/form", methods=["GET", "POST"], dependencies=[Depends(limits.route("2/min", methods=["post"]))])
    def form() -> str:
        return "form"

    with Server(app) as client:
        reads = [client.get("/form", headers=KEY) for _ in range(4)]
        posts = [client.post("/form", headers=KEY).status_code for _ in range(3)]
    assert [read.status_code for read in reads] == [200] * 4
    assert "RateLimit" not in reads[0].headers  # not limited, so no fields
    assert posts == [200, 200, 429]
    assert "GET /form" not in limiter.groups


def test_per_method_false_gives_every_method_of_a_route_one_budget(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.api_route("/any", methods=["GET", "POST"], dependencies=[Depends(limits.route("2/min", per_method=False))])
    def any_method() -> str:
        return "any"

    @app.api_route("/each", methods=["GET", "POST"], dependencies=[Depends(limits.route("1/min", group="each"))])
    def each() -> str:
        return "each"

    @app.api_route(
        "/split", methods=["GET", "POST"], dependencies=[Depends(limits.route("1/min", group="split", per_method=True))]
    )
    def split() -> str:
        return "split"

    with Server(app) as client:
        shared = [client.get("/any", headers=KEY).status_code, client.post("/any", headers=KEY).status_code]
        shared.append(client.get("/any", headers=KEY).status_code)
        named = [client.get("/each", headers=KEY).status_code, client.post("/each", headers=KEY).status_code]
        apart = [client.get("/split", headers=KEY).status_code, client.post("/split", headers=KEY).status_code]
    assert shared == [200, 200, 429]
    assert named == [200, 429]  # a named group is one budget for every method
    assert apart == [200, 200]  # unless per_method=True
    assert {"/any", "each", "GET split", "POST split"} <= set(limiter.groups)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_exempt_when_a_predicate_of_the_request_holds_the_limit_does_not_count(
    limiter: rk.Limiter, asynchronous: bool
) -> None:
    def internal(request: Request) -> bool:
        return request.headers.get("X-Internal") == "yes"

    async def internal_async(request: Request) -> bool:
        return internal(request)

    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))
    predicate = internal_async if asynchronous else internal

    @app.get("/report", dependencies=[Depends(limits.route("1/min", exempt_when=predicate))])
    def report() -> str:
        return "report"

    with Server(app) as client:
        inside = [client.get("/report", headers={**KEY, "X-Internal": "yes"}).status_code for _ in range(3)]
        outside = [client.get("/report", headers=KEY).status_code for _ in range(2)]
    assert inside == [200, 200, 200]
    assert outside == [200, 429]  # the exempt requests used nothing


def test_a_rate_computed_per_request_gives_each_answer_its_own_budget(limiter: rk.Limiter) -> None:
    def by_plan(request: Request) -> str:
        return "3 per minute" if request.headers.get("X-Plan") == "pro" else "1/minute"

    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.get("/search", dependencies=[Depends(limits.route(by_plan))])
    def search() -> str:
        return "search"

    with Server(app) as client:
        free = [client.get("/search", headers=KEY).status_code for _ in range(2)]
        pro = [client.get("/search", headers={**KEY, "X-Plan": "pro"}) for _ in range(4)]
    assert free == [200, 429]
    assert [response.status_code for response in pro] == [200, 200, 200, 429]
    assert members(pro[0].headers["RateLimit-Policy"]) == {"GET /search [3/min]": {"q": 3, "w": 60}}
    assert {"GET /search [1/min]", "GET /search [3/min]"} <= set(limiter.groups)


def test_cost_message_and_peer_spellings_of_a_route(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    @app.get("/export", dependencies=[Depends(limits.route("10 per minute; 100/hour", cost=4, message="Slow down"))])
    def export() -> str:
        return "export"

    @app.get("/free", dependencies=[Depends(limits.route(None))])
    def free() -> str:
        return "free"

    with Server(app) as client:
        exports = [client.get("/export", headers=KEY) for _ in range(3)]
        frees = [client.get("/free", headers=KEY) for _ in range(20)]
    assert [response.status_code for response in exports] == [200, 200, 429]  # 4 + 4, and 4 more is 12 > 10
    assert members(exports[0].headers["RateLimit-Policy"]) == {"GET /export": {"q": 10, "w": 60}}
    assert exports[2].json()["detail"] == "Slow down"
    assert {response.status_code for response in frees} == {200}  # None: not limited, as the peers read it
    assert "RateLimit" not in frees[0].headers


def test_block_false_serves_a_refused_request_and_tells_the_route(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"))

    served_anyway = Depends(limits.route("1/min", block=False))

    @app.get("/feed")
    def feed(request: Request, decision: rk.Decision = served_anyway) -> dict[str, Any]:
        return {"limited": request.state.limited, "allowed": decision.allowed}

    with Server(app) as client:
        first, second = (client.get("/feed", headers=KEY) for _ in range(2))
    assert (first.status_code, first.json()) == (200, {"limited": False, "allowed": True})
    assert (second.status_code, second.json()) == (200, {"limited": True, "allowed": False})
    # The fields say what was decided; no Retry-After on a response that was served.
    assert members(second.headers["RateLimit"]) == {"GET /feed": {"r": 0, "t": 60}}
    assert "Retry-After" not in second.headers


def test_a_turned_off_limiter_limits_no_route(limiter: rk.Limiter) -> None:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"), default_limits=["1/min"])

    @app.get("/limited", dependencies=[Depends(limits.route("1/min"))])
    def limited() -> str:
        return "limited"

    @app.get("/plain")
    def plain() -> str:
        return "plain"

    limiter.off()
    with Server(app) as client:
        codes = [client.get(path, headers=KEY).status_code for path in ("/limited", "/plain") for _ in range(3)]
    assert codes == [200] * 6


# --- limits not declared at a route: application-wide and default limits --------------------------------------------


def make_app_with_defaults(limiter: rk.Limiter, **options: Any) -> FastAPI:
    app = FastAPI()
    limits = RouteLimits(app, limiter=limiter, key=header("X-API-Key"), **options)

    @app.get("/a")
    def a() -> str:
        return "a"

    @app.get("/b/{item}")
    def b(item: int) -> int:
        return item

    @app.get("/own", dependencies=[Depends(limits.route("3/min"))])
    def own() -> str:
        return "own"

    @app.get("/both", dependencies=[Depends(limits.route("3/min", keep_defaults=True))])
    def both() -> str:
        return "both"

    @app.get("/health")
    @limits.exempt
    def health() -> str:
        return "ok"

    return app


def test_default_limits_are_counted_per_route_and_a_routes_own_limits_replace_them(limiter: rk.Limiter) -> None:
    with Server(make_app_with_defaults(limiter, default_limits=["2/minute"])) as client:
        a = [client.get("/a", headers=KEY) for _ in range(3)]
        b = [client.get(f"/b/{item}", headers=KEY).status_code for item in range(3)]
        own = [client.get("/own", headers=KEY).status_code for _ in range(4)]
        both = [client.get("/both", headers=KEY) for _ in range(3)]
        health = [client.get("/health", headers=KEY).status_code for _ in range(3)]
        bob = client.get("/a", headers={"X-API-Key": "bob"}).status_code
    assert [response.status_code for response in a] == [200, 200, 429]
    assert a[2].json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 30}
    assert members(a[0].headers["RateLimit-Policy"]) == {"GET /a": {"q": 2, "w": 60}}
    assert b == [200, 200, 429]  # one budget for the route's template, whatever the item
    assert own == [200, 200, 200, 429]  # its own 3/min, not the defaults
    # keep_defaults: the defaults (claimed first, by the middleware) and the route's own limit, both.
    assert [response.status_code for response in both] == [200, 200, 429]
    assert members(both[0].headers["RateLimit-Policy"]) == {
        "GET /both": {"q": 2, "w": 60},
        "GET /both #2": {"q": 3, "w": 60},
    }
    assert health == [200, 200, 200]
    assert bob == 200


def test_application_limits_are_one_budget_per_key_across_every_route(limiter: rk.Limiter) -> None:
    with Server(make_app_with_defaults(limiter, application_limits=["4/minute"])) as client:
        alice = [client.get(path, headers=KEY) for path in ("/a", "/b/1", "/own", "/own", "/a")]
        health = client.get("/health", headers=KEY).status_code
        bob = client.get("/own", headers={"X-API-Key": "bob"}).status_code
    assert [response.status_code for response in alice] == [200, 200, 200, 200, 429]
    assert members(alice[2].headers["RateLimit"]) == {
        "application": {"r": 1, "t": 15},
        "GET /own": {"r": 2, "t": 20},
    }
    assert alice[4].headers["Retry-After"] == "15"
    assert health == 200  # exempt
    assert bob == 200


def test_algorithm_makes_every_group_of_the_integration_decide_by_it(
    limiter: rk.Limiter, clock: rk.ManualClock
) -> None:
    app = make_app_with_defaults(limiter, default_limits=["2/minute"], algorithm="fixed_window")
    with Server(app) as client:
        first = [client.get("/own", headers=KEY).status_code for _ in range(4)]
        assert [client.get("/a", headers=KEY).status_code for _ in range(3)] == [200, 200, 429]
        clock.advance(30)
        # Under GCRA a request would have come back after 20 s and 30 s; a fixed window returns at its end.
        assert client.get("/own", headers=KEY).status_code == 429
        assert client.get("/a", headers=KEY).status_code == 429
        clock.advance(30)
        later = [client.get("/own", headers=KEY).status_code for _ in range(4)]
    assert first == [200, 200, 200, 429]
    assert later == [200, 200, 200, 429]
    assert rk.Limit("3/min", algorithm="fixed_window") in next(r for r in limiter.rules if r.group == "GET /own").limits


def test_bad_integration_options_are_refused_naming_the_field() -> None:
    limiter = rk.Limiter("1/s")
    limits = RouteLimits(FastAPI(), limiter=limiter)
    with pytest.raises(rk.InvalidType) as methods:
        limits.route("1/s", methods="POST")  # type: ignore[arg-type]
    assert said(methods.value) == "methods: must be a list of HTTP methods, e.g. methods=['POST'], got 'POST'"
    with pytest.raises(rk.InvalidValue) as spelling:
        limits.route("10 per fortnight")
    assert spelling.value.loc[0].startswith("limits")
    assert "10 per fortnight" in str(spelling.value)
    with pytest.raises(rk.InvalidValue) as algorithm:
        RouteLimits(FastAPI(), limiter=limiter, algorithm="fixed")  # type: ignore[arg-type]
    assert algorithm.value.loc == ("algorithm",)
    with pytest.raises(rk.InvalidType) as defaults:
        RouteLimits(FastAPI(), limiter=limiter, default_limits="10/min")  # type: ignore[arg-type]
    assert str(defaults.value) == (
        "default_limits: must be a list of limits, e.g. default_limits=['100/min'], got '10/min'"
    )
    with pytest.raises(rk.InvalidValue) as dependency:
        RouteLimits(FastAPI(), limiter=limiter, key=Depends(sync_current_user), application_limits=["10/min"])
    assert dependency.value.loc == ("key",)
    with pytest.raises(rk.InvalidValue) as cost:
        limits.route("1/s", cost=0)
    assert said(cost.value) == "cost: must be >= 1, got 0"
    with pytest.raises(rk.InvalidType) as exempt_when:
        limits.route("1/s", exempt_when=True)  # type: ignore[arg-type]
    assert exempt_when.value.loc == ("exempt_when",)


# --- refusal records, penalties, an epoch reset (the options every integration shares) -----------------------------


def test_log_refusals_writes_one_record_per_refusal(limiter: rk.Limiter, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="ratekeeper.refusals")
    for log_refusals, expected in ((False, 0), (True, 2)):
        caplog.clear()
        app = make_app_with_defaults(limiter, default_limits=["1/min"], log_refusals=log_refusals)
        with Server(app) as client:
            key = {"X-API-Key": f"logged-{log_refusals}"}
            codes = [client.get(path, headers=key).status_code for path in ("/a", "/a", "/own", "/own", "/own", "/own")]
        assert codes == [200, 429, 200, 200, 200, 429]
        records = [record for record in caplog.records if record.name == "ratekeeper.refusals"]
        assert len(records) == expected
    assert [(record.peer, record.group, record.levelname) for record in records] == [  # type: ignore[attr-defined]
        ("logged-True", "GET /a", "WARNING"),
        ("logged-True", "GET /own", "WARNING"),
    ]
    assert records[1].retry_after == 20.0  # type: ignore[attr-defined]


def test_a_penalty_refuses_a_key_that_keeps_breaching_at_every_route(
    limiter: rk.Limiter, clock: rk.ManualClock
) -> None:
    penalty = rk.Penalty(breaches=2, within=60.0, block=600.0)
    with Server(make_app_with_defaults(limiter, default_limits=["1/min"], penalty=penalty)) as client:
        first = [client.get("/a", headers=KEY).status_code for _ in range(3)]  # two refusals: blocked
        clock.advance(60)
        blocked = client.get("/own", headers=KEY)  # another route, its own limit untouched: refused
        others = client.get("/own", headers={"X-API-Key": "bob"}).status_code
        clock.advance(540)
        after = client.get("/own", headers=KEY).status_code
    assert first == [200, 429, 429]
    assert blocked.status_code == 429
    assert blocked.headers["Retry-After"] == "540"
    assert others == 200
    assert after == 200


def test_an_epoch_reset_is_the_unix_time_of_the_reset(limiter: rk.Limiter) -> None:
    import time

    headers = rk.HeaderOptions(legacy=True, reset="epoch")
    with Server(make_app_with_defaults(limiter, headers=headers)) as client:
        before = time.time()
        allowed = client.get("/own", headers=KEY)
        after = time.time()
    # "3/min": one request comes back 20 s from now.
    assert int(before) + 20 <= int(allowed.headers["X-RateLimit-Reset"]) <= int(after) + 20
    assert members(allowed.headers["RateLimit"]) == {"GET /own": {"r": 2, "t": 20}}  # the IETF t stays seconds


def test_route_limits_made_after_the_app_started_are_refused_naming_the_app(limiter: rk.Limiter) -> None:
    app = FastAPI()

    @app.get("/early")
    def early() -> str:
        return "early"

    with Server(app) as client:
        assert client.get("/early").status_code == 200
    # Starlette built its exception handlers and middleware at the first request: a 429 handler added now
    # would never be called (a refusal would answer 500).
    with pytest.raises(rk.InvalidValue) as started:
        RouteLimits(app, limiter=limiter)
    assert str(started.value) == "app: the app has started: create RouteLimits before it serves its first request"
