"""What a benchmark ran on, and where its results go: the machine block every results file carries.

``describe()`` returns the facts a reader needs to weigh a figure or regenerate it: the CPU model (from
``/proc/cpuinfo``), the cores, the kernel, the Python, the ratekeeper commit it measured (``+changes`` when
the sources differ from that commit) and how it was installed (its wheel, or an editable build), the versions
of the libraries named, the HTTP server and parser where requests go over HTTP, and the date.
``write_results()`` writes a script's figures with that block as JSON, the input of ``benches/render.py``,
which turns them into the tables of ``docs/benchmarks.md`` and the README's figures.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The files a build of the core, and the Python around it, is made from: a change there is a change of what ran.
SOURCES = ("src", "python", "Cargo.toml", "Cargo.lock", "pyproject.toml")


def version(distribution: str) -> str:
    """The installed version of ``distribution``, or ``"not installed"``."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    """The checked-out commit, short, with ``+changes`` when the sources differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short=10", "HEAD")
    if not head:
        return "unknown"
    return f"{head}+changes" if git("status", "--porcelain", "--", *SOURCES) else head


def installed() -> str:
    """How ratekeeper is installed, from its ``direct_url.json`` (PEP 610): ``"editable"`` (``pip install -e``),
    ``"wheel"`` (a wheel file or an index), ``"source"`` (built from a folder), or ``"not installed"``."""
    try:
        text = metadata.distribution("ratekeeper").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return "not installed"
    if text is None:  # from an index: a wheel, or an sdist built into one
        return "wheel"
    where = json.loads(text)
    if where.get("dir_info", {}).get("editable"):
        return "editable"
    return "wheel" if str(where.get("url", "")).endswith(".whl") else "source"


def uvicorn_http() -> str:
    """The parser uvicorn's ``--http auto`` picks (httptools when it is installed, else h11), with its version."""
    parser = "httptools" if version("httptools") != "not installed" else "h11"
    return f"{parser} {version(parser)}"


def describe(packages: Iterable[str] = (), http: str | None = None) -> dict[str, Any]:
    """The machine block: ``packages`` are the distributions whose versions the figures depend on (ratekeeper
    is always named); ``http`` says which server and parser carried the requests, when any did."""
    names = ["ratekeeper", *(name for name in packages if name != "ratekeeper")]
    block: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "commit": commit(),
        "install": installed(),
        "versions": {name: version(name) for name in names},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }
    if http is not None:
        block["http"] = http
    return block


# Options naming where a script writes: they say nothing about what was measured.
OUTPUT_OPTIONS = ("--json", "--out", "--charts")


def command() -> str:
    """How this script was run, without the options naming its output files."""
    words = ["python", f"benches/{Path(sys.argv[0]).name}"]
    arguments = iter(sys.argv[1:])
    for argument in arguments:
        if argument in OUTPUT_OPTIONS:
            next(arguments, None)
        elif not argument.startswith(tuple(f"{option}=" for option in OUTPUT_OPTIONS)):
            words.append(argument)
    return " ".join(words)


def write_results(
    path: Path | None, name: str, data: Any, machine: dict[str, Any], *, made_by: str | None = None, **settings: Any
) -> None:
    """``data`` and ``machine`` as ``path`` (nothing when ``path`` is None), with the command that made them
    (``made_by``, or this script's command line)."""
    if path is None:
        return
    document = {
        "name": name,
        "command": made_by or command(),
        "settings": settings,
        "machine": machine,
        "data": data,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"results: {path}", file=sys.stderr)
