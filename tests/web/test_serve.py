"""The quota server (``python -m ratekeeper serve``): every profile of its wrk experiment on a real uvicorn.

Tested: each account is limited by the quota its provider gives (one request a minute for alice, 100 and
1,000 for others), an unknown account and a new account id on every request stay on the failsafe quota
(5 a minute), a request without the account header is decided as the anonymous account, the admin is
exempt and gets no rate-limit fields, and ``python -m ratekeeper serve`` answers on its port and stops on
SIGTERM. Time is a ManualClock; a quota lands when the test waits for the fetch queue (``wait_quotas``), so
an account's first request is decided on the failsafe and counts against its own quota after.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import ratekeeper as rk
from _web import Server, members
from ratekeeper import _serve

ALICE = "alice@example.com"
INVALID = "invalid@example.com"


class Served:
    """The server's app on uvicorn with a ManualClock; ``get(account)`` sends one request."""

    def __init__(self, client: httpx.Client, limiter: rk.Limiter, clock: rk.ManualClock) -> None:
        self.client = client
        self.limiter = limiter
        self.clock = clock

    def get(self, account: str | None) -> httpx.Response:
        headers = {} if account is None else {_serve.ACCOUNT_HEADER: account}
        return self.client.get("/", headers=headers)

    def first(self, account: str | None) -> httpx.Response:
        """The account's first request (decided on the failsafe), then its quota lands."""
        response = self.get(account)
        assert self.limiter.wait_quotas(timeout=10)
        return response

    def admitted(self, account: str | None, times: int) -> int:
        return sum(self.get(account).status_code == 200 for _ in range(times))


@pytest.fixture
def directory() -> _serve.AccountDirectory:
    return _serve.AccountDirectory()


@pytest.fixture
def served(directory: _serve.AccountDirectory, clock: rk.ManualClock) -> Iterator[Served]:
    with _serve.build_limiter(directory, clock=clock) as limiter, Server(_serve.build_app(limiter)) as client:
        yield Served(client, limiter, clock)


def test_alice_gets_one_request_a_minute_and_her_failsafe_request_counts_against_it(served: Served) -> None:
    first = served.first(ALICE)
    assert first.status_code == 200
    assert members(first.headers["RateLimit-Policy"])["default"] == {"q": 5, "w": 60}  # the failsafe

    refused = served.get(ALICE)
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Rate limit exceeded", "status": 429, "retry_after": 60}
    assert refused.headers["Retry-After"] == "60"
    assert members(refused.headers["RateLimit-Policy"])["default"] == {"q": 1, "w": 60}
    assert members(refused.headers["RateLimit"])["default"] == {"r": 0, "t": 60}

    served.clock.advance(60)
    assert served.admitted(ALICE, 5) == 1


@pytest.mark.parametrize(
    ("account", "quota", "window"),
    [
        ("alice@example.com", 1, 60),
        ("bob@example.com", 100, 60),
        ("carol@example.com", 1000, 60),
        ("dave@example.com", 10, 1),
        (None, 10, 60),  # no header: decided as ANONYMOUS
    ],
)
def test_each_account_is_limited_by_its_quota_from_the_provider(
    served: Served, account: str | None, quota: int, window: int
) -> None:
    served.first(account)
    response = served.get(account)
    assert members(response.headers["RateLimit-Policy"])["default"] == {"q": quota, "w": window}
    if quota <= 100:
        # Two requests so far, both counted; the quota's burst is its count.
        assert served.admitted(account, quota + 5) == max(quota - 2, 0)


def test_a_request_without_the_header_is_decided_as_anonymous(
    served: Served, directory: _serve.AccountDirectory
) -> None:
    served.first(None)
    assert served.limiter.quota(_serve.ANONYMOUS, "default").rate == rk.Rate("10/min")
    assert directory.unknown == 0


def test_an_account_the_provider_does_not_know_stays_on_the_failsafe(
    served: Served, directory: _serve.AccountDirectory
) -> None:
    assert served.first(INVALID).status_code == 200
    assert directory.unknown == 1
    assert served.admitted(INVALID, 10) == 4  # 5/min in all
    refused = served.get(INVALID)
    assert members(refused.headers["RateLimit-Policy"])["default"] == {"q": 5, "w": 60}


def test_a_new_account_id_on_every_request_is_always_admitted_on_the_failsafe(served: Served) -> None:
    assert all(served.get(f"invalid{n}@example.com").status_code == 200 for n in range(50))


def test_admin_is_exempt_and_gets_no_rate_limit_fields(served: Served) -> None:
    responses = [served.get(_serve.ADMIN) for _ in range(30)]
    assert all(response.status_code == 200 and response.text == "ok\n" for response in responses)
    assert all("RateLimit" not in response.headers for response in responses)
    assert served.limiter.stats()["exempt"] == 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_python_m_ratekeeper_serve_answers_on_its_port_and_stops_on_sigterm() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ratekeeper", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        statuses = []
        deadline = time.monotonic() + 20
        while not statuses:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the server did not answer"
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/", headers={"X-Account-ID": ALICE})
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            statuses.append(response.status_code)
        assert statuses == [200]
    finally:
        process.terminate()
        out, err = process.communicate(timeout=20)
    # uvicorn shuts down gracefully, then re-raises the signal it caught, so the exit is SIGTERM's.
    assert process.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err
    assert f"serving on http://127.0.0.1:{port}/" in out
