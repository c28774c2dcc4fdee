"""The command line as an operator meets it: ``--version``, help that says what each command does, ``top``
given just ``host:port``, and output piped into ``head`` ending without a traceback."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
import ratekeeper as rk
from _web import Server
from ratekeeper import _serve
from ratekeeper.__main__ import main, metrics_url

COMMANDS = ("demo", "check-config", "serve", "top", "inspect")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ratekeeper", *args], capture_output=True, text=True, timeout=60)


def test_version_prints_the_package_version() -> None:
    done = run("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"ratekeeper {rk.__version__}")


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_says_what_a_command_does_not_where_its_design_came_from(
    command: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"] if command else ["--help"])
    assert exited.value.code == 0
    printed = capsys.readouterr().out.lower()
    assert "usage:" in printed
    assert "seed" not in printed
    assert "issue" not in printed


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("127.0.0.1:9100", "http://127.0.0.1:9100/metrics"),
        ("localhost:9100/", "http://localhost:9100/"),
        ("localhost:9100/stats/prom", "http://localhost:9100/stats/prom"),
        ("http://10.0.0.1:8080/metrics", "http://10.0.0.1:8080/metrics"),
        ("https://api.example.com", "https://api.example.com/metrics"),
    ],
)
def test_top_takes_host_and_port_or_a_url(given: str, read: str) -> None:
    assert metrics_url(given) == read


def test_top_reads_a_running_service_given_only_host_and_port(
    clock: rk.ManualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    with _serve.build_limiter(clock=clock) as limiter, Server(_serve.build_app(limiter)) as client:
        assert client.get("/", headers={_serve.ACCOUNT_HEADER: "alice@example.com"}).status_code == 200
        address = httpx.URL(str(client.base_url))
        assert main(["top", f"{address.host}:{address.port}"]) == 0
    printed = capsys.readouterr().out
    assert f"http://{address.host}:{address.port}/metrics" in printed
    assert "default" in printed


def test_output_piped_into_head_ends_quietly() -> None:
    # `python -m ratekeeper demo | head -3`: the reader leaves after three lines.
    with subprocess.Popen(
        [sys.executable, "-m", "ratekeeper", "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as demo:
        assert demo.stdout is not None
        assert demo.stderr is not None
        first = [demo.stdout.readline() for _ in range(3)]
        demo.stdout.close()
        errors = demo.stderr.read()
        demo.wait(timeout=60)
    assert first[0].startswith("ratekeeper")
    assert "Traceback" not in errors, errors
