"""No import cycles among the project's own modules, in Python and in the Rust crate.

Both graphs are read from the source text, nothing is imported or compiled. Every dependency counts:
an import inside a function or under ``if TYPE_CHECKING:`` is as much a dependency as one at the top
of the file (it only moves the cycle to a later moment). One cycle finder serves both graphs, and a
test on a made-up graph shows that it reports a cycle.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "ratekeeper"
CRATE = ROOT / "src"

Graph = Mapping[str, Iterable[str]]


def find_cycles(graph: Graph, most: int = 50) -> list[list[str]]:
    """The elementary cycles of ``graph`` (each as its nodes, the first repeated at the end), shortest
    first; at most ``most`` of them. A node's edge to itself is a cycle too."""
    edges = {node: sorted(set(targets)) for node, targets in graph.items()}
    for targets in list(edges.values()):
        for target in targets:
            edges.setdefault(target, [])
    cycles: list[list[str]] = []
    # Each cycle once: found from its least node, through nodes greater than that node only.
    for start in sorted(edges):
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(edges[start]))]
        path, on_path = [start], {start}
        while stack and len(cycles) < most:
            targets = stack[-1][1]
            target = next(targets, None)
            if target is None:
                stack.pop()
                on_path.discard(path.pop())
            elif target == start:
                cycles.append([*path, start])
            elif target > start and target not in on_path:
                stack.append((target, iter(edges[target])))
                path.append(target)
                on_path.add(target)
    return sorted(cycles, key=lambda cycle: (len(cycle), cycle))[:most]


