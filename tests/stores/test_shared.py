"""The shared-memory store in one process: its arguments, its config table, what it shows, and
two limiters on one region behaving as two processes would (each its own rules, quotas and counters; one
set of states). Real processes are in ``test_shared_processes.py``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ratekeeper as rk
from ratekeeper.config import plan_from_config


def shared(path: Path, *args: object, **options: object) -> rk.Limiter:
    options.setdefault("max_keys", 10_000)
    return rk.Limiter(*args, backend=rk.Shared(path=path), **options)  # type: ignore[arg-type]


def admitted(lim: rk.Limiter, peer: str, n: int, path: str | None = None) -> int:
    return sum(lim.allow(peer, path) for _ in range(n))


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (lambda: rk.Shared(), ValueError, "name: give a name"),
        (lambda: rk.Shared("a", path="/tmp/x"), ValueError, "path: give a name or a path, not both"),
        (lambda: rk.Shared("../etc/passwd"), ValueError, "name: must be 1 to 200 letters"),
        (lambda: rk.Shared(".hidden"), ValueError, "not starting with '.'"),
        (lambda: rk.Shared(7), TypeError, "name: must be a str, got int"),  # type: ignore[arg-type]
        (lambda: rk.Shared(path=7), TypeError, "path: must be a str or os.PathLike, got int"),  # type: ignore[arg-type]
        (lambda: rk.Shared("a", log_entries=-1), ValueError, "log_entries"),
        (lambda: rk.Shared("a", log_entries="many"), TypeError, "log_entries"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_name_the_field(call: object, kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=message):
        call()  # type: ignore[operator]


def test_a_name_is_a_file_under_dev_shm_and_the_backend_is_shown() -> None:
    region = rk.Shared("myapp")
    assert region.path == "/dev/shm/ratekeeper-myapp"
    assert region.name == "myapp"
    assert repr(region) == 'Shared("myapp")'
    assert repr(rk.Shared(path="/run/x")) == 'Shared(path="/run/x")'


def test_two_limiters_on_one_region_share_states_but_not_rules(tmp_path: Path) -> None:
    path = tmp_path / "region"
    first = shared(path, rules=[rk.Rule("^/api", "api", "5/hour")])
    second = shared(path, rules=[rk.Rule("^/api", "api", "5/hour"), rk.Rule("^/login", "login", "1/hour")])
    assert admitted(first, "alice", 3, "/api") == 3
    assert admitted(second, "alice", 5, "/api") == 2
    assert not first.allow("alice", "/api")
    # Each limiter routes by its own rules: /login is limited only in the second.
    assert admitted(first, "alice", 3, "/login") == 3
    assert admitted(second, "alice", 3, "/login") == 1
    assert isinstance(first.backend, rk.Shared)
    assert first.backend.path == str(path)


def test_stats_show_the_region_next_to_the_process(tmp_path: Path) -> None:
    path = tmp_path / "region"
    first = shared(path, "2/hour")
    second = shared(path, "2/hour")
    for lim in (first, second, first, second):
        lim.allow("mallory")
    second.allow("alice")
    mine, theirs = first.stats(), second.stats()
    region = mine["shared"]
    assert region is not None
    assert region["path"] == str(path)
    assert (region["keys"], region["max_keys"]) == (2, 10_000)
    # Every process's decisions together; each process's own counts stay its own.
    assert (region["allowed"], region["refused"]) == (3, 2)
    assert region["top_refused"] == [("mallory", 2)]
    assert region["groups"] == {"default": 2}
    assert (mine["groups"]["default"]["allowed"], theirs["groups"]["default"]["allowed"]) == (1, 2)
    assert mine["keys"] == theirs["keys"] == 2
    assert rk.Limiter("2/hour").stats()["shared"] is None


def test_inspect_reads_a_region_without_writing_it(tmp_path: Path) -> None:
    path = tmp_path / "region"
    lim = shared(path, "1/hour")
    for peer in ("alice", "bob", "bob", "bob"):
        lim.allow(peer)
    before = path.read_bytes()
    run = subprocess.run(
        [sys.executable, "-m", "ratekeeper", "inspect", "--path", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    shown = json.loads(run.stdout)
    assert (shown["keys"], shown["allowed"], shown["refused"]) == (2, 2, 2)
    assert shown["top_refused"] == [["bob", 2]]
    assert path.read_bytes() == before
    text = subprocess.run(
        [sys.executable, "-m", "ratekeeper", "inspect", "--path", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert "2 keys of 10,000" in text
    assert "bob" in text
    missing = subprocess.run(
        [sys.executable, "-m", "ratekeeper", "inspect", "--path", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert "cannot open the shared region" in missing.stderr


def test_a_config_file_backend_table_makes_a_shared_region(tmp_path: Path) -> None:
    path = tmp_path / "region"
    plan = plan_from_config({"default": "3/hour", "max_keys": 1_000, "backend": {"path": str(path)}})
    assert isinstance(plan.backend, rk.Shared)
    first, second = plan.build(rk.Limiter), plan.build(rk.Limiter)
    assert admitted(first, "alice", 2) + admitted(second, "alice", 2) == 3
    named = plan_from_config({"default": "3/hour", "backend": {"shared": "app-1", "log_entries": 10}}).backend
    assert isinstance(named, rk.Shared)
    assert (named.path, named.log_entries) == ("/dev/shm/ratekeeper-app-1", 10)
    with pytest.raises(ValueError, match="backend: give shared"):
        plan_from_config({"default": "3/hour", "backend": {"shared": "a", "path": "/tmp/b"}})
    with pytest.raises(ValueError, match=r"backend: unknown key 'url'"):
        plan_from_config({"default": "3/hour", "backend": {"shared": "a", "url": "redis://x"}})
    with pytest.raises(ValueError, match=r"backend.shared: must be 1 to 200"):
        plan_from_config({"default": "3/hour", "backend": {"shared": "a/b"}})


def test_a_region_made_for_another_max_keys_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "region"
    shared(path, "3/hour", max_keys=1_000)
    with pytest.raises(ValueError, match=r"max_keys"):
        shared(path, "3/hour", max_keys=2_000)


def test_a_sliding_log_larger_than_the_region_holds_is_refused_at_construction(tmp_path: Path) -> None:
    backend = rk.Shared(path=tmp_path / "region", log_entries=100)
    with pytest.raises(ValueError, match=r"log_entries: a sliding_log limit of 500 needs 500 log entries"):
        rk.Limiter("500/hour", algorithm="sliding_log", backend=backend, max_keys=1_000)
    # By default the region's pool holds 16,384 entries, whatever the rules: one key may take them all.
    lim = shared(tmp_path / "other", "16000/hour", algorithm="sliding_log", max_keys=1_000)
    assert admitted(lim, "alice", 16_100) == 16_000


def test_the_region_is_the_same_size_whatever_the_rules(tmp_path: Path) -> None:
    plain = shared(tmp_path / "plain", "10/hour", max_keys=10_000)
    logged = shared(tmp_path / "logged", "1000/hour", algorithm="sliding_log", max_keys=10_000)
    assert plain.allow("alice")
    assert logged.allow("alice")
    assert (tmp_path / "plain").stat().st_size == (tmp_path / "logged").stat().st_size
    # A deploy that adds a sliding log attaches to the region the old rules made.
    deploy = shared(tmp_path / "plain", "1000/hour", algorithm="sliding_log", max_keys=10_000)
    assert deploy.allow("alice")


def test_a_manual_clock_drives_a_shared_limiter(tmp_path: Path, clock: rk.ManualClock) -> None:
    lim = shared(tmp_path / "region", "2/min", clock=clock)
    assert admitted(lim, "alice", 3) == 2
    clock.advance(30)
    assert admitted(lim, "alice", 2) == 1
    decision = lim.throttle("alice", timeout=60)
    assert decision.allowed
    assert clock.now() == pytest.approx(60.0)


def test_waits_and_permits_go_through_the_region(tmp_path: Path, clock: rk.ManualClock) -> None:
    path = tmp_path / "region"
    rules = [rk.Rule("^/", "g", limits=[rk.Limit("10/hour"), rk.Limit(concurrency=1)])]
    first = shared(path, rules=rules, clock=clock)
    second = shared(path, rules=rules, clock=clock)
    with first.concurrent("alice", "/"):
        # The other limiter (another process) finds the permit taken.
        with pytest.raises(rk.RateLimited) as refused:
            second.concurrent("alice", "/").__enter__()
        assert refused.value.decision.refused_by == "concurrency"
    with second.concurrent("alice", "/") as decision:
        assert decision.allowed

    # A wait reserves its slot in the region; cancelled, it gives the slot back.
    assert admitted(first, "bob", 9, "/") == 9

    async def cancelled_wait() -> None:
        clock.advance(0)
        task = asyncio.ensure_future(first.athrottle("bob", "/", cost=2, timeout=3600))
        await asyncio.sleep(0)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_wait())
    # Given back: the other limiter (another process) finds bob's last slot free.
    assert admitted(second, "bob", 3, "/") == 1


def test_reset_and_update_rule_reach_the_other_limiters(tmp_path: Path) -> None:
    path = tmp_path / "region"
    first, second = shared(path, "2/hour"), shared(path, "2/hour")
    assert admitted(first, "alice", 2) == 2
    assert not second.allow("alice")
    first.reset("alice")
    assert second.allow("alice")
    first.reset()
    assert second.stats()["keys"] == 0


def test_the_file_can_be_removed_while_in_use_and_a_new_one_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "region"
    old = shared(path, "1/hour")
    assert old.allow("alice")
    os.remove(path)
    assert not old.allow("alice")  # the mapping lives on with the limiter
    fresh = shared(path, "1/hour")
    assert fresh.allow("alice")


def test_on_stall_is_checked_named_and_counted(tmp_path: Path) -> None:
    assert rk.Shared(path=tmp_path / "r").on_stall == "allow"
    assert rk.Shared(path=tmp_path / "r", on_stall="deny").on_stall == "deny"
    with pytest.raises(ValueError, match=r"on_stall: must be 'allow' or 'deny', got \"wait\""):
        rk.Shared(path=tmp_path / "r", on_stall="wait")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"on_stall: must be a str, got int"):
        rk.Shared(path=tmp_path / "r", on_stall=1)  # type: ignore[arg-type]
    lim = rk.Limiter("1/hour", max_keys=1_000, backend=rk.Shared(path=tmp_path / "r", on_stall="deny"))
    assert lim.allow("alice")
    shown = lim.stats()["shared"]
    assert shown is not None
    assert shown["stalls"] == 0
