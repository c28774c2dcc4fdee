"""The API reference is whole: every public name of ``ratekeeper`` is on the built page, with text.

Builds the site as ``make docs`` does (the stub ``_core.pyi`` is read, never the compiled core beside it)
and walks ``ratekeeper.__all__`` and each class's public members: each must be rendered with its own
entry and some text, or be named in its class's ``Attributes`` table. Every class and function shows its
signature, and its parameter table agrees with it (types, and defaults rather than "required"); no Sphinx
role is printed raw, and no name of the internal list is shown.
"""

from __future__ import annotations

import ast
import html
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


# Names that are the package's own machinery, not for applications, though public by their spelling.
INTERNAL = {
    "ratekeeper.config.RulePlaces",
    "ratekeeper.config.RulePlaces.of_option",
    "ratekeeper.config.RulePlaces.move",
    "ratekeeper.config.move_rule_error",
    "ratekeeper.config.LimiterPlan.place",
    "ratekeeper.keys.key_of",
    "ratekeeper.keys.key_text",
    "ratekeeper.keys.checked_key",
}
# Classes shown without a signature, as nobody calls them: the core makes them (no constructor from Python),
# stats() returns them (TypedDicts), or ratekeeper raises them (exceptions with their base's constructor).
NOT_CALLED = {
    "ratekeeper.Decision",
    "ratekeeper.GroupPolicy",
    "ratekeeper.Resolution",
    "ratekeeper.QuotaInfo",
    "ratekeeper.Stats",
    "ratekeeper.GroupStats",
    "ratekeeper.LimitStats",
    "ratekeeper.AdaptiveStats",
    "ratekeeper.Histogram",
    "ratekeeper.SharedStats",
    "ratekeeper.httpx.HostStats",
    "ratekeeper.BackendUnavailable",
    "ratekeeper.django.Ratelimited",
}
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj):")


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def entries(page: str, kinds: tuple[str, ...] = ("class", "function")) -> list[tuple[str, str, str]]:
    """``(kind, id, html)`` of each rendered class and function: its heading to the next entry (so a class's
    own signature and docstring, without its members)."""
    found = list(re.finditer(r'<div class="doc doc-object doc-(\w+)">\s*<h\d id="([^"]+)"', page))
    return [
        (m[1], m[2], page[m.end() : found[i + 1].start() if i + 1 < len(found) else len(page)])
        for i, m in enumerate(found)
        if m[1] in kinds
    ]


def signature_of(entry: str) -> str | None:
    """The signature shown under an entry's heading, as text; ``None`` when there is none."""
    heading_then_signature = r'.*?</h\d>\s*<div class="doc-signature highlight"><pre><span></span><code>(.*?)</code>'
    shown = re.match(heading_then_signature, entry, re.S)
    return text_of(shown[1]).strip() if shown else None


def parameters_of(signature: str) -> dict[str, bool]:
    """Each parameter of a shown signature, and whether it has a default."""
    _, _, rest = signature.partition("(")  # Limiter(rate: ..., *, rules: ...) or allow(peer: str, ...) -> bool
    function = ast.parse(f"def f({rest}: pass").body[0]
    assert isinstance(function, ast.FunctionDef), signature
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    with_default = {a.arg for a in positional[len(positional) - len(arguments.defaults) :]}
    with_default |= {a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is not None}
    every = [*positional, *arguments.kwonlyargs, *filter(None, (arguments.vararg, arguments.kwarg))]
    return {a.arg: a.arg in with_default for a in every}


def parameter_rows(entry: str) -> list[tuple[str, str, str]]:
    """``(name, type, default)`` of each row of an entry's ``Parameters`` table."""
    table = re.search(r'<span class="doc-section-title">Parameters:</span></p>\s*<table>(.*?)</table>', entry, re.S)
    if table is None:
        return []
    rows = []
    for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table[1], re.S):
        cells = [text_of(cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row, re.S)]
        rows.append((cells[0].lstrip("*"), cells[1], cells[-1]))
    return rows


def test_every_class_and_function_shows_its_signature(reference: str) -> None:
    missing = [name for _, name, entry in entries(reference) if signature_of(entry) is None and name not in NOT_CALLED]
    assert missing == [], "classes and functions without a signature in the API reference: " + ", ".join(missing)


def test_parameter_tables_agree_with_the_signatures(reference: str) -> None:
    faults = []
    for _, name, entry in entries(reference):
        signature = signature_of(entry)
        shown = parameters_of(signature) if signature is not None else {}
        for parameter, annotation, default in parameter_rows(entry):
            if parameter not in shown:
                faults.append(f"{name}({parameter}): shown as {default!r}, but not in the signature shown")
            elif shown[parameter] and default == "required":
                faults.append(f"{name}({parameter}): has a default, shown as required")
            elif not annotation:
                faults.append(f"{name}({parameter}): no type")
    assert faults == [], "parameter tables that contradict their signatures:\n" + "\n".join(faults)


def test_the_core_classes_are_documented_from_the_stub(reference: str) -> None:
    # The compiled core's docstrings carry no Args: a build that inspected it instead of reading the stub
    # would show these classes without their parameter tables.
    for name in ("Limiter", "Rate", "Limit", "Rule", "Quotas", "Redis", "Shared", "ManualClock"):
        entry = next(entry for _, shown, entry in entries(reference) if shown == f"ratekeeper.{name}")
        signature = signature_of(entry)
        assert signature is not None, name
        documented = {row[0] for row in parameter_rows(entry)}
        assert set(parameters_of(signature)) - {"self"} <= documented, name


def test_no_sphinx_role_is_printed(reference: str) -> None:
    printed = sorted({match[0] for match in SPHINX_ROLE.finditer(text_of(reference))})
    context = [m.group(0) for m in re.finditer(r".{0,40}" + SPHINX_ROLE.pattern + r".{0,40}", text_of(reference))]
    assert printed == [], f"Sphinx roles printed raw: {printed}, e.g. {context[:5]}"


def test_no_internal_name_is_shown(reference: str) -> None:
    shown = set(re.findall(r'id="(ratekeeper\.[A-Za-z0-9_.]+)"', reference))
    assert sorted(shown & INTERNAL) == [], "internal names shown in the API reference"


def test_make_docs_installs_the_docs_extra() -> None:
    """`make docs` installs the docs extra's packages alone (not the package, which would compile)."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    line = next(line for line in (root / "Makefile").read_text().splitlines() if line.startswith("DOCS_DEPS"))
    assert re.findall(r"'([^']+)'", line) == extra
