"""The benchmark figures of the docs come from the results files, and from nowhere else.

``make bench`` writes ``benches/results/*.json`` and ``benches/render.py`` makes every table and figure
of ``docs/benchmarks.md`` and the README's from them, between ``<!-- bench:NAME -->`` markers. These
tests run no benchmark: they check that no figure stands outside a generated block, and that the
committed pages are what the committed results make.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from _docs import ROOT

sys.path.insert(0, str(ROOT / "benches"))

import render

# The results of one `make bench QUICK=1` run, kept as the renderer's input: their figures mean nothing (a
# smoke run on a busy machine), their shape is what every script writes.
SMOKE = Path(__file__).resolve().parent / "bench_smoke"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
TIMES = "\N{MULTIPLICATION SIGN}"
# A measured figure: a number with a unit of time, a ratio (a times sign right after it: not a formula's
# "10 times L1" with a space between), a share, a rate or a size.
FIGURE = re.compile(
    rf"\d(?:[\d,.]*\d)?(?:[{TIMES}x](?!\w)|\s?(?:%|(?:ns|µs|us|ms|req/s|decisions/s|[KMG]?i?B|bytes|instructions|cycles)\b))"
)


def outside_blocks(text: str) -> str:
    """``text`` without its generated blocks and its fenced code."""
    text = render.BLOCK.sub("", text)
    return re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)


def test_every_table_and_figure_on_the_benchmarks_page_is_generated() -> None:
    text = outside_blocks(BENCHMARKS.read_text(encoding="utf-8"))
    tables = [line for line in text.splitlines() if line.lstrip().startswith("|")]
    assert tables == [], "a table outside a generated block: make it in benches/render.py"
    assert FIGURE.findall(text) == [], "a figure outside a generated block: make it in benches/render.py or drop it"


def test_every_benchmark_figure_in_the_readme_is_generated() -> None:
    text = outside_blocks(README.read_text(encoding="utf-8"))
    assert FIGURE.findall(text) == [], "a figure outside a generated block: make it in benches/render.py or drop it"


def test_the_pages_hold_blocks_of_every_kind_render_makes() -> None:
    used = {name for page in render.PAGES for name in render.BLOCK.findall(page.read_text(encoding="utf-8"))}
    assert {name for name, _ in used} == set(render.BLOCKS)


@pytest.mark.parametrize("page", render.PAGES, ids=lambda page: page.name)
def test_the_page_is_what_the_committed_results_make(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert render.render_text(text, render.load(render.RESULTS)) == text, (
        f"{page.name} differs from what benches/results makes: run python benches/render.py (or make bench)"
    )


@pytest.mark.parametrize("name", sorted(render.BLOCKS))
def test_every_block_renders_from_what_the_scripts_write(name: str) -> None:
    made = render.BLOCKS[name](render.load(SMOKE))
    assert made.strip()
    assert "not measured" not in made


def test_a_smoke_run_fills_every_block_of_the_pages() -> None:
    results = render.load(SMOKE)
    for page in render.PAGES:
        made = render.render_text(page.read_text(encoding="utf-8"), results)
        assert "not measured" not in made.lower(), page.name
        assert render.render_text(made, results) == made, f"{page.name}: rendering twice changes it"


def test_the_figure_pattern_sees_what_a_page_would_show() -> None:
    shown = f"73.3 ns, 2.6{TIMES} / 2.3{TIMES}, +0.88 %, 45.4 B, 1.79x, 72 µs, 9,314 req/s, 48.9 MB, 3.0 ms"
    assert len(FIGURE.findall(shown)) == 10
    assert FIGURE.findall(f"10⁹/min over 100,000 keys on 2 cores, 10 {TIMES} L1 misses, wrk -t1 -c50 for 5 s") == []
