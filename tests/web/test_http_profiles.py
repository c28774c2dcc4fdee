"""``benches/http_profiles.py``: the quota server's wrk experiment runs end to end, and its checks catch a breach.

The end-to-end run starts ``python -m ratekeeper serve`` and one real ``wrk`` per profile for one short
trial; CI installs wrk (``.ci/run``).
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ratekeeper import _top

SCRIPT = Path(__file__).resolve().parent.parent.parent / "benches" / "http_profiles.py"


@pytest.fixture(scope="module")
def http_profiles() -> ModuleType:
    spec = importlib.util.spec_from_file_location("http_profiles", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["http_profiles"] = module  # dataclasses look their module up by name
    # The script imports its sibling benches/machine.py when it writes its results, as run from benches/.
    if str(SCRIPT.parent) not in sys.path:
        sys.path.append(str(SCRIPT.parent))
    spec.loader.exec_module(module)
    return module


def fake_run(module: ModuleType, name: str, requests: int, allowed: int, socket_errors: int = 0) -> object:
    profile = next(profile for profile in module.PROFILES if profile.name == name)
    return module.Run(1, profile, requests, requests - allowed, 10.0, socket_errors, 1.0, 2.0, {})


def test_the_checks_flag_a_profile_admitted_past_its_quota_and_a_refused_control(http_profiles: ModuleType) -> None:
    # alice (1/min) over 10 s: the failsafe's burst of 5 + her own 1 = 6 at most.
    assert http_profiles.admissions_bound(http_profiles.PROFILES[0], 10.0) == 6
    within = [fake_run(http_profiles, "alice", 1000, 6), fake_run(http_profiles, "admin", 500, 500)]
    assert http_profiles.check(within, 10.0) == []
    breached = [
        fake_run(http_profiles, "alice", 1000, 7),
        fake_run(http_profiles, "admin", 500, 499),
        fake_run(http_profiles, "invalidN", 500, 500, socket_errors=3),
    ]
    assert http_profiles.check(breached, 10.0) == [
        "alice: 7 admitted in 10.0 s, more than the 6 allowed",
        "invalidN: 3 socket errors",
        "admin: 1 of 500 requests refused; none may be",
    ]


def test_the_server_view_check_flags_metrics_that_disagree_with_wrk(http_profiles: ModuleType) -> None:
    runs = [fake_run(http_profiles, "alice", 1000, 6), fake_run(http_profiles, "admin", 500, 500)]
    agreeing = _top.Scrape(requests={"default": {"allowed": 6.0, "exempt": 501.0, "refused": 996.0}})
    assert http_profiles.check_server_view(runs, agreeing, in_flight=4) == []
    undercounted = _top.Scrape(requests={"default": {"allowed": 6.0, "exempt": 500.0, "refused": 900.0}})
    assert http_profiles.check_server_view(runs, undercounted, in_flight=4) == [
        "the server's /metrics counts 1406 decisions, wrk 1500 (in flight: 4)",
        "the server's /metrics counts 900 refusals, wrk 994 (in flight: 4)",
    ]


def test_the_experiment_runs_every_profile_with_wrk_and_stays_within_the_quotas(
    http_profiles: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "profiles.tsv"
    status = http_profiles.main(
        ["--trials", "1", "--seconds", "2", "--connections", "2", "--out", str(out), "--no-charts"]
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "OK every limited profile stayed within its quota" in printed
    # The server's /metrics agreed with wrk (else a FAIL line and status 1) and names who was refused:
    # limited peers only, never admin or the fresh accounts the failsafe lets through.
    assert "the server's /metrics (python -m ratekeeper top):\ngroup    allowed  delayed  refused" in printed
    refused_most = printed.split("refused most", 1)[1].split(": ", 1)[1].splitlines()[0]
    peers = {entry.split(" (")[0] for entry in refused_most.split("), ")}
    with out.open() as tsv:
        rows = {row["profile"]: row for row in csv.DictReader(tsv, delimiter="\t")}
    # Exactly the peers wrk saw refused (carol's 1000/min is reached only by a machine fast enough to
    # send more than 1000 requests in the run's 2 s).
    peer_of = {profile.name: profile.account for profile in http_profiles.PROFILES} | {"anonymous": "ANONYMOUS"}
    refused = {peer_of[name] for name, row in rows.items() if int(row["denied"])}
    assert {"alice@example.com", "dave@example.com", "invalid@example.com", "ANONYMOUS"} <= refused
    assert peers == refused
    assert list(rows) == [profile.name for profile in http_profiles.PROFILES]
    assert int(rows["alice"]["allowed"]) <= 6 < int(rows["alice"]["requests"])
    assert rows["admin"]["denied"] == rows["invalidN"]["denied"] == "0"
    assert int(rows["admin"]["requests"]) > 0
