"""A real ``redis-server`` on a free loopback port, for the Redis backend's tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def ping(port: int) -> bool:
    """Whether a Redis server answers ``PING`` on ``port`` (RESP spoken by hand: no client needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as connection:
            connection.sendall(b"*1\r\n$4\r\nPING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """``redis-server`` without persistence on 127.0.0.1; ``stop()`` and ``start()`` it again (same port)
    to test outages."""

    def __init__(self, directory: Path) -> None:
        executable = shutil.which("redis-server")
        assert executable is not None, "redis-server is not installed (Debian: apt-get install redis-server)"
        self.executable = executable
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        log = self.directory / f"redis-{self.port}.log"
        with log.open("ab") as output:
            self.process = subprocess.Popen([*command, "--dir", str(self.directory)], stdout=output, stderr=output)
        deadline = time.monotonic() + 10
        while not ping(self.port):
            assert self.process.poll() is None, f"redis-server exited: {log.read_text()}"
            assert time.monotonic() < deadline, "redis-server did not answer PING within 10 s"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None
