"""Reading what rate-limited servers say (ratekeeper._server_words).

The header sets are the vendors' own, from their documentation or from responses people captured: GitHub's
REST docs ("Rate limits for the REST API") and a search-API response posted to KnpLabs/php-github-api#1072,
a response posted on the OpenAI community forum, Anthropic's documented field names in a response recorded
by tidyllm's test fixtures, the IETF draft-10's own examples. No clock is read: every call passes ``now``.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Iterator
from datetime import datetime, timezone

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict
from ratekeeper import _server_words
from ratekeeper._server_words import DIALECTS, Budget, ServerWord, read
from requests.structures import CaseInsensitiveDict

NOTHING = ServerWord("", (), None)
HOUR = 3600.0


def epoch(text: str) -> float:
    """The epoch second of an ISO 8601 UTC time, worked out independently of the module under test."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


@pytest.fixture(autouse=True)
def forget_warnings() -> Iterator[None]:
    """Each test sees the module's say-it-once memory empty, and leaves it so."""
    _server_words._warned.clear()
    yield
    _server_words._warned.clear()


# GitHub


GITHUB_DOCS = [  # docs.github.com, "Rate limits for the REST API": an authenticated request
    ("Date", "Mon, 01 Jul 2013 17:27:06 GMT"),
    ("x-ratelimit-limit", "5000"),
    ("x-ratelimit-remaining", "4966"),
    ("x-ratelimit-used", "34"),
    ("x-ratelimit-reset", "1372700873"),
    ("x-ratelimit-resource", "core"),
]

GITHUB_SEARCH = [  # a search API response, KnpLabs/php-github-api#1072
    ("Server", "GitHub.com"),
    ("Date", "Mon, 13 Jun 2022 11:48:53 GMT"),
    ("Content-Type", "application/json; charset=utf-8"),
    ("X-GitHub-Media-Type", "github.v3; format=json"),
    ("X-RateLimit-Limit", "30"),
    ("X-RateLimit-Remaining", "14"),
    ("X-RateLimit-Reset", "1655120964"),
    ("X-RateLimit-Used", "16"),
    ("X-RateLimit-Resource", "search"),
    ("X-GitHub-Request-Id", "C6A2:5E0B:1B7A0A4:1C0F5D1:62A7242D"),
]


def test_github_docs_example_is_one_core_budget_reset_at_the_epoch_second_after_date() -> None:
    word = read(GITHUB_DOCS, 200, now=0.0)
    assert word == ServerWord("github", (Budget("core", 4966, 1247.0, 5000),), None)


def test_github_search_response_names_the_budget_by_its_resource() -> None:
    word = read(GITHUB_SEARCH, 200, now=epoch("2022-06-13T11:48:53"))
    assert word == ServerWord("github", (Budget("search", 14, 31.0, 30),), None)


def test_github_is_known_by_its_request_id_alone_and_its_budget_is_then_core() -> None:
    headers = [(name, value) for name, value in GITHUB_SEARCH if name != "X-RateLimit-Resource"]
    assert read(headers, 200, now=0.0).budgets == (Budget("core", 14, 31.0, 30),)


@pytest.mark.parametrize("status", [403, 429])
def test_github_secondary_limit_waits_for_retry_after_on_403_and_429(status: int) -> None:
    headers = [*GITHUB_SEARCH, ("Retry-After", "60")]
    word = read(headers, status, now=0.0)
    assert (word.dialect, word.retry_after) == ("github", 60.0)


def test_a_secondary_limit_may_carry_only_retry_after() -> None:
    headers = [("x-github-request-id", "C6A2:5E0B"), ("retry-after", "30")]
    assert read(headers, 403, now=0.0) == ServerWord("github", (), 30.0)


