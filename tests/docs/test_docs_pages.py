"""Every page of the guide and the README runs: its Python blocks in order, in one namespace per page.

What the web pages build (an ``app``) is driven on a real server by ``tests/web/test_readme_examples.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _docs import ROOT, blocks, pages, run_page

# Blocks that may be kept from running, and why: everything else runs.
ALLOWED_SKIPS = ("needs a Redis server", "a Django settings module", "the peer's code, for comparison")


def uses_django(page: Path) -> bool:
    text = page.read_text(encoding="utf-8")
    return "from django" in text or "rest_framework" in text


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_the_page_runs(page: Path, request: pytest.FixtureRequest) -> None:
    if uses_django(page):
        request.getfixturevalue("django_site")
    run_page(page)


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_the_page_has_only_blocks_the_tests_can_see(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    fences = sum(1 for line in text.splitlines() if line.lstrip().startswith("```")) // 2
    # An indented fence (in a list item) or a block without a language would escape the harness.
    assert len(blocks(page)) == fences, f"{page.name}: a fenced block the harness does not find"
    for block in blocks(page):
        assert block.language, f"{page.name}:{block.line}: a block without a language"
        assert block.skip is None or block.skip.startswith(ALLOWED_SKIPS), f"{page.name}:{block.line}: {block.skip}"


def test_the_guide_has_the_pages_the_site_lists() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").splitlines()
    listed = {line.split(": ", 1)[1].strip() for line in nav if line.strip().endswith(".md")}
    written = {str(page.relative_to(ROOT / "docs")) for page in pages() if page.parent != ROOT}
    assert written - listed == set(), "pages the site's nav leaves out"
