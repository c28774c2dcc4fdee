"""``python -m ratekeeper top URL``: an operator reads who a running service is limiting from its /metrics.

Each test serves a real endpoint with uvicorn: the ``serve`` command's app, or prometheus-client's
``make_asgi_app`` over a registry holding a ``RateLimitCollector`` with another namespace.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import httpx
import pytest
import ratekeeper as rk
from _web import Server
from prometheus_client import CollectorRegistry, make_asgi_app
from ratekeeper import _serve
from ratekeeper.__main__ import main
from ratekeeper.prometheus import RateLimitCollector


@pytest.fixture
def served(clock: rk.ManualClock) -> Iterator[httpx.Client]:
    with _serve.build_limiter(clock=clock) as limiter, Server(_serve.build_app(limiter)) as client:
        yield client


def table(printed: str) -> dict[str, dict[str, str]]:
    """The rows of the printed table by group, each a dict by column."""
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("group "))
    headers = lines[start].split()
    rows = {}
    for line in lines[start + 1 :]:
        if not line or line.startswith("refused most"):
            break
        cells = line.split()
        rows[cells[0]] = dict(zip(headers, cells, strict=True))
    return rows


def test_top_shows_requests_by_result_and_the_peers_refused_most(
    served: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    statuses = {
        peer: [served.get("/", headers={_serve.ACCOUNT_HEADER: peer}).status_code for _ in range(n)]
        for peer, n in (("alice@example.com", 30), ("dave@example.com", 20), (_serve.ADMIN, 3))
    }
    refused = {peer: codes.count(429) for peer, codes in statuses.items()}
    assert refused["alice@example.com"] > refused["dave@example.com"] > 0 == refused[_serve.ADMIN]

    assert main(["top", f"{served.base_url}{_serve.METRICS_PATH}"]) == 0

    printed = capsys.readouterr().out
    row = table(printed)["default"]
    assert row["refused"] == str(sum(refused.values()))
    assert row["allowed"] == str(50 - sum(refused.values()))
    assert row["exempt"] == "3"
    assert row["keys"] == "2"
    assert f"alice@example.com ({refused['alice@example.com']}), dave@example.com ({refused['dave@example.com']})" in (
        printed
    )
    assert _serve.ADMIN not in printed


def test_top_every_adds_refusals_per_second_since_the_read_before(
    served: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(10):
        served.get("/", headers={_serve.ACCOUNT_HEADER: "alice@example.com"})

    assert main(["top", f"{served.base_url}{_serve.METRICS_PATH}", "--every", "0.01", "--count", "2"]) == 0

    first, second = capsys.readouterr().out.split("\n\n")[:2]
    assert "refused/s" not in first
    assert table(first)["default"]["refused"] == table(second)["default"]["refused"] != "0"
    assert table(second)["default"]["refused/s"] == "0.0"  # no requests between the reads


@pytest.fixture
def shop_metrics(clock: rk.ManualClock) -> Iterator[tuple[httpx.Client, rk.Limiter]]:
    limiter = rk.Limiter(rules=[rk.Rule(r"^/login$", "login", "1/min")], clock=clock)
    registry = CollectorRegistry()
    registry.register(RateLimitCollector(limiter, namespace="shop"))
    with Server(make_asgi_app(registry)) as client:
        yield client, limiter


def test_top_reads_another_namespace_and_says_when_there_is_no_limiter_there(
    shop_metrics: tuple[httpx.Client, rk.Limiter], capsys: pytest.CaptureFixture[str]
) -> None:
    client, limiter = shop_metrics
    for _ in range(3):
        limiter.allow("mallory", "/login")
    url = f"{client.base_url}/"

    assert main(["top", url, "--namespace", "shop"]) == 0
    printed = capsys.readouterr().out
    assert table(printed)["login"]["refused"] == "2"
    # Without top_refused the collector exports no peers; top says how to get them.
    assert "RateLimitCollector(..., top_refused=10)" in printed

    assert main(["top", url]) == 2
    assert f"{url} serves no ratekeeper_requests_total" in capsys.readouterr().err


def test_top_names_an_endpoint_it_cannot_read(capsys: pytest.CaptureFixture[str]) -> None:
    from _redis import free_port

    url = f"http://127.0.0.1:{free_port()}/metrics"
    assert main(["top", url]) == 2
    assert f"error: cannot read {url}" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "value"), [("--every", "0"), ("--every", "soon"), ("--count", "0")])
def test_top_refuses_bad_options_naming_them(option: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["top", "http://127.0.0.1:9/metrics", option, value])
    assert exit_.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err


def test_top_keeps_several_limiters_of_one_endpoint_apart(capsys: pytest.CaptureFixture[str]) -> None:
    edge = rk.Limiter(rules=[rk.Rule("^/", "api", "2/min")])
    admin = rk.Limiter(rules=[rk.Rule("^/", "api", "1/min")])
    registry = CollectorRegistry()
    registry.register(RateLimitCollector({"edge": edge, "admin": admin}, top_refused=5))
    for _ in range(5):
        edge.allow("mallory", "/x")
    for _ in range(3):
        admin.allow("trudy", "/x")
    with Server(make_asgi_app(registry)) as client:
        assert main(["top", f"{client.base_url}/"]) == 0
    printed = capsys.readouterr().out
    rows = table(printed)
    assert (rows["edge/api"]["allowed"], rows["edge/api"]["refused"]) == ("2", "3")
    assert (rows["admin/api"]["allowed"], rows["admin/api"]["refused"]) == ("1", "2")
    assert "edge:mallory (3)" in printed
    assert "admin:trudy (2)" in printed


def test_top_without_prometheus_client_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ratekeeper import _top

    monkeypatch.setitem(sys.modules, "prometheus_client.parser", None)  # as if it were not installed
    with pytest.raises(ImportError) as missing:
        _top.scrape("http://127.0.0.1:9/metrics")
    # The published package's extra, and the same from a checkout of the repository, until it is published.
    assert "pip install 'ratekeeper[prometheus]'" in str(missing.value)
    assert "from a checkout: pip install '.[prometheus]'" in str(missing.value)
