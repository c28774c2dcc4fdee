"""Key functions read the same key from an ASGI scope, a WSGI environ and either framework's request.

The ASGI middleware reads ``from_scope``, the Flask extension ``from_environ``, and a user calling a key
function on a request gets ``__call__``: all three must agree, or a limit would depend on the server.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from ratekeeper.keys import KeyFunction, client_ip, header
from starlette.requests import HTTPConnection
from werkzeug.wrappers import Request


def request_of(peer: str, headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same request as an ASGI scope and as a WSGI environ."""
    scope = {
        "type": "http",
        "path": "/",
        "headers": [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()],
        "client": (peer, 50000),
    }
    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": peer}
    environ.update({"wsgi.input": io.BytesIO(), "SERVER_NAME": "test", "SERVER_PORT": "80"})
    for name, value in headers.items():
        wsgi_name = name.upper().replace("-", "_")
        environ[wsgi_name if wsgi_name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{wsgi_name}"] = value
    return scope, environ


def keys_of(key: KeyFunction, peer: str, headers: dict[str, str]) -> set[str | None]:
    scope, environ = request_of(peer, headers)
    return {
        key.from_scope(scope),
        key.from_environ(environ),
        key(HTTPConnection(scope)),  # Starlette
        key(Request(environ)),  # Flask / Werkzeug
    }


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-API-Key": "k1"}, "k1"),
        ({"x-api-key": "  k2 "}, "k2"),
        ({"X-API-Key": ""}, None),
        ({"X-API-Key": "   "}, None),
        ({"X-Other": "k3"}, None),
        ({}, None),
    ],
)
def test_a_header_key_is_the_same_from_every_source(headers: dict[str, str], expected: str | None) -> None:
    assert keys_of(header("X-API-Key"), "192.0.2.1", headers) == {expected}


def test_a_content_header_has_no_http_prefix_in_the_environ() -> None:
    assert keys_of(header("Content-Type"), "192.0.2.1", {"Content-Type": "text/csv"}) == {"text/csv"}


TRUSTED = ["10.0.0.0/8"]


@pytest.mark.parametrize(
    ("peer", "headers", "expected"),
    [
        ("192.0.2.1", {}, "192.0.2.1"),
        # An untrusted peer's own header is its word, not evidence.
        ("192.0.2.1", {"X-Forwarded-For": "198.51.100.7"}, "192.0.2.1"),
        # Behind a trusted proxy: the rightmost address that is not a trusted proxy, never the spoofable first.
        ("10.0.0.5", {"X-Forwarded-For": "1.2.3.4, 198.51.100.7, 10.0.0.9"}, "198.51.100.7"),
        ("10.0.0.5", {"Forwarded": 'for=1.2.3.4, for="198.51.100.8:4711"'}, "198.51.100.8"),
        ("10.0.0.5", {"Forwarded": 'for="[2001:db8::1]:4711"', "X-Forwarded-For": "203.0.113.1"}, "2001:db8::1"),
        ("10.0.0.5", {}, "10.0.0.5"),
    ],
)
def test_the_client_ip_is_the_same_from_every_source(peer: str, headers: dict[str, str], expected: str) -> None:
    assert keys_of(client_ip(trusted_proxies=TRUSTED), peer, headers) == {expected}