def describe(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


# Python: ratekeeper's modules, named "ratekeeper.x"; the package's __init__ is "ratekeeper.__init__".

INIT = "ratekeeper.__init__"


def python_modules() -> dict[str, Path]:
    """Each module's source: its .py file, or the stub of a compiled one (``_core.pyi``: what it names)."""
    modules: dict[str, Path] = {}
    for path in sorted([*PACKAGE.rglob("*.pyi"), *PACKAGE.rglob("*.py")]):  # a .py wins over its stub
        modules[".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)] = path
    return modules


def _importable(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module node ``name`` (a dotted module name) stands for: itself, or its package's __init__."""
    if name == "ratekeeper":
        return INIT
    if name in modules:
        return name
    package = f"{name}.__init__"
    return package if package in modules else None


def python_imports(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The project modules ``module`` imports anywhere in its file (top level, functions, TYPE_CHECKING)."""
    package = module.rsplit(".", 1)[0]  # "ratekeeper" for ratekeeper.x and for ratekeeper.__init__
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "ratekeeper" or alias.name.startswith("ratekeeper."):
                    found.add(_importable(alias.name, modules) or INIT)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source != "ratekeeper" and not source.startswith("ratekeeper."):
                continue
            for alias in node.names:
                # ``from ratekeeper import limiter`` imports the submodule; ``from ratekeeper import Limiter``
                # imports the package's __init__ (as does ``from . import x`` when x is no submodule).
                submodule = _importable(f"{source}.{alias.name}", modules) if alias.name != "*" else None
                found.add(submodule or _importable(source, modules) or INIT)
    found.discard(module)
    return found


def python_graph() -> dict[str, set[str]]:
    modules = python_modules()
    return {module: python_imports(module, path, modules) for module, path in modules.items()}


# Rust: the crate's top-level modules (src/<name>.rs or src/<name>/), edges from `crate::` and `super::`
# paths anywhere in the code; paths within one top-level module are no edges.

_COMMENTS_AND_LITERALS = re.compile(
    r"""
      //[^\n]*                                        # line comment (doc comments too)
    | /\*(?:[^*]|\*(?!/))*\*/                         # block comment (not nested)
    | \bb?r(\#*)"(?:.|\n)*?"\1                        # raw string
    | b?"(?:\\.|[^"\\])*"                             # string
    | b?'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'  # char (not a lifetime)
    """,
    re.VERBOSE,
)
_TOKEN = re.compile(r"\bmod\s+(\w+)\s*\{|\{|\}|\b(?:crate|super)(?:\s*::\s*super\b)*(?=\s*::)")
_IDENT = re.compile(r"\s*::\s*(\w+|\{)")


def _blank(match: re.Match[str]) -> str:
    """A comment or literal turned into spaces, keeping its newlines (so positions keep their lines)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def _first_segments(text: str, at: int) -> list[str]:
    """The first path segment after ``::`` at ``at``: one name, or each item's first name in a ``{...}`` group."""
    match = _IDENT.match(text, at)
    if match is None:
        return []
    if match.group(1) != "{":
        return [match.group(1)]
    depth, start, items = 1, match.end(), []
    for index in range(match.end(), len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        if (char == "," and depth == 1) or depth == 0:
            items.append(text[start:index])
            start = index + 1
        if depth == 0:
            break
    return [name.group(1) for item in items if (name := re.match(r"\s*(\w+)", item))]


def rust_module_path(path: Path, crate: Path = CRATE) -> list[str]:
    parts = list(path.relative_to(crate).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return parts


def rust_uses(path: Path, tops: set[str], crate: Path = CRATE) -> set[str]:
    """The top-level modules that the file at ``path`` names through ``crate::`` or ``super::`` paths."""
    text = _COMMENTS_AND_LITERALS.sub(_blank, path.read_text())
    # The module each brace opens: an inline ``mod name {`` adds a level below the file's module.
    module = rust_module_path(path, crate)
    scopes: list[str | None] = []
    found: set[str] = set()
    for token in _TOKEN.finditer(text):
        word = token.group(0)
        if token.group(1):
            scopes.append(token.group(1))
        elif word == "{":
            scopes.append(None)
        elif word == "}":
            if scopes:
                scopes.pop()
        else:
            here = module + [scope for scope in scopes if scope is not None]
            heads = re.findall(r"crate|super", word)
            if heads[0] == "crate":  # $crate:: too
                base: list[str] = []
            else:
                base = here[: max(len(here) - heads.count("super"), 0)]
            if base:
                found.add(base[0])
            else:
                found.update(name for name in _first_segments(text, token.end()) if name in tops)
    return found


def rust_graph() -> dict[str, set[str]]:
    tops = {path.stem for path in CRATE.glob("*.rs") if path.stem not in ("lib", "main")}
    tops |= {path.name for path in CRATE.iterdir() if path.is_dir()}
    graph: dict[str, set[str]] = {top: set() for top in tops}
    for path in sorted(CRATE.rglob("*.rs")):
        module = rust_module_path(path)
        if not module:
            continue  # the crate root declares and re-exports the modules: not a node
        graph[module[0]] |= rust_uses(path, tops) - {module[0]}
    return graph


def test_the_cycle_finder_reports_a_cycle_and_passes_a_tree() -> None:
    assert find_cycles({"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": ["b", "c"], "b": ["c"], "c": []}) == []
    assert find_cycles({"x": ["x"]}) == [["x", "x"]]
    assert find_cycles({"a": ["b"], "b": ["a", "c"], "c": ["b"]}) == [["a", "b", "a"], ["b", "c", "b"]]


def test_the_graph_readers_see_every_form_of_import(tmp_path: Path) -> None:
    """The readers find what the module tests rely on: relative, absolute, package and nested forms."""
    modules = {name: tmp_path / f"{name}.py" for name in ("ratekeeper.a", "ratekeeper.b", "ratekeeper.c")}
    modules[INIT] = tmp_path / "__init__.py"
    source = tmp_path / "ratekeeper.a.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n"
        "    from ratekeeper.c import thing\n"
        "def later():\n"
        "    import ratekeeper\n"
    )
    assert python_imports("ratekeeper.a", source, modules) == {"ratekeeper.b", "ratekeeper.c", INIT}
    source.write_text("from ratekeeper import b, Limiter\nfrom .. import nothing_of_ours\n")
    assert python_imports("ratekeeper.a", source, modules) == {"ratekeeper.b", INIT}

    crate = tmp_path / "src"
    (crate / "store").mkdir(parents=True)
    rust = crate / "store" / "mod.rs"
    rust.write_text(
        "use crate::{backend::{A, B}, rules};\n"
        "// use crate::clock::Clock;  (a comment is no dependency)\n"
        'const S: &str = "crate::quota::X";\n'
        "fn f() { let _ = crate::limiter::Limiter::new(); let c = '{'; }\n"
        "mod tests { use super::super::room::Room; use super::*; }\n"
    )
    tops = {"backend", "rules", "clock", "quota", "limiter", "room", "store"}
    assert rust_uses(rust, tops, crate) == {"backend", "rules", "limiter", "room", "store"}


def test_the_python_modules_import_one_another_without_a_cycle() -> None:
    graph = python_graph()
    assert graph[INIT] >= {"ratekeeper.limiter", "ratekeeper._core"}, "the package's modules were not read"
    cycles = find_cycles(graph)
    assert not cycles, f"import cycles among ratekeeper's Python modules:\n{describe(cycles)}"


def test_the_rust_crate_modules_use_one_another_without_a_cycle() -> None:
    graph = rust_graph()
    assert "store" in graph["python"], "the crate's modules were not read"
    cycles = find_cycles(graph)
    assert not cycles, f"cycles among the crate's top-level modules:\n{describe(cycles)}"
