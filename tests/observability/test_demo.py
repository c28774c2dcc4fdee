"""The README's first command: ``python -m ratekeeper demo`` runs, on a ManualClock, and prints the same every run."""

from __future__ import annotations

import subprocess
import sys


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
    # The cooldown score (GCRA) at 3 per 60 s: the fourth request, at 1 s, is refused.
    assert any(line.startswith("1s REJECT") for line in lines)
    # The metrics section, read from what the Prometheus collector exports: login's flood is refused
    # after 3, and the sketch names the peers refused most.
    assert "login 3 0 197 0 1" in lines
    assert "refused most: carol (281), mallory (197), dave (31)" in lines
