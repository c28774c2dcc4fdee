"""Real servers for the web tests: uvicorn in a thread, gunicorn in a process, and a Structured Field reader
for the IETF fields."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from http_sfv import List


def members(value: str) -> dict[str, dict[str, Any]]:
    """A RateLimit / RateLimit-Policy field as {policy name: {parameter: value}}, parsed strictly."""
    parsed = List()
    parsed.parse(value.encode())
    return {item.value: dict(item.params) for item in parsed}


class Server:
    """uvicorn serving ``app`` on 127.0.0.1 in a thread, stopped on exit."""

    def __init__(self, app: Any, **options: Any) -> None:
        """``options``: uvicorn's ``Config`` options over these defaults."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        # proxy_headers off: our key function, not uvicorn, reads X-Forwarded-For here. Keep-alive longer than
        # any idle gap of a test (uvicorn's default is 5 s): a client waiting out a window would otherwise send on
        # a pooled connection the server is closing at that instant, a race of the client's pool
        # ("Server disconnected without sending a response"), not of what the test checks.
        settings = {"log_level": "warning", "lifespan": "off", "proxy_headers": False, "timeout_keep_alive": 60}
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, **(settings | options))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stops a server started as a subprocess: terminated, then killed if it outlives 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextlib.contextmanager
def gunicorn_threads(app: str, chdir: Path, log: Path, env: dict[str, str] | None = None) -> Iterator[httpx.Client]:
    """gunicorn serving the WSGI ``app`` (``module:name`` in ``chdir``): one worker of four threads (gthread)
    on a free loopback port, its output in ``log``; a client of it, then the server stopped."""
    from test_web_servers import free_port, wait_for_port

    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "--chdir", str(chdir), "--bind", f"127.0.0.1:{port}"]
    command += ["--workers", "1", "--threads", "4", "--log-level", "warning", app]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_port(port, process, log)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    finally:
        stop(process)
