"""The README's first command: ``python -m ratekeeper demo`` runs, on a ManualClock, and prints the same every run."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import threading

import pytest


def test_the_demo_prints_its_decisions_the_same_every_run() -> None:
    runs = [
        subprocess.run([sys.executable, "-m", "ratekeeper", "demo"], capture_output=True, text=True, timeout=60)
        for _ in range(2)
    ]
    assert [(run.returncode, run.stderr) for run in runs] == [(0, ""), (0, "")]
    assert runs[0].stdout == runs[1].stdout
    lines = [" ".join(line.split()) for line in runs[0].stdout.splitlines()]
    # The quota section: failsafe first (2 of 2/min), then bob's 100/min carries his 2 used: 98 more.
    assert "before the fetch lands alice 2 2/min failsafe" in lines
    assert "after it landed bob 98 100/min provider" in lines
    assert "after it landed mallory 0 2/min failsafe" in lines
    # GCRA at 3 per 60 s: the fourth request, at 1 s, is refused.
    assert any(line.startswith("1s REJECT") for line in lines)
    # The metrics section, read from what the Prometheus collector exports: login's flood is refused
    # after 3, and the sketch names the peers refused most.
    assert "login 3 0 197 0 1" in lines
    assert "refused most: carol (281), mallory (197), dave (31)" in lines


# --- on a terminal ----------------------------------------------------------------------------------------------

# What rich's live display writes besides text: colours, cursor visibility, cursor up, erase line.
_WRITTEN = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|([\r\n])|([^\x1b\r\n]+)")


def screen(written: str) -> list[str]:
    """The lines a terminal shows once ``written`` has been written to it (from an empty screen)."""
    lines, row, column = [""], 0, 0
    for match in _WRITTEN.finditer(written):
        parameters, command, control, text = match.groups()
        if text is not None:
            line = lines[row].ljust(column)
            lines[row] = line[:column] + text + line[column + len(text) :]
            column += len(text)
        elif control == "\n":
            row, column = row + 1, 0
            lines.extend([""] * (row + 1 - len(lines)))
        elif control == "\r":
            column = 0
        elif command == "A":  # cursor up
            row = max(0, row - int(parameters or 1))
        elif command == "K":  # erase in line: the whole line (2), or from the cursor to its end
            lines[row] = "" if parameters == "2" else lines[row][:column]
        elif command not in ("m", "h", "l"):  # colours; showing and hiding the cursor
            raise AssertionError(f"an escape sequence this screen does not interpret: {match.group(0)!r}")
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.rstrip() for line in lines]


class Terminal(io.StringIO):
    """A standard output that says it is a terminal, as the demo's is when run in one."""

    def isatty(self) -> bool:
        return True


def demo_output(monkeypatch: pytest.MonkeyPatch, out: io.StringIO) -> str:
    from ratekeeper import _demo

    with monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", out)
        patched.setattr(_demo, "_BILLING_UP", threading.Event())  # each run starts before the billing answers
        patched.setattr(_demo, "LIVE_PACE", 0.001)  # the live table's redraws, without its 2 s
        _demo.run()
    return out.getvalue()


def test_on_a_terminal_the_demo_leaves_its_final_table_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM"):
        monkeypatch.delenv(name, raising=False)
    written = demo_output(monkeypatch, Terminal())
    piped = demo_output(monkeypatch, io.StringIO())
    # The live table was drawn as the traffic ran, up to its last state ...
    assert "ratekeeper metrics, t = 10.0 s (simulated)" in written
    assert "ratekeeper metrics" not in piped
    # ... and then removed: the screen ends as a pipe's output does, each table once, the final one under
    # the intro that says it is another scenario.
    shown = screen(written)
    assert shown == [line.rstrip() for line in piped.rstrip("\n").splitlines()]
    assert shown.count("refused most: carol (281), mallory (197), dave (31)") == 1
    assert sum(line.split()[:2] == ["group", "allowed"] for line in shown) == 1
    intro = next(i for i, line in enumerate(shown) if line.startswith("metrics: another scenario"))
    header = next(i for i, line in enumerate(shown) if line.split()[:2] == ["group", "allowed"])
    assert intro < header
