"""The API reference is whole: every public name of ``ratekeeper`` is on the built page, with text.

Builds the site as ``make docs`` does (the stub ``_core.pyi`` is read, never the compiled core beside it)
and walks ``ratekeeper.__all__`` and each class's public members: each must be rendered with its own
entry and some text, or be named in its class's ``Attributes`` table.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ratekeeper as rk

ROOT = Path(__file__).resolve().parent.parent.parent
# Members every class, exception or dict (the stats are TypedDicts) has: not ours to document.
INHERITED = set().union(*(dir(base) for base in (object, Exception, ConnectionError, dict)))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(site)]
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    return (site / "reference" / "index.html").read_text(encoding="utf-8")


def entry_text(page: str, name: str) -> str | None:
    """The text of the entry for ``name`` (its heading to the next entry), or ``None`` if it has none."""
    start = page.find(f'id="{name}"')
    if start < 0:
        return None
    end = page.find('id="ratekeeper.', start + len(name) + 5)
    return re.sub(r"<[^>]+>", " ", page[start : end if end > 0 else None]).replace(f'id="{name}"', "")


def public_names() -> list[str]:
    names = []
    for name in rk.__all__:
        if name.startswith("__"):
            continue
        names.append(f"ratekeeper.{name}")
        obj = getattr(rk, name)
        if inspect.isclass(obj):
            names += [f"ratekeeper.{name}.{m}" for m in dir(obj) if not m.startswith("_") and m not in INHERITED]
    return names


def test_every_public_name_is_in_the_reference_with_text(reference: str) -> None:
    missing = []
    for name in public_names():
        text = entry_text(reference, name)
        if text is not None and len(text.split()) > 2:  # its name, its signature, and words
            continue
        owner, _, member = name.rpartition(".")
        section = entry_text(reference, owner) if owner != "ratekeeper" else None
        if section is not None and re.search(rf"\b{re.escape(member)}\b", section):
            continue  # named in its class's Attributes table
        missing.append(name)
    assert missing == [], "public names without an entry, or without text, in the API reference: " + ", ".join(missing)


def test_the_core_methods_a_newcomer_looks_for_are_there(reference: str) -> None:
    for method in ("allow", "check", "peek", "reset", "stats", "update_rule", "reduce", "resolve", "quota"):
        text = entry_text(reference, f"ratekeeper.Limiter.{method}")
        assert text is not None, method
        assert len(text.split()) > 5, method


def test_nothing_private_is_shown(reference: str) -> None:
    shown = set(re.findall(r'id="(ratekeeper\.[A-Za-z0-9_.]+)"', reference))
    private = sorted(name for name in shown if any(part.startswith("_") for part in name.split(".")[1:]))
    assert private == []
