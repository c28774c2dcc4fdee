"""The web integrations behind the servers they meet in production: nginx in front of uvicorn, gunicorn.

Each server is started on free loopback ports by a fixture and stopped in teardown; nginx with a config
written to the test's tmp directory (``daemon off``, its pid, logs and temp files there). The proxy test
uses three loopback addresses so that the client, nginx's upstream side and the app are told apart:
the client connects from 127.0.0.2, nginx connects to the app from 127.0.0.3 (the trusted proxy).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import ratekeeper as rk
from _web import Server, gunicorn_threads, stop
from fastapi import FastAPI
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.keys import client_ip

CLIENT = "127.0.0.2"  # where the test's requests come from
PROXY = "127.0.0.3"  # where nginx's requests to the app come from


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until something accepts on 127.0.0.1:``port`` (10 s at most), or the server died."""
    deadline = time.monotonic() + 10
    while True:
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}:\n{log.read_text(errors='replace')}"
            time.sleep(0.02)


# --- nginx in front of uvicorn: which forwarding header is trusted ------------------------------------------------


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[tuple[httpx.Client, rk.Limiter]]:
    """A client (from 127.0.0.2) of nginx proxying to uvicorn, whose middleware trusts nginx (127.0.0.3)
    and keys by client_ip; and the app's limiter: 2 a minute per key."""
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if binary is None:
        pytest.skip("nginx is not installed (.ci/run installs it)")
    limiter = rk.Limiter(rules=[rk.Rule("^/api/", "api", "2/min")], clock=rk.ManualClock())
    app = FastAPI()

    @app.get("/api/items")
    def items() -> dict[str, int]:
        return {"items": 3}

    app.add_middleware(RateLimitMiddleware, limiter=limiter, key=client_ip(trusted_proxies=[PROXY]))
    port = free_port()
    # As root, nginx's workers would switch to nobody, who cannot enter tmp_path: stay who we are.
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
    with Server(app) as upstream:
        config = tmp_path / "nginx.conf"
        config.write_text(
            textwrap.dedent(f"""\
                {user}
                daemon off;
                worker_processes 1;
                pid {tmp_path}/nginx.pid;
                error_log {tmp_path}/error.log warn;
                events {{ worker_connections 64; }}
                http {{
                    access_log off;
                    client_body_temp_path {tmp_path}/client_body;
                    proxy_temp_path {tmp_path}/proxy;
                    fastcgi_temp_path {tmp_path}/fastcgi;
                    uwsgi_temp_path {tmp_path}/uwsgi;
                    scgi_temp_path {tmp_path}/scgi;
                    server {{
                        listen 127.0.0.1:{port};
                        location / {{
                            proxy_pass http://127.0.0.1:{upstream.base_url.port};
                            proxy_bind {PROXY};
                            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
                        }}
                    }}
                }}
            """)
        )
        log = tmp_path / "error.log"
        log.touch()
        process = subprocess.Popen(
            [binary, "-c", str(config), "-p", str(tmp_path), "-e", str(log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, process, log)
            transport = httpx.HTTPTransport(local_address=CLIENT)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", transport=transport, timeout=10) as client:
                yield client, limiter
        finally:
            stop(process)


def test_behind_nginx_a_client_cannot_pick_its_key_with_forwarded(nginx: tuple[httpx.Client, rk.Limiter]) -> None:
    client, limiter = nginx
    # nginx passes a client's Forwarded through unchanged and appends the client's address to its
    # X-Forwarded-For: each request names someone else in both, and all are one client.
    codes = [
        client.get("/api/items", headers={"Forwarded": f"for=1.2.3.{i}", "X-Forwarded-For": f"5.6.7.{i}"}).status_code
        for i in range(4)
    ]
    assert codes == [200, 200, 429, 429]
    assert limiter.top_refused(5) == [(CLIENT, 2)]


# --- gunicorn: a streamed Flask response gives its permit back before the client has the last byte -------------

STREAM_APP = """
import time

import flask
import ratekeeper as rk
from ratekeeper.flask import RateLimit
from ratekeeper.keys import header

limiter = rk.Limiter(
    rules=[rk.Rule("^/stream", "held", limits=[rk.Limit("1000000/min"), rk.Limit(concurrency=1)])]
)
app = flask.Flask(__name__)
RateLimit(app, limiter=limiter, key=header("X-API-Key"))


@app.get("/stream")
def stream() -> flask.Response:
    chunks = int(flask.request.args.get("chunks", "4"))

    def body():
        for _ in range(chunks):
            yield b"x" * 1024

    return flask.Response(body(), mimetype="application/octet-stream")


@app.after_request
def log_on_close(response: flask.Response) -> flask.Response:
    # Work of the app's own when the response is closed (an access log written, a span ended): gunicorn
    # closes the body after the client has its last byte, so whatever waits for the close waits for this.
    response.call_on_close(lambda: time.sleep(0.002))
    return response


@app.get("/counters")
def counters() -> dict[str, int]:
    held = limiter.stats()["groups"]["held"]
    return {name: held[name] for name in ("requests", "allowed", "refused")}
"""


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[httpx.Client]:
    """gunicorn serving the streaming Flask app: one worker of four threads (gthread)."""
    pytest.importorskip("gunicorn")
    (tmp_path / "stream_app.py").write_text(STREAM_APP)
    with gunicorn_threads("stream_app:app", tmp_path, tmp_path / "gunicorn.log") as client:
        yield client


KEY = {"X-API-Key": "alice"}


def test_sequential_streamed_requests_on_gunicorn_are_never_refused(gunicorn: httpx.Client) -> None:
    # Each request starts once the previous one's body has been read to its end: never two in flight.
    # A connection each: on a kept-alive one, gunicorn reads the next request only after the last has
    # been cleaned up, while a new connection is served by another thread at once.
    codes = []
    for _ in range(300):
        with gunicorn.stream("GET", "/stream", headers={**KEY, "Connection": "close"}) as response:
            response.read()
            codes.append(response.status_code)
    assert codes.count(429) == 0
    assert gunicorn.get("/counters").json() == {"requests": 300, "allowed": 300, "refused": 0}


def test_a_client_leaving_mid_stream_gives_the_permit_back_on_gunicorn(gunicorn: httpx.Client) -> None:
    with gunicorn.stream("GET", "/stream", params={"chunks": 100_000}, headers=KEY) as response:
        chunks = response.iter_raw()  # kept: dropping the iterator would close the stream now
        next(chunks)  # the body has started and goes on (more than the sockets hold): the permit is held
        assert gunicorn.get("/stream", headers=KEY).status_code == 429
    # The connection is closed: the server's next write fails and it closes the body's iterator. It
    # notices on its own time, so ask (a bounded number of times) until the permit is back.
    codes = []
    for _ in range(200):
        codes.append(gunicorn.get("/stream", headers=KEY).status_code)
        if codes[-1] == 200:
            break
        time.sleep(0.05)
    assert codes[-1] == 200, codes
