"""The chart of docs/adaptive-concurrency.md: each controller's limit over time in the simulation of
``tests/adaptive/_sim.py`` (a service of 20 workers x 10 ms, 200 closed-loop clients), whose capacity halves
at 25 s and doubles at 40 s; the knee drawn under it.

Usage
    python benches/adaptive_chart.py                  # writes docs/adaptive_concurrency.png
    python benches/adaptive_chart.py --out /tmp/x.png

Needs matplotlib (``pip install -e '.[bench]'``). The simulation runs on a ManualClock: the chart is the same
on every machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "adaptive"))

import ratekeeper as rk  # noqa: E402
from _sim import Phase, simulate  # noqa: E402

PHASES = [Phase(0, 20), Phase(25, 10), Phase(40, 40)]
DURATION = 55


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "adaptive_concurrency.png")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 3.6), dpi=100)
    knee_times = [0.0, 25.0, 25.0, 40.0, 40.0, float(DURATION)]
    knee_values = [20, 20, 10, 10, 40, 40]
    axes.plot(knee_times, knee_values, color="black", linestyle="--", linewidth=1, label="the service's knee")
    for controller, color in (("gradient", "tab:blue"), ("aimd", "tab:orange")):
        run = simulate(rk.Limit(adaptive=controller), PHASES, clients=200, duration=DURATION, seed=1)
        axes.plot(run.times, run.limits, color=color, linewidth=1.2, label=f"adaptive={controller!r}")
    axes.set_xlabel("simulated seconds")
    axes.set_ylabel("permits")
    axes.set_ylim(0, 55)
    axes.legend(loc="upper left", fontsize=8)
    axes.set_title("The limit follows the service's capacity (20, halved at 25 s, doubled at 40 s)", fontsize=9)
    figure.tight_layout()
    figure.savefig(args.out)
    print(f"chart: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
