"""Measures what "50/min" admits under each algorithm and burst, on a ManualClock, and writes the table of
``docs/what-a-rate-means.md``.

A sender asks at every tick (a 600th of the period) as many times as it is admitted, so it takes every
request a limiter would let through. The limiters that count in windows let the most through to a sender
that waits for the end of a window and sends on both sides of its boundary, so besides the sender that
starts at once, senders that make one request, stay idle until an offset into the period and then send
without pause are measured too; the table keeps the most any of them got.

``python tests/docs/rate_table.py`` rewrites the table between its markers; ``tests/docs/test_rate_table.py``
fails when the page and the measurement differ.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from pathlib import Path

import ratekeeper as rk

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "what-a-rate-means.md"
BEGIN = "<!-- rate table: begin (python tests/docs/rate_table.py writes it) -->"
END = "<!-- rate table: end -->"

RATE = "50/min"
PERIOD_NS = 60_000_000_000
TICK_NS = PERIOD_NS // 600
ALGORITHMS = ("gcra", "token_bucket", "sliding_window", "sliding_log", "fixed_window", "leaky_bucket")
BURSTS = (None, 10)  # None: the default, the rate's count
# Where an idle sender starts sending, as a fraction of the period: every 20th, and the last tick before the
# period ends (just before a window boundary for the window algorithms).
OFFSETS_NS = sorted({PERIOD_NS * i // 20 for i in range(1, 20)} | {PERIOD_NS - TICK_NS})


@dataclass(frozen=True)
class Row:
    algorithm: str
    burst: int | None
    at_once: int  # the most admitted at one instant
    first_period: int  # admitted in the first period to a sender that sends from the start
    any_period: int  # the most admitted in any window of one period, whatever the sender
    per_period_later: float  # admitted per period once the burst is spent (periods 3 to 5 of the greedy sender)


def admissions(algorithm: str, burst: int | None, idle_until_ns: int | None, periods: int) -> list[int]:
    """The instants (ns) at which a saturating sender is admitted over ``periods`` periods.

    With ``idle_until_ns``, the sender makes one request at 0 and then none until that instant.
    """
    clock = rk.ManualClock()
    limiter = rk.Limiter(RATE, algorithm=algorithm, clock=clock, **({} if burst is None else {"burst": burst}))
    admitted: list[int] = []
    now_ns = 0
    if idle_until_ns is not None:
        if limiter.allow("sender"):
            admitted.append(0)
        clock.advance(idle_until_ns / 1e9)
        now_ns = idle_until_ns
    while now_ns < periods * PERIOD_NS:
        while limiter.allow("sender"):
            admitted.append(now_ns)
        clock.advance(TICK_NS / 1e9)
        now_ns += TICK_NS
    return admitted


def most_in_a_period(times: list[int]) -> int:
    """The most admissions in any window [t, t + period), t an admission (the most are in one that starts at one)."""
    return max((bisect.bisect_left(times, t + PERIOD_NS) - i for i, t in enumerate(times)), default=0)


def most_at_once(times: list[int]) -> int:
    return max((times.count(t) for t in set(times)), default=0)


def measure(algorithm: str, burst: int | None) -> Row:
    greedy = admissions(algorithm, burst, None, periods=5)
    senders = [greedy] + [admissions(algorithm, burst, offset, periods=3) for offset in OFFSETS_NS]
    later = [t for t in greedy if 2 * PERIOD_NS <= t < 5 * PERIOD_NS]
    return Row(
        algorithm=algorithm,
        burst=burst,
        at_once=max(most_at_once(times) for times in senders),
        first_period=sum(1 for t in greedy if t < PERIOD_NS),
        any_period=max(most_in_a_period(times) for times in senders),
        per_period_later=len(later) / 3,
    )


def table() -> str:
    """The Markdown table of every algorithm and burst, as measured now."""
    lines = [
        "| `algorithm=` | `burst=` | at once | first minute, sending from the start | most in any minute "
        "| per minute later |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for algorithm in ALGORITHMS:
        for burst in BURSTS:
            row = measure(algorithm, burst)
            lines.append(
                f"| `{row.algorithm}` | {'default (50)' if row.burst is None else row.burst} | {row.at_once} "
                f"| {row.first_period} | {row.any_period} | {row.per_period_later:g} |"
            )
    return "\n".join(lines)


_BETWEEN_MARKERS = re.compile(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), re.DOTALL)


def page_table(text: str) -> str:
    """The table as the page has it now, between the markers."""
    found = _BETWEEN_MARKERS.search(text)
    assert found, f"{PAGE.name} has no rate table markers"
    return found.group(1).strip()


def main() -> None:
    text = PAGE.read_text(encoding="utf-8")
    page_table(text)  # the markers are there
    PAGE.write_text(_BETWEEN_MARKERS.sub(lambda _: f"{BEGIN}\n{table()}\n{END}", text), encoding="utf-8")


if __name__ == "__main__":
    main()
