"""``rediss://``: the Redis backend over TLS, against a real redis-server with a certificate from a
private CA (trustme) that the limiter is told to trust."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ratekeeper as rk
import trustme
from _redis import free_port


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """(port, CA file) of a redis-server that speaks only TLS."""
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.private_key_pem.write_to_path(str(directory / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(directory / "server.crt"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    port = free_port()
    executable = shutil.which("redis-server")
    assert executable is not None
    command = [
        executable, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--tls-cert-file", str(directory / "server.crt"), "--tls-key-file", str(directory / "server.key"),
        "--tls-ca-cert-file", str(directory / "ca.pem"), "--tls-auth-clients", "no", "--dir", str(directory),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    context = ssl.create_default_context(cafile=str(directory / "ca.pem"))
    deadline = time.monotonic() + 10
    while True:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=0.2) as raw,
                context.wrap_socket(raw, server_hostname="localhost") as tls,
            ):
                tls.sendall(b"*1\r\n$4\r\nPING\r\n")
                if tls.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            assert process.poll() is None, "the TLS redis-server exited"
            assert time.monotonic() < deadline, "the TLS redis-server did not answer within 10 s"
            time.sleep(0.02)
    yield port, directory / "ca.pem"
    process.kill()
    process.wait(timeout=10)


def test_rediss_decides_over_tls_with_a_private_ca(tls_server: tuple[int, Path], redis_prefix: str) -> None:
    port, ca = tls_server
    backend = rk.Redis(f"rediss://localhost:{port}/0", tls_ca_file=ca, prefix=redis_prefix, on_error="raise", timeout=1)
    lim = rk.Limiter("2/min", backend=backend)
    assert [lim.allow("tls"), lim.allow("tls"), lim.allow("tls")] == [True, True, False]


def test_an_untrusted_certificate_is_an_outage_not_a_bypass(tls_server: tuple[int, Path], redis_prefix: str) -> None:
    port, _ = tls_server
    # The system's roots do not know the private CA: the handshake fails, and on_error decides.
    lim = rk.Limiter("2/min", backend=rk.Redis(f"rediss://localhost:{port}/0", on_error="raise", timeout=1))
    with pytest.raises(rk.BackendUnavailable):
        lim.allow("tls")


def test_an_unreadable_ca_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(rk.InvalidValue, match="cannot read") as error:
        rk.Redis("rediss://localhost:6380/0", tls_ca_file=tmp_path / "missing.pem")
    assert error.value.loc == ("tls_ca_file",)