def test_retry_after_on_403_is_github_only() -> None:
    headers = [("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "30"), ("Retry-After", "60")]
    assert read(headers, 403, now=0.0).retry_after is None
    assert read(headers, 429, now=0.0).retry_after == 60.0


def test_github_resource_that_is_not_a_name_drops_the_budget_rather_than_count_it_as_core() -> None:
    headers = [*GITHUB_DOCS[:5], ("x-ratelimit-resource", "core search")]
    assert read(headers, 200, now=0.0) == ServerWord("github", (), None)


# OpenAI


OPENAI_FORUM = [  # a chat completion's response, OpenAI community forum, "How to get rate limit reset time"
    ("date", "Mon, 26 May 2025 05:00:04 GMT"),
    ("content-type", "application/json"),
    ("x-ratelimit-limit-requests", "5000"),
    ("x-ratelimit-limit-tokens", "160000"),
    ("x-ratelimit-limit-tokens_usage_based", "160000"),
    ("x-ratelimit-remaining-requests", "4999"),
    ("x-ratelimit-remaining-tokens", "159976"),
    ("x-ratelimit-remaining-tokens_usage_based", "159976"),
    ("x-ratelimit-reset-requests", "12ms"),
    ("x-ratelimit-reset-tokens", "9ms"),
    ("x-ratelimit-reset-tokens_usage_based", "9ms"),
]


def test_openai_response_is_a_requests_and_a_tokens_budget() -> None:
    word = read(OPENAI_FORUM, 200, now=0.0)
    assert word.dialect == "openai"
    assert word.retry_after is None
    (requests, tokens) = word.budgets
    assert (requests.name, requests.remaining, requests.limit) == ("requests", 4999, 5000)
    assert (tokens.name, tokens.remaining, tokens.limit) == ("tokens", 159976, 160000)
    assert requests.reset_after == pytest.approx(0.012)
    assert tokens.reset_after == pytest.approx(0.009)


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [
        ("6m0s", 360.0),
        ("1s", 1.0),
        ("1.5s", 1.5),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("0s", 0.0),
        ("0", 0.0),
        ("100us", 1e-4),
        ("100\u00b5s", 1e-4),  # MICRO SIGN, as Go writes it
        ("100\u03bcs", 1e-4),  # GREEK SMALL LETTER MU, which Go also reads
        ("250ns", 2.5e-7),
        (".5s", 0.5),
        ("17", 17.0),  # a bare number: seconds, as Azure's OpenAI sends
    ],
)
def test_openai_resets_are_go_durations(duration: str, seconds: float) -> None:
    headers = [("x-ratelimit-remaining-tokens", "10"), ("x-ratelimit-reset-tokens", duration)]
    (budget,) = read(headers, 200, now=0.0).budgets
    assert budget.reset_after == pytest.approx(seconds)


@pytest.mark.parametrize(
    "duration", ["-1s", "1d", "", "s", "1.2.3s", "\uff11s", "nan", "inf", "1e3s", "25h", "1s 2s", "0x10s"]
)
def test_openai_reset_that_is_not_a_duration_of_at_most_a_day_drops_that_budget_only(duration: str) -> None:
    headers = [*OPENAI_FORUM[2:], ("x-ratelimit-reset-tokens", duration)]
    word = read(headers, 200, now=0.0)
    assert [budget.name for budget in word.budgets] == ["requests"]


def test_openai_retry_after_ms_beats_retry_after() -> None:
    headers = [*OPENAI_FORUM, ("retry-after-ms", "1500"), ("retry-after", "2")]
    assert read(headers, 429, now=0.0).retry_after == 1.5


def test_openai_malformed_retry_after_ms_leaves_retry_after() -> None:
    headers = [*OPENAI_FORUM, ("retry-after-ms", "soon"), ("retry-after", "2")]
    assert read(headers, 429, now=0.0).retry_after == 2.0


def test_azure_minus_one_drops_the_tokens_budget() -> None:
    """Azure's OpenAI answered -1 for a while (openai/openai-dotnet#838): no budget, not a negative one."""
    headers = [
        ("x-ratelimit-limit-tokens", "-1"),
        ("x-ratelimit-remaining-tokens", "-1"),
        ("x-ratelimit-reset-tokens", "0"),
    ]
    assert read(headers, 200, now=0.0) == ServerWord("openai", (), None)


# Anthropic


ANTHROPIC_RECORDED = [  # a Messages API response recorded in tidyllm's test fixtures (Anthropic's field names)
    ("date", "Thu, 21 Aug 2025 12:41:00 GMT"),
    ("content-type", "application/json"),
    ("anthropic-ratelimit-input-tokens-limit", "80000"),
    ("anthropic-ratelimit-input-tokens-remaining", "80000"),
    ("anthropic-ratelimit-input-tokens-reset", "2025-08-21T12:40:59Z"),
    ("anthropic-ratelimit-output-tokens-limit", "16000"),
    ("anthropic-ratelimit-output-tokens-remaining", "16000"),
    ("anthropic-ratelimit-output-tokens-reset", "2025-08-21T12:41:00Z"),
    ("anthropic-ratelimit-requests-limit", "1000"),
    ("anthropic-ratelimit-requests-remaining", "999"),
    ("anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z"),
    ("anthropic-ratelimit-tokens-limit", "96000"),
    ("anthropic-ratelimit-tokens-remaining", "96000"),
    ("anthropic-ratelimit-tokens-reset", "2025-08-21T12:40:59Z"),
    ("request-id", "req_011CSLsW7mFqvHHnzrKdKjAE"),
]


def test_anthropic_response_is_four_budgets_whose_past_resets_are_zero() -> None:
    word = read(ANTHROPIC_RECORDED, 200, now=0.0)
    assert word == ServerWord(
        "anthropic",
        (
            Budget("requests", 999, 0.0, 1000),
            Budget("tokens", 96000, 0.0, 96000),
            Budget("input-tokens", 80000, 0.0, 80000),
            Budget("output-tokens", 16000, 0.0, 16000),
        ),
        None,
    )


@pytest.mark.parametrize(
    ("reset", "seconds"),
    [
        ("2026-11-27T10:00:30Z", 30.0),
        ("2026-11-27T10:00:30.25Z", 30.25),
        ("2026-11-27T11:00:30+01:00", 30.0),
        ("2026-11-27T04:30:30-05:30", 30.0),
        ("2026-11-27t10:00:30z", 30.0),
        ("2026-11-27T10:00:30.123456789Z", 30.123456789),
    ],
)
def test_anthropic_resets_are_rfc3339_after_the_servers_date(reset: str, seconds: float) -> None:
    headers = [
        ("Date", "Fri, 27 Nov 2026 10:00:00 GMT"),
        ("anthropic-ratelimit-requests-remaining", "0"),
        ("anthropic-ratelimit-requests-reset", reset),
        ("retry-after", "30"),
    ]
    word = read(headers, 429, now=0.0)
    assert word.budgets[0].reset_after == pytest.approx(seconds)
    assert word.retry_after == 30.0


@pytest.mark.parametrize(
    "reset", ["2026-11-27", "2026-11-27T10:00:30", "2026-13-27T10:00:30Z", "2026-11-27T24:00:30Z", "tomorrow"]
)
def test_anthropic_reset_that_is_not_rfc3339_drops_that_budget(reset: str) -> None:
    headers = [*ANTHROPIC_RECORDED, ("anthropic-ratelimit-requests-reset", reset)]
    assert "requests" not in [budget.name for budget in read(headers, 200, now=0.0).budgets]


# IETF


def test_ietf_pairs_ratelimit_with_its_policy_by_name() -> None:
    headers = [
        ("RateLimit-Policy", '"burst";q=100;w=60,"daily";q=1000;w=86400'),
        ("RateLimit", '"daily";r=900;t=3600, "burst";r=42;t=18'),
    ]
    assert read(headers, 200, now=0.0) == ServerWord(
        "ietf", (Budget("daily", 900, 3600.0, 1000, 86400.0), Budget("burst", 42, 18.0, 100, 60.0)), None
    )


@pytest.mark.parametrize("unit", ['"content-bytes"', '"concurrent-requests"', "content-bytes"])
def test_ietf_policies_counted_in_another_unit_than_requests_are_not_kept(unit: str) -> None:
    # A quota of bytes read as one of requests left hundreds of calls where a few bytes' worth were (9 to 11 429s).
    headers = [
        ("RateLimit-Policy", f'"bytes";q=1000;w=4;qu={unit}, "calls";q=10;w=4;qu="requests"'),
        ("RateLimit", '"bytes";r=900;t=3, "calls";r=9;t=3'),
    ]
    assert read(headers, 200, now=0.0).budgets == (Budget("calls", 9, 3.0, 10, 4.0),)


def test_ietf_lists_split_over_several_lines_are_one_list() -> None:
    headers = [
        ("RateLimit-Policy", '"burst";q=100;w=60'),
        ("ratelimit", '"burst";r=42;t=18'),
        ("RateLimit-Policy", '"daily";q=1000;w=86400'),
        ("RATELIMIT", '"daily";r=900;t=3600'),
    ]
    word = read(headers, 200, now=0.0)
    assert word.budgets == (Budget("burst", 42, 18.0, 100, 60.0), Budget("daily", 900, 3600.0, 1000, 86400.0))


def test_ietf_split_lists_from_a_real_clients_headers() -> None:
    response = httpx.Response(
        200, headers=[("RateLimit", '"a";r=1;t=2'), ("RateLimit", '"b";r=3;t=4'), ("Content-Type", "text/plain")]
    )
    word = read(response.headers.multi_items(), response.status_code, now=0.0)
    assert [budget.name for budget in word.budgets] == ["a", "b"]


def test_ietf_without_a_policy_has_no_limit_or_window() -> None:
    assert read([("RateLimit", '"default";r=50;t=30')], 200, now=0.0).budgets == (Budget("default", 50, 30.0),)


def test_ietf_missing_t_is_no_reset_within_the_window_not_zero() -> None:
    """Draft-10 4.1: t is OPTIONAL; 4.2's 'r=999;pk=...' has "no time window reset". So no more comes
    before the policy's window ends (when stated), or before the longest wait read at all."""
    windowed = [("RateLimit-Policy", '"peruser";q=100;w=60'), ("RateLimit", '"peruser";r=0;pk=:dHJpYWwxMjEzMjM=:')]
    assert read(windowed, 200, now=0.0).budgets == (Budget("peruser", 0, 60.0, 100, 60.0),)
    alone = [("RateLimit", '"default";r=999;pk=:dHJpYWwxMjEzMjM=:')]
    assert read(alone, 200, now=0.0).budgets == (Budget("default", 999, 86400.0),)


def test_ietf_token_names_as_in_the_drafts_own_examples_are_read() -> None:
    assert read([("RateLimit", "api;r=42;t=18")], 200, now=0.0).budgets == (Budget("api", 42, 18.0),)


@pytest.mark.parametrize(
    "field",
    [
        '"api";t=18',  # no r
        '"api";r=?1;t=18',  # r a Boolean
        '"api";r=-3;t=18',
        '"api";r=1.5;t=18',  # a Decimal
        '"api";r="42";t=18',
        '"api";r=42;t=-1',
        '"api";r=42;t=1.5',
        '"api";r=42;t=86401',
        '("api" "b");r=42;t=18',  # an inner list
        '"";r=42;t=18',
    ],
)
def test_ietf_malformed_member_is_ignored_and_the_rest_kept(field: str) -> None:
    headers = [("RateLimit", f'{field}, "kept";r=1;t=2')]
    assert read(headers, 200, now=0.0).budgets == (Budget("kept", 1, 2.0),)


@pytest.mark.parametrize("field", ['"api";r=', "api;;r=1", '"api";R=1', "\u00e9;r=1", "", ","])
def test_ietf_field_that_does_not_parse_is_ignored_whole(field: str) -> None:
    assert read([("RateLimit", field)], 429, now=0.0) == ServerWord("ietf", (), None)


def test_ietf_policy_that_does_not_parse_leaves_the_budgets() -> None:
    headers = [("RateLimit", '"api";r=42;t=18'), ("RateLimit-Policy", '"api";q=')]
    assert read(headers, 200, now=0.0).budgets == (Budget("api", 42, 18.0),)


def test_ietf_huge_remaining_is_clamped_and_huge_quota_dropped() -> None:
    headers = [("RateLimit", '"api";r=999999999999999;t=1'), ("RateLimit-Policy", '"api";q=999999999999999;w=0')]
    assert read(headers, 200, now=0.0).budgets == (Budget("api", 2**32 - 1, 1.0),)


def test_ietf_fields_are_read_without_http_sfv(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The core parses structured fields itself (the sfv crate): http-sfv is no longer needed to read them."""
    monkeypatch.setitem(sys.modules, "http_sfv", None)  # import http_sfv now raises ImportError
    headers = [("RateLimit", '"api";r=42;t=18'), ("X-RateLimit-Remaining", "5"), ("X-RateLimit-Reset", "9")]
    with caplog.at_level(logging.WARNING, logger="ratekeeper.outgoing"):
        assert read(headers, 200, now=0.0) == ServerWord("ietf", (Budget("api", 42, 18.0),), None)
        assert read(headers, 200, now=0.0, dialect="x-ratelimit") == ServerWord(
            "x-ratelimit", (Budget("requests", 5, 9.0),), None
        )
    assert caplog.records == []


# Generic X-RateLimit-*


DATE = "Fri, 27 Nov 2026 10:00:00 GMT"
AT_DATE = epoch("2026-11-27T10:00:00")


@pytest.mark.parametrize(
    ("reset", "seconds"),
    [
        ("30", 30.0),  # seconds from now
        ("0", 0.0),
        ("2.5", 2.5),
        ("86400", 86400.0),
        (f"{AT_DATE + 30:.0f}", 30.0),  # epoch seconds
        (f"{(AT_DATE + 30) * 1000:.0f}", 30.0),  # epoch milliseconds
        ("Fri, 27 Nov 2026 10:00:30 GMT", 30.0),  # an HTTP date
        (f"{AT_DATE - 30:.0f}", 0.0),  # an epoch second already past: the reset happened
        ("Fri, 27 Nov 2026 09:00:00 GMT", 0.0),
    ],
)
def test_generic_reset_kind_is_told_by_its_size(reset: str, seconds: float) -> None:
    headers = [
        ("Date", DATE),
        ("X-RateLimit-Limit", "60"),
        ("X-RateLimit-Remaining", "7"),
        ("X-RateLimit-Reset", reset),
    ]
    assert read(headers, 200, now=0.0) == ServerWord("x-ratelimit", (Budget("requests", 7, seconds, 60),), None)


@pytest.mark.parametrize("reset", ["86401", "999999999", "-5", "soon", "", "1e3", "\u0663\u0660", "NaN", "Infinity"])
def test_generic_reset_beyond_a_day_or_malformed_drops_the_budget(reset: str) -> None:
    headers = [("Date", DATE), ("X-RateLimit-Remaining", "7"), ("X-RateLimit-Reset", reset)]
    assert read(headers, 200, now=0.0) == ServerWord("x-ratelimit", (), None)


def test_generic_reset_after_goes_before_reset() -> None:
    headers = [("X-RateLimit-Remaining", "7"), ("X-RateLimit-Reset", "1999999999"), ("X-RateLimit-Reset-After", "12.5")]
    assert read(headers, 200, now=0.0).budgets == (Budget("requests", 7, 12.5),)


def test_generic_malformed_reset_after_leaves_reset() -> None:
    headers = [("X-RateLimit-Remaining", "7"), ("X-RateLimit-Reset", "40"), ("X-RateLimit-Reset-After", "-1")]
    assert read(headers, 200, now=0.0).budgets == (Budget("requests", 7, 40.0),)


def test_generic_missing_reset_or_remaining_drops_the_budget() -> None:
    assert read([("X-RateLimit-Limit", "60"), ("X-RateLimit-Remaining", "7")], 200, now=0.0).budgets == ()
    assert read([("X-RateLimit-Limit", "60"), ("X-RateLimit-Reset", "7")], 200, now=0.0).budgets == ()


@pytest.mark.parametrize(
    ("remaining", "expected"),
    [("0", 0), ("4294967295", 2**32 - 1), ("4294967296", 2**32 - 1), (str(10**30), 2**32 - 1), ("9" * 5000, 2**32 - 1)],
)
def test_remaining_above_2_to_the_32_is_clamped(remaining: str, expected: int) -> None:
    headers = [("X-RateLimit-Remaining", remaining), ("X-RateLimit-Reset", "1"), ("X-RateLimit-Limit", str(10**30))]
    assert read(headers, 200, now=0.0).budgets == (Budget("requests", expected, 1.0, None),)


@pytest.mark.parametrize("remaining", ["-1", "1.5", "", " ", "7 apples", "\u0667", "\uff17", "0x10", "+7", "NaN"])
def test_remaining_that_is_not_a_whole_number_drops_the_budget(remaining: str) -> None:
    headers = [("X-RateLimit-Remaining", remaining), ("X-RateLimit-Reset", "1")]
    assert read(headers, 200, now=0.0).budgets == ()


# The server's clock, not the client's


@pytest.mark.parametrize("skew", [0.0, HOUR, -HOUR, 1e6])
def test_absolute_resets_are_taken_from_the_servers_date_so_the_clients_skew_does_not_matter(skew: float) -> None:
    now = AT_DATE + 0.4 + skew  # the response arrived 0.4 s after the server dated it, by a clock `skew` off
    github = [("Date", DATE), ("x-github-request-id", "1"), ("x-ratelimit-remaining", "1")]
    github.append(("x-ratelimit-reset", f"{AT_DATE + 60:.0f}"))
    anthropic = [("Date", DATE), ("anthropic-ratelimit-requests-remaining", "1")]
    anthropic.append(("anthropic-ratelimit-requests-reset", "2026-11-27T10:01:00Z"))
    retry = [("Date", DATE), ("Retry-After", "Fri, 27 Nov 2026 10:01:00 GMT")]
    assert read(github, 200, now=now).budgets[0].reset_after == 60.0
    assert read(anthropic, 200, now=now).budgets[0].reset_after == 60.0
    assert read(retry, 503, now=now).retry_after == 60.0


def test_without_a_date_absolute_resets_are_taken_from_now() -> None:
    headers = [("X-RateLimit-Remaining", "1"), ("X-RateLimit-Reset", f"{AT_DATE + 60:.0f}")]
    assert read(headers, 200, now=AT_DATE + 10).budgets[0].reset_after == 50.0


def test_a_malformed_date_falls_back_to_now(caplog: pytest.LogCaptureFixture) -> None:
    headers = [("Date", "yesterday"), ("X-RateLimit-Remaining", "1"), ("X-RateLimit-Reset", f"{AT_DATE + 60:.0f}")]
    with caplog.at_level(logging.WARNING, logger="ratekeeper.outgoing"):
        assert read(headers, 200, now=AT_DATE + 10).budgets[0].reset_after == 50.0
    assert "'yesterday'" in caplog.text


def test_the_three_http_date_forms_are_read() -> None:
    for date in ("Friday, 27-Nov-26 10:00:00 GMT", "Fri Nov 27 10:00:00 2026", "Fri, 27 Nov 2026 10:00:00 GMT"):
        headers = [("Date", date), ("X-RateLimit-Remaining", "1"), ("X-RateLimit-Reset", f"{AT_DATE + 60:.0f}")]
        assert read(headers, 200, now=0.0).budgets[0].reset_after == 60.0


# Retry-After


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        ("1.5", 1.5),
        ("0", 0.0),
        (" 7 ", 7.0),
        ("Fri, 27 Nov 2026 10:00:30 GMT", 30.0),
        ("Fri, 27 Nov 2026 09:59:00 GMT", 0.0),  # already past: go now
        ("86401", 86400.0),  # a long wait is obeyed for a day, not retried every second
        ("99999999999", 86400.0),
        ("-1", None),
        ("soon", None),
        ("", None),
        ("1e3", None),
        ("\u0661\u0662", None),
        ("Fri, 27 Nov 2026 10:00:30 GMT, 5", None),
        ("Sat, 28 Nov 2026 10:00:30 GMT", 86400.0),  # beyond a day: a day
        ("Sunday, 06-Nov-94 08:49:37 GMT", 0.0),  # 1994, not 2094
        ("Fri, 31 Feb 2026 10:00:30 GMT", None),
        ("Fri, 27 Nov 2026 10:00:30 UTC", None),
    ],
)
def test_retry_after_is_seconds_or_an_http_date_up_to_a_day(value: str, seconds: float | None) -> None:
    assert read([("Date", DATE), ("Retry-After", value)], 429, now=0.0).retry_after == seconds


@pytest.mark.parametrize(("status", "read_it"), [(200, False), (403, False), (404, False), (429, True), (503, True)])
def test_retry_after_is_read_on_429_and_503(status: int, read_it: bool) -> None:
    word = read([("Retry-After", "5")], status, now=0.0)
    assert word == (ServerWord("", (), 5.0) if read_it else NOTHING)


def test_repeated_retry_after_is_malformed() -> None:
    assert read([("Retry-After", "5"), ("Retry-After", "5")], 429, now=0.0).retry_after is None


# Which dialect


PRECEDENCE = {
    "ietf": [("RateLimit", '"api";r=1;t=1')],
    "anthropic": [("anthropic-ratelimit-requests-remaining", "2"), ("anthropic-ratelimit-requests-reset", "x")],
    "openai": [("x-ratelimit-remaining-requests", "3"), ("x-ratelimit-reset-requests", "3s")],
    "github": [("x-ratelimit-resource", "core")],
    "x-ratelimit": [("X-RateLimit-Remaining", "5"), ("X-RateLimit-Reset", "5")],
}


@pytest.mark.parametrize("first", range(len(DIALECTS)))
def test_without_a_named_dialect_the_first_the_response_carries_is_read(first: int) -> None:
    headers = [pair for dialect in DIALECTS[first:] for pair in PRECEDENCE[dialect]]
    assert read(headers, 200, now=0.0).dialect == DIALECTS[first]


def test_a_named_dialect_reads_only_that_one() -> None:
    headers = [pair for dialect in DIALECTS for pair in PRECEDENCE[dialect]]
    assert read(headers, 200, now=0.0, dialect="openai").budgets == (Budget("requests", 3, 3.0),)
    assert read(headers, 200, now=0.0, dialect="x-ratelimit").budgets == (Budget("requests", 5, 5.0),)
    assert read(headers, 200, now=1e9, dialect="github").budgets == (Budget("core", 5, 0.0),)  # epoch 5: past
    assert read([], 200, now=0.0, dialect="github") == ServerWord("github", (), None)


def test_an_unknown_dialect_is_the_one_error() -> None:
    with pytest.raises(ValueError, match=r"dialect: 'stripe' is not one of 'ietf'"):
        read([], 200, now=0.0, dialect="stripe")


def test_dialects_are_the_five_in_order_of_precedence() -> None:
    assert DIALECTS == ("ietf", "anthropic", "openai", "github", "x-ratelimit")


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Content-Type", "text/html"), ("Date", DATE), ("Cache-Control", "no-cache")],
        [("Date", DATE)],
        [("x-ratelimit-used", "4")],
        [("stripe-should-retry", "true")],
    ],
)
def test_a_response_without_rate_limit_fields_says_nothing(headers: list[tuple[str, str]]) -> None:
    assert read(headers, 200, now=0.0) == NOTHING


def test_requests_and_aiohttp_header_containers_are_read_alike() -> None:
    """requests' CaseInsensitiveDict keeps the server's casing; aiohttp's CIMultiDict keeps repeats."""
    expected = ServerWord("github", (Budget("search", 14, 31.0, 30),), None)
    assert read(CaseInsensitiveDict(GITHUB_SEARCH).items(), 200, now=0.0) == expected
    assert read(CIMultiDict(GITHUB_SEARCH).items(), 200, now=0.0) == expected


# Logged once


def test_a_bad_value_is_logged_once_per_dialect_and_field(caplog: pytest.LogCaptureFixture) -> None:
    bad = [("X-RateLimit-Remaining", "lots"), ("X-RateLimit-Reset", "5")]
    with caplog.at_level(logging.WARNING, logger="ratekeeper.outgoing"):
        for _ in range(3):
            assert read(bad, 200, now=0.0).budgets == ()
        read([("X-RateLimit-Remaining", "1"), ("X-RateLimit-Reset", "never")], 200, now=0.0)
        read(
            [("x-github-request-id", "1"), ("X-RateLimit-Remaining", "lots"), ("X-RateLimit-Reset", "5")], 200, now=0.0
        )
    messages = [record.getMessage() for record in caplog.records]
    assert all(record.levelno == logging.WARNING and record.name == "ratekeeper.outgoing" for record in caplog.records)
    assert len(messages) == 3, messages
    assert "x-ratelimit-remaining 'lots'" in messages[0]
    assert "x-ratelimit-reset 'never'" in messages[1]
    assert "github" in messages[2]


def test_a_logged_value_is_cut_to_80_characters(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ratekeeper.outgoing"):
        read([("Retry-After", "x" * 10_000)], 429, now=0.0)
    assert f"'{'x' * 80}'" in caplog.text
    assert "x" * 81 not in caplog.text


# Never crash, never trust

KNOWN_NAMES = sorted(_server_words._FIELDS)
MAYBE_VALID = [
    "0",
    "1",
    "-1",
    "60",
    "4294967296",
    str(10**30),
    "1e309",
    "nan",
    "inf",
    "-inf",
    "1.5",
    "6m0s",
    "1h2m3.5s",
    "100\u00b5s",
    "2026-11-27T10:00:30Z",
    "2026-11-27T10:00:30.5+01:00",
    "Fri, 27 Nov 2026 10:00:30 GMT",
    "Fri, 27 Nov 9999 10:00:30 GMT",
    "Fri, 27 Nov 0001 10:00:30 GMT",
    "Sat, 01 Jan 0000 00:00:00 +9999",
    "1999999999",
    "1999999999999",
    '"api";r=42;t=18',
    '"api";q=100;w=60',
    'api;r=?1;t=1.5, ("a" "b");r=1',
    '"api";r=999999999999999;t=999999999999999',
    "",
    " ",
    "\u00e9",
    "\x00",
]
header_names = st.one_of(
    st.sampled_from(KNOWN_NAMES),
    st.sampled_from(KNOWN_NAMES).map(str.upper),
    st.sampled_from(KNOWN_NAMES).map(str.title),
    st.text(max_size=30),
)
header_values = st.one_of(
    st.sampled_from(MAYBE_VALID),
    st.text(max_size=60),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.floats().map(str),
    st.builds(lambda a, b: f"{a}, {b}", st.sampled_from(MAYBE_VALID), st.text(max_size=20)),
    st.from_regex(r"[0-9.]{0,8}(h|m|s|ms|us|ns){1,3}", fullmatch=True),
)


@given(
    headers=st.lists(st.tuples(header_names, header_values), max_size=12),
    status=st.one_of(st.sampled_from([200, 403, 429, 503]), st.integers(min_value=100, max_value=599)),
    now=st.one_of(st.floats(min_value=0, max_value=4e9), st.floats()),
    dialect=st.sampled_from([None, *DIALECTS]),
)
def test_any_headers_give_budgets_within_bounds_and_never_raise(
    headers: list[tuple[str, str]], status: int, now: float, dialect: str | None
) -> None:
    word = read(headers, status, now=now, dialect=dialect)
    assert word.dialect in ("", *DIALECTS)
    assert dialect is None or word.dialect == dialect
    for budget in word.budgets:
        assert type(budget.remaining) is int
        assert 0 <= budget.remaining <= 2**32 - 1
        assert math.isfinite(budget.reset_after)
        assert 0.0 <= budget.reset_after <= 86_400.0
        assert budget.limit is None or (type(budget.limit) is int and 0 <= budget.limit <= 2**32 - 1)
        assert budget.window is None or (math.isfinite(budget.window) and budget.window > 0)
        assert budget.name
    assert word.retry_after is None or (
        math.isfinite(word.retry_after) and 0.0 <= word.retry_after <= 86_400.0 and status in (403, 429, 503)
    )
