"""The table of docs/what-a-rate-means.md is what the limiters admit now, measured on a ManualClock."""

from __future__ import annotations

import rate_table


def test_the_pages_table_is_what_is_measured_now() -> None:
    # On a difference, `python tests/docs/rate_table.py` rewrites the table; then read the page's advice again.
    assert rate_table.page_table(rate_table.PAGE.read_text(encoding="utf-8")) == rate_table.table()


def test_the_advice_holds_sliding_log_is_exact_and_gcra_is_a_pace_plus_a_burst() -> None:
    sliding_log = rate_table.measure("sliding_log", None)
    assert sliding_log.any_period == sliding_log.at_once == 50
    gcra = rate_table.measure("gcra", None)
    # 50 at once, then one every 1.2 s: 49 more before the minute ends.
    assert (gcra.at_once, gcra.first_period, gcra.per_period_later) == (50, 99, 50)


def test_a_sender_timing_a_window_boundary_gets_about_twice_a_fixed_window() -> None:
    # The reason the table measures idle senders too: the greedy sender alone would show 50 here.
    assert rate_table.measure("fixed_window", None).any_period == 99
    assert rate_table.most_in_a_period(rate_table.admissions("fixed_window", None, None, periods=3)) == 50
