"""Checks that a built wheel installs where users are: manylinux2014 (glibc 2.17) on Linux.

`auditwheel show` reads the glibc versions the core's symbols need. It does not see a symbol with no
version at all (a wrapper the build's C library lacked, linked as a plain undefined name), which a
loader refuses at import on every glibc that lacks it: every undefined name must be versioned, weak,
or the interpreter's own (`Py*`, `_Py*`). Both read the ELF in Python, so a wheel cross-built for
another architecture is checked alike.

Usage: python .ci/check_wheel.py dist/ratekeeper-*.whl
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from elftools.elf.elffile import ELFFile  # pyelftools, which auditwheel brings: reads any architecture's ELF

WANTED_TAG = "manylinux_2_17"


def fail(message: str) -> None:
    print(f"check_wheel: {message}", file=sys.stderr)
    raise SystemExit(1)


def unversioned_imports(core: Path) -> list[str]:
    """The names `core` imports with no symbol version, but weak ones and the interpreter's own."""
    with core.open("rb") as file:
        elf = ELFFile(file)
        symbols = elf.get_section_by_name(".dynsym")
        versions = elf.get_section_by_name(".gnu.version")
        names = []
        for index, symbol in enumerate(symbols.iter_symbols()):
            if symbol["st_shndx"] != "SHN_UNDEF" or not symbol.name or symbol["st_info"]["bind"] == "STB_WEAK":
                continue
            version = versions.get_symbol(index)["ndx"] if versions is not None else "VER_NDX_GLOBAL"
            if version in ("VER_NDX_LOCAL", "VER_NDX_GLOBAL") and not re.match(r"_?Py", symbol.name):
                names.append(symbol.name)
    return names


def main() -> None:
    if len(sys.argv) != 2:
        fail(f"usage: {sys.argv[0]} WHEEL")
    wheel = Path(sys.argv[1])
    if not sys.platform.startswith("linux"):
        print(f"check_wheel: {wheel.name}: not Linux, nothing to check")
        return
    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)], check=True, capture_output=True, text=True
    ).stdout
    tag = re.search(r'platform tag:\s*"([^"]+)"', shown)
    if tag is None or not tag.group(1).startswith(WANTED_TAG):
        fail(f"{wheel.name}: auditwheel says {tag.group(1) if tag else 'no tag'}, wanted {WANTED_TAG}:\n{shown}")
    with tempfile.TemporaryDirectory() as scratch, zipfile.ZipFile(wheel) as archive:
        cores = [name for name in archive.namelist() if re.search(r"_core.*\.so$", name)]
        if len(cores) != 1:
            fail(f"{wheel.name}: expected one compiled core, found {cores}")
        core = Path(archive.extract(cores[0], scratch))
        loose = unversioned_imports(core)
    if loose:
        fail(f"{wheel.name}: {cores[0]} imports {loose} without a version: a glibc without them refuses it")
    print(f"check_wheel: {wheel.name}: {tag.group(1)}, every C library import versioned")


if __name__ == "__main__":
    main()
