"""Runs the Python code blocks of the README and of ``docs/`` as they are written.

Conventions of the pages, so every example is executed by the tests:

- every fenced ``python`` block of a page runs, in order, in one namespace per page (a later block may use
  the names an earlier one defined), in a temporary working directory;
- ``<!-- name: NAME -->`` on the line before a block names the namespace as it stands after that block,
  for a test to drive what it built (an ``app``, a ``limiter``): ``page_namespace(page, "NAME")``;
- ``<!-- skip: REASON -->`` on the line before a block keeps it from running; only for blocks that
  cannot run in a test (a shell session, a settings module); the reason says why;
- other languages (``sh``, ``toml``, ``text``) are not run.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?:<!-- (name|skip): (.*?) -->\n)?```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    language: str
    code: str
    name: str | None
    skip: str | None


def pages() -> list[Path]:
    """The README and every Markdown page of ``docs/``."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        marker, value, language, code = match.groups()
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start(3)) + 1,
                language=language,
                code=code,
                name=value if marker == "name" else None,
                skip=value if marker == "skip" else None,
            )
        )
    return found


def run_page(page: Path, until: str | None = None) -> dict[str, Any]:
    """Runs the page's Python blocks in order and returns their namespace.

    With ``until``, stops after the block named ``until`` (and fails if there is none).
    """
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    previous = os.getcwd()
    with tempfile.TemporaryDirectory() as workdir:
        os.chdir(workdir)
        try:
            for block in blocks(page):
                if block.language != "python" or block.skip is not None:
                    continue
                where = f"{page.relative_to(ROOT)}:{block.line}"
                # dont_inherit: the page runs as written, not under this module's `from __future__ import annotations`.
                exec(compile(block.code, where, "exec", dont_inherit=True), namespace)
                if until is not None and block.name == until:
                    return namespace
        finally:
            os.chdir(previous)
    assert until is None, f"{page.relative_to(ROOT)} has no block named {until!r}"
    return namespace


def page_namespace(page: str | Path, name: str) -> dict[str, Any]:
    """The namespace of ``page`` (relative to the repository) after its block named ``name``."""
    return run_page(ROOT / page, until=name)
