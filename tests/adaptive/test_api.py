"""rk.Limit(adaptive=...): construction, errors, repr and equality; permits taken and given back with
their samples through Limiter.concurrent and Permit; stats()."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import ratekeeper as rk
from hypothesis import given
from hypothesis import strategies as st


def limiter(limit: rk.Limit, clock: rk.ManualClock) -> rk.Limiter:
    return rk.Limiter(rules=[rk.Rule("/api", "api", limits=[limit])], clock=clock)


def gate(lim: rk.Limiter) -> dict[str, object]:
    adaptive = lim.stats()["groups"]["api"]["adaptive"]
    assert len(adaptive) == 1
    return adaptive[0]


def test_settings_read_back_with_their_defaults() -> None:
    limit = rk.Limit(adaptive="aimd", max_limit=50, per="key")
    assert limit.adaptive == "aimd"
    assert limit.algorithm == "concurrency"
    assert limit.rate is None
    assert limit.concurrency is None
    settings = limit.adaptive_settings
    assert settings is not None
    assert settings["max_limit"] == 50
    assert settings["per"] == "key"
    assert settings["min_limit"] == 1
    assert settings["threshold"] is None
    assert settings["tolerance"] == 0.2
    assert rk.Limit("10/s").adaptive is None
    assert rk.Limit("10/s").adaptive_settings is None


def test_repr_names_what_differs_from_the_defaults_and_equality_is_by_value() -> None:
    assert repr(rk.Limit(adaptive="gradient")) == "Limit(adaptive='gradient')"
    limit = rk.Limit(adaptive="aimd", max_limit=50, threshold=0.25)
    assert repr(limit) == "Limit(adaptive='aimd', max_limit=50, threshold=0.25)"
    assert eval(repr(limit), {"Limit": rk.Limit}) == limit
    assert rk.Limit(adaptive="gradient") != rk.Limit(adaptive="aimd")
    assert rk.Limit(adaptive="gradient", initial=10) == rk.Limit(adaptive="gradient")
    assert rk.Limit(adaptive="aimd", max_limit=5).adaptive_settings["initial"] == 5  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "error", "loc"),
    [
        ({"adaptive": "vegas"}, rk.InvalidValue, "adaptive"),
        ({"adaptive": 3}, rk.InvalidType, "adaptive"),
        ({"adaptive": "aimd", "min_limit": 0}, rk.InvalidValue, "min_limit"),
        ({"adaptive": "aimd", "min_limit": 5, "max_limit": 4}, rk.InvalidValue, "max_limit"),
        ({"adaptive": "aimd", "initial": 2000}, rk.InvalidValue, "initial"),
        ({"adaptive": "aimd", "max_limit": 2**40}, rk.InvalidValue, "max_limit"),
        ({"adaptive": "aimd", "max_limit": 2.5}, rk.InvalidType, "max_limit"),
        ({"adaptive": "aimd", "per": "peer"}, rk.InvalidValue, "per"),
        ({"adaptive": "aimd", "window": 0}, rk.InvalidValue, "window"),
        ({"adaptive": "aimd", "window": "1s"}, rk.InvalidType, "window"),
        ({"adaptive": "aimd", "tolerance": -0.1}, rk.InvalidValue, "tolerance"),
        ({"adaptive": "aimd", "tolerance": True}, rk.InvalidType, "tolerance"),
        ({"adaptive": "aimd", "backoff": 1.0}, rk.InvalidValue, "backoff"),
        ({"adaptive": "aimd", "smoothing": 0}, rk.InvalidValue, "smoothing"),
        ({"adaptive": "aimd", "jitter": 0.9}, rk.InvalidValue, "jitter"),
        ({"adaptive": "aimd", "probe_samples": 0}, rk.InvalidValue, "probe_samples"),
        ({"adaptive": "aimd", "probe_interval": 0.01}, rk.InvalidValue, "probe_interval"),
        ({"adaptive": "aimd", "threshold": -1}, rk.InvalidValue, "threshold"),
        ({"adaptive": "aimd", "concurrency": 5}, rk.InvalidValue, "concurrency"),
        ({"rate": "10/s", "adaptive": "aimd"}, rk.InvalidValue, "rate"),
        ({"rate": "10/s", "min_limit": 3}, rk.InvalidValue, "min_limit"),
    ],
)
def test_bad_settings_name_their_field(kwargs: dict[str, object], error: type[Exception], loc: str) -> None:
    with pytest.raises(error) as raised:
        rk.Limit(**kwargs)  # type: ignore[arg-type]
    assert raised.value.loc == (loc,)  # type: ignore[attr-defined]


def test_a_fresh_limit_probes_at_its_floor_then_opens() -> None:
    clock = rk.ManualClock()
    lim = limiter(rk.Limit(adaptive="aimd", probe_samples=3), clock)
    with lim.concurrent("a", "/api") as decision:
        assert decision.allowed
        assert decision.permits_held
        with pytest.raises(rk.RateLimited) as refused:
            lim.concurrent("b", "/api").__enter__()
        assert refused.value.decision.refused_by == "concurrency"
        assert refused.value.decision.retry_after == 0.0
        assert gate(lim)["in_flight"] == 1
        assert gate(lim)["probing"] is True
        clock.advance(0.02)
    for _ in range(2):
        with lim.concurrent("a", "/api"):
            clock.advance(0.02)
    g = gate(lim)
    assert g["probing"] is False
    assert g["in_flight"] == 0
    assert g["limit"] == 10
    assert g["baseline_latency"] == pytest.approx(0.02)
    assert g["samples"] == 3
    assert g["probes"] == 1
    counted = lim.stats()["groups"]["api"]
    assert counted["refused"] == 1
    assert counted["allowed"] == 3


def test_an_exception_is_a_drop_and_outcomes_can_be_marked() -> None:
    clock = rk.ManualClock()
    lim = limiter(rk.Limit(adaptive="gradient", probe_samples=1), clock)
    with pytest.raises(ZeroDivisionError), lim.concurrent("a", "/api"):
        1 / 0  # noqa: B018
    permit = lim.concurrent("a", "/api")
    with permit:
        permit.mark_timed_out()
    with permit:
        permit.mark_dropped()
    with permit:
        permit.mark_ok()
    g = gate(lim)
    assert (g["drops"], g["timeouts"], g["samples"]) == (2, 1, 4)


def test_a_cancelled_task_gives_its_permit_back_without_a_sample() -> None:
    clock = rk.ManualClock()
    lim = limiter(rk.Limit(adaptive="aimd"), clock)

    async def main() -> None:
        async def hold() -> None:
            async with lim.concurrent("a", "/api"):
                await asyncio.sleep(3600)

        task = asyncio.ensure_future(hold())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    g = gate(lim)
    assert g["in_flight"] == 0
    assert g["samples"] == 0


def test_per_key_limits_are_apart_and_summed_in_stats() -> None:
    clock = rk.ManualClock()
    lim = limiter(rk.Limit(adaptive="aimd", per="key"), clock)
    with lim.concurrent("a", "/api"), lim.concurrent("b", "/api"):
        with pytest.raises(rk.RateLimited):
            lim.concurrent("a", "/api").__enter__()
        g = gate(lim)
        assert g["gates"] == 2
        assert g["in_flight"] == 2
        assert g["per"] == "key"


def test_per_key_gates_stay_within_max_keys_and_a_busy_one_is_never_dropped() -> None:
    """Bounded memory with many keys: past ``max_keys`` the idle gates used longest ago make room (what
    they learned starts over), a gate with a request in flight keeps its permits."""
    clock = rk.ManualClock()
    limit = rk.Limit(adaptive="aimd", per="key", initial=3, probe_samples=1)
    lim = rk.Limiter(rules=[rk.Rule("/api", "api", limits=[limit])], clock=clock, max_keys=1000)
    held = lim.concurrent("held", "/api")
    held.__enter__()
    for i in range(5000):
        clock.advance(0.001)
        with lim.concurrent(f"peer{i}", "/api"):
            pass
        assert gate(lim)["gates"] <= 1000 + 16  # a stripe's share rounds up
    assert gate(lim)["in_flight"] == 1
    with pytest.raises(rk.RateLimited):  # its probe's one permit is still taken
        lim.concurrent("held", "/api").__enter__()
    held.__exit__(None, None, None)
    assert gate(lim)["in_flight"] == 0


def test_a_rate_refusal_gives_the_adaptive_permit_back() -> None:
    clock = rk.ManualClock()
    limits = [rk.Limit("1/min"), rk.Limit(adaptive="aimd", initial=5, probe_samples=1)]
    lim = rk.Limiter(rules=[rk.Rule("/api", "api", limits=limits)], clock=clock)
    with lim.concurrent("a", "/api"):
        pass
    with pytest.raises(rk.RateLimited) as refused:
        lim.concurrent("a", "/api").__enter__()
    assert refused.value.decision.refused_by == "rate"
    assert gate(lim)["in_flight"] == 0


def test_rates_alone_take_no_adaptive_permit_and_reset_forgets_the_gates() -> None:
    clock = rk.ManualClock()
    lim = limiter(rk.Limit(adaptive="aimd"), clock)
    assert all(lim.check("a", "/api").allowed for _ in range(5))
    with lim.concurrent("a", "/api"):
        assert gate(lim)["in_flight"] == 1
    lim.reset()
    assert gate(lim)["samples"] == 0


def test_prometheus_exports_the_adaptive_gauges() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from ratekeeper.prometheus import RateLimitCollector

    clock = rk.ManualClock()
    lim = limiter(rk.Limit(adaptive="gradient", probe_samples=1), clock)
    registry = CollectorRegistry()
    registry.register(RateLimitCollector(lim))
    with lim.concurrent("a", "/api"):
        clock.advance(0.03)
        text = generate_latest(registry).decode()
        assert 'ratekeeper_adaptive_in_flight{controller="gradient",group="api"} 1.0' in text
    text = generate_latest(registry).decode()
    assert 'ratekeeper_adaptive_limit{controller="gradient",group="api"} 10.0' in text
    assert 'ratekeeper_adaptive_baseline_latency_seconds{controller="gradient",group="api"} 0.03' in text
    assert 'ratekeeper_adaptive_samples_total{controller="gradient",group="api"} 1.0' in text
    plain = rk.Limiter("10/s", clock=clock)
    plain_registry = CollectorRegistry()
    plain_registry.register(RateLimitCollector(plain))
    assert "adaptive" not in generate_latest(plain_registry).decode()


def test_a_config_file_takes_an_adaptive_limit(tmp_path: Path) -> None:
    path = tmp_path / "limits.toml"
    path.write_text(
        '[groups.api]\npaths = ["^/api"]\nlimits = ["100/s", { adaptive = "aimd", max_limit = 50, window = 0.2 }]\n'
    )
    lim = rk.Limiter.from_file(path, clock=rk.ManualClock())
    (rule,) = lim.rules
    assert rule.limits[1] == rk.Limit(adaptive="aimd", max_limit=50, window=0.2)
    with lim.concurrent("a", "/api"):
        assert gate(lim)["in_flight"] == 1


@pytest.mark.parametrize(
    ("limit", "loc"),
    [
        ({"adaptive": "aimd", "backoff": 2}, ("groups", "api", "limits", 0, "backoff")),
        ({"adaptive": "tcp"}, ("groups", "api", "limits", 0, "adaptive")),
        ({"adaptive": "aimd", "rate": "1/s"}, ("groups", "api", "limits", 0, "rate")),
        ({"adaptive": "aimd", "speed": 2}, ("groups", "api", "limits", 0)),  # an unknown key: the table
    ],
)
def test_a_bad_adaptive_limit_in_a_config_is_placed(limit: dict[str, object], loc: tuple[object, ...]) -> None:
    with pytest.raises((rk.InvalidValue, rk.InvalidType)) as raised:
        rk.Limiter.from_config({"groups": {"api": {"paths": ["^/api"], "limits": [limit]}}})
    assert raised.value.loc == loc  # type: ignore[union-attr]


def test_an_admission_reports_the_adaptive_permits_left() -> None:
    clock = rk.ManualClock()
    lim = limiter(rk.Limit(adaptive="aimd", probe_samples=1), clock)
    with lim.concurrent("a", "/api"):
        clock.advance(0.01)
    with lim.concurrent("a", "/api") as first, lim.concurrent("b", "/api") as second:
        assert (first.limit, first.remaining) == (10, 9)
        assert (second.limit, second.remaining) == (10, 8)


@given(
    controller=st.sampled_from(["gradient", "aimd"]),
    min_limit=st.integers(1, 50),
    span=st.integers(0, 500),
    per=st.sampled_from(["group", "key"]),
    window=st.floats(0.001, 5.0),
    tolerance=st.floats(0.0, 10.0),
    backoff=st.floats(0.5, 0.99),
    smoothing=st.floats(0.01, 1.0),
    jitter=st.floats(0.0, 0.5),
)
def test_any_valid_settings_read_back_and_repr_round_trips(
    controller: str,
    min_limit: int,
    span: int,
    per: str,
    window: float,
    tolerance: float,
    backoff: float,
    smoothing: float,
    jitter: float,
) -> None:
    limit = rk.Limit(
        adaptive=controller,  # type: ignore[arg-type]
        min_limit=min_limit,
        max_limit=min_limit + span,
        per=per,  # type: ignore[arg-type]
        window=window,
        probe_interval=max(window, 30.0),
        tolerance=tolerance,
        backoff=backoff,
        smoothing=smoothing,
        jitter=jitter,
    )
    assert eval(repr(limit), {"Limit": rk.Limit}) == limit
    settings = limit.adaptive_settings
    assert settings is not None
    assert settings["min_limit"] <= settings["initial"] <= settings["max_limit"]  # type: ignore[operator]
    assert settings["backoff"] == backoff
