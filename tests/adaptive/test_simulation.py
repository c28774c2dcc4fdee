"""Adaptive limits proved on a simulated service (see ``_sim``), on a ManualClock, through the public API.

The service: ``KNEE`` workers of 10 ms each (± 10 %), queueing past them; 200 closed-loop clients
(10x the knee). Every claim is checked for both controllers with their defaults, over seeds 1, 2, 3:

- settled (10-25 s): the mean limit within ±20 % of the knee; throughput ≥ 90 % of the service's
  maximum (knee / 10 ms); p99 latency of the served requests ≤ 2x the unloaded 10 ms;
- capacity halved at 25 s: the limit's 1 s mean is within ±20 % of the new knee in ≤ 3 s;
- capacity doubled at 40 s: the same in ≤ 5 s (AIMD grows by 1 a 100 ms window: 20 windows);
- light load (4 clients): the limit never passes 3x the clients;
- every request timing out (the service hangs; clients give up after 1 s): the limit is at its floor
  from 10 s on;
- the baseline, re-learned by a probe every 2 s under full load, stays within 10 % of 10 ms (no
  creep, Envoy #11579); learned on a slow service (50 ms) it comes down to the new unloaded latency
  by the next probe (every 10 s here), and the limit settles at the knee again; and
  a service that gets slower for good (10 → 30 ms) has its limit back near the knee within 10 s
  (Envoy #38338: a floor or baseline that never recovers).
"""

from __future__ import annotations

import pytest
import ratekeeper as rk
from _sim import Phase, simulate

KNEE = 20
BASE = 0.01
SEEDS = [1, 2, 3]
CONTROLLERS = ["aimd", "gradient"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("controller", CONTROLLERS)
def test_settles_at_the_knee_and_follows_capacity(controller: str, seed: int) -> None:
    phases = [Phase(0, KNEE), Phase(25, KNEE // 2), Phase(40, KNEE * 2)]
    run = simulate(rk.Limit(adaptive=controller), phases, clients=10 * KNEE, duration=55, seed=seed)
    settled = run.mean_limit(10, 25)
    assert abs(settled - KNEE) <= 0.2 * KNEE, f"settled at {settled}"
    assert run.throughput(10, 25) >= 0.9 * KNEE / BASE
    assert run.p99(10, 25) <= 2 * BASE
    assert run.follow_time(25, KNEE // 2, 40) <= 3.0
    assert run.follow_time(40, KNEE * 2, 55) <= 5.0


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_light_load_does_not_drift_upward(controller: str) -> None:
    run = simulate(rk.Limit(adaptive=controller), [Phase(0, KNEE)], clients=4, duration=60, seed=1)
    assert max(run.limits) <= 12, run.limits


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_every_request_timing_out_takes_the_limit_to_its_floor(controller: str) -> None:
    phases = [Phase(0, KNEE), Phase(2, KNEE, hang=True)]
    run = simulate(rk.Limit(adaptive=controller), phases, clients=10 * KNEE, duration=30, seed=1)
    assert max(run.limits[:20]) > 1, "it had grown first"
    assert set(run.limit_between(10, 30)) == {1}


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_the_baseline_does_not_creep_under_load(controller: str) -> None:
    limit = rk.Limit(adaptive=controller, probe_interval=2.0)
    run = simulate(limit, [Phase(0, KNEE)], clients=10 * KNEE, duration=40, seed=2)
    learned = [b for t, b in zip(run.times, run.baselines, strict=True) if t >= 5]
    assert all(b is not None and abs(b - BASE) <= 0.1 * BASE for b in learned), learned


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_a_baseline_learned_slow_comes_down(controller: str) -> None:
    # The service speeds up at 5 s; the next probe (every 10 s, +-10 %) re-learns the baseline by 11 s.
    phases = [Phase(0, KNEE, base=0.05), Phase(5, KNEE)]
    limit = rk.Limit(adaptive=controller, probe_interval=10.0)
    run = simulate(limit, phases, clients=10 * KNEE, duration=25, seed=3)
    slow = [b for t, b in zip(run.times, run.baselines, strict=True) if 2 <= t < 5]
    assert all(b is not None and b > 0.04 for b in slow), "learned on the slow service first"
    assert abs(run.baselines[-1] - BASE) <= 0.1 * BASE  # type: ignore[operator]
    assert abs(run.mean_limit(12, 25) - KNEE) <= 0.2 * KNEE


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_a_service_slower_for_good_gets_its_limit_back(controller: str) -> None:
    run = simulate(
        rk.Limit(adaptive=controller),
        [Phase(0, KNEE), Phase(10, KNEE, base=0.03)],
        clients=10 * KNEE,
        duration=40,
        seed=1,
    )
    assert run.follow_time(10, KNEE, 40) <= 10.0, run.limits[90:]
    assert abs(run.baselines[-1] - 0.03) <= 0.1 * 0.03  # type: ignore[operator]
