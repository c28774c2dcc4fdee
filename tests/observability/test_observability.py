"""Observability: the Prometheus collector (parsed back with prometheus-client's own parser), the node limiter's
metrics moving as a scripted workload says, consistency under threads, the refused-peers sketch on a Zipf
flood, the OpenTelemetry instruments through the SDK's in-memory reader, and a real scrape of /metrics."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import ratekeeper as rk
from _redis import RedisServer
from _web import Server
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from ratekeeper import _serve
from ratekeeper.otel import instrument
from ratekeeper.prometheus import RateLimitCollector

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(limiter: rk.Limiter, **options: object) -> Samples:
    registry = CollectorRegistry()
    registry.register(RateLimitCollector(limiter, **options))  # type: ignore[arg-type]
    return parse(generate_latest(registry).decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


# --- the node limiter's list, row by row ------------------------------------------------------------------------------


def test_requests_results_waits_reductions_and_keys_move_as_the_workload_says(clock: rk.ManualClock) -> None:
    lim = rk.Limiter(rules=[rk.Rule("^/api", "api", "2/s")], exempt_peers=["admin"], clock=clock)
    assert [lim.check("alice", "/api").allowed for _ in range(3)] == [True, True, False]
    assert lim.check("admin", "/api").allowed
    lim.throttle("alice", "/api", timeout=5.0)  # waits 0.5 s on the manual clock
    assert lim.reduce("alice", "/api")
    s = scrape(lim)
    requests = {
        result: value(s, "ratekeeper_requests_total", group="api", result=result)
        for result in ("allowed", "delayed", "refused", "exempt")
    }
    assert requests == {"allowed": 2, "delayed": 1, "refused": 1, "exempt": 1}
    assert value(s, "ratekeeper_reductions_total", group="api") == 1
    assert value(s, "ratekeeper_keys", group="api") == 1
    assert value(s, "ratekeeper_tracked_keys") == 1
    assert value(s, "ratekeeper_exempt_total") == 1
    assert value(s, "ratekeeper_wait_seconds_count", group="api") == 1
    assert value(s, "ratekeeper_wait_seconds_sum", group="api") == pytest.approx(0.5)
    assert value(s, "ratekeeper_wait_seconds_bucket", group="api", le="0.25") == 0
    assert value(s, "ratekeeper_wait_seconds_bucket", group="api", le="0.5") == 1
    assert value(s, "ratekeeper_wait_seconds_bucket", group="api", le="+Inf") == 1
    assert value(s, "ratekeeper_enabled") == 1
    # No backend: no backend series; no top_refused unless asked.
    assert not {n for n in names(s) if "backend" in n or "top_refused" in n}


def test_a_groups_series_appear_once_they_leave_zero(clock: rk.ManualClock) -> None:
    lim = rk.Limiter(rules=[rk.Rule("^/a", "a", "1/s"), rk.Rule("^/b", "b", "1/s")], clock=clock)
    lim.allow("alice", "/a")
    s = scrape(lim)
    # Every group has its allowed and refused requests and its keys from the start ...
    assert value(s, "ratekeeper_requests_total", group="b", result="refused") == 0
    assert value(s, "ratekeeper_keys", group="b") == 0
    # ... and the rest once they happen.
    assert ("ratekeeper_requests_total", (("group", "a"), ("result", "delayed"))) not in s
    assert not [key for key in s if key[0].startswith("ratekeeper_wait_seconds")]
    lim.throttle("alice", "/a", timeout=5.0)
    s = scrape(lim)
    assert value(s, "ratekeeper_requests_total", group="a", result="delayed") == 1
    assert value(s, "ratekeeper_wait_seconds_count", group="a") == 1
    assert ("ratekeeper_wait_seconds_count", (("group", "b"),)) not in s


def test_a_wait_given_back_stays_in_the_histogram_and_counts_as_abandoned(clock: rk.ManualClock) -> None:
    lim = rk.Limiter("1/s", clock=clock)
    lim.allow("alice")

    async def cancelled_wait() -> None:
        task = asyncio.ensure_future(lim.athrottle("alice", timeout=5.0))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_wait())
    s = scrape(lim)
    # Counters never go down: the wait was granted (delayed, in the histogram) and then given back.
    assert value(s, "ratekeeper_requests_total", group="default", result="delayed") == 1
    assert value(s, "ratekeeper_waits_abandoned_total", group="default") == 1
    assert value(s, "ratekeeper_wait_seconds_count", group="default") == 1
    assert lim.stats()["groups"]["default"]["delayed"] == 0


def test_decision_latency_samples_one_decision_in_64_per_thread(clock: rk.ManualClock) -> None:
    lim = rk.Limiter("1000/s", clock=clock)
    before = value(scrape(lim), "ratekeeper_decision_seconds_count")
    for _ in range(64 * 3):
        lim.allow("alice")
    s = scrape(lim)
    assert value(s, "ratekeeper_decision_seconds_count") == before + 3
    # Decisions in memory take well under a millisecond, even on a busy machine.
    assert value(s, "ratekeeper_decision_seconds_bucket", le="0.001") >= 2


def test_evictions_and_idle_states_dropped_are_counted_apart(clock: rk.ManualClock) -> None:
    lim = rk.Limiter("1/s", max_keys=256, clock=clock)
    for i in range(1000):  # all busy at once: the least used are evicted
        lim.allow(f"burst-{i}")
    evicted = value(scrape(lim), "ratekeeper_evictions_total", group="default")
    assert evicted > 0
    clock.advance(2)  # every state is idle now: room is made by dropping them, not evicting
    for i in range(1000):
        lim.allow(f"later-{i}")
    s = scrape(lim)
    assert value(s, "ratekeeper_idle_dropped_total", group="default") > 0
    assert value(s, "ratekeeper_keys", group="default") <= 256


def test_quota_fetches_and_failures_are_counted(clock: rk.ManualClock) -> None:
    def provider(peer: str, group: str) -> str:
        if peer == "broken":
            raise RuntimeError("the quota service is down")
        raise LookupError(peer)

    with rk.Limiter("10/min", quotas=rk.Quotas(provider, failsafe="5/min"), clock=clock) as lim:
        lim.allow("broken")
        lim.allow("stranger")
        assert lim.wait_quotas(timeout=10)
        s = scrape(lim)
    assert value(s, "ratekeeper_quota_fetches_total", group="default") == 2
    assert value(s, "ratekeeper_quota_failures_total", group="default") == 1
    assert value(s, "ratekeeper_quota_unknown_total", group="default") == 1


def test_a_backend_adds_its_round_trips_errors_and_outages(redis_server: RedisServer, redis_prefix: str) -> None:
    lim = rk.Limiter("100/s", backend=rk.Redis(redis_server.url, prefix=redis_prefix))
    for _ in range(5):
        assert lim.allow("alice")
    s = scrape(lim)
    assert value(s, "ratekeeper_backend_seconds_count") == 5
    assert value(s, "ratekeeper_backend_up") == 1
    assert value(s, "ratekeeper_backend_errors_total") == 0

    down = rk.Limiter("100/s", backend=rk.Redis("redis://127.0.0.1:1/0", timeout=0.05, on_error="allow"))
    assert down.allow("alice")
    assert down.allow("alice")
    s = scrape(down)
    assert value(s, "ratekeeper_backend_up") == 0
    assert value(s, "ratekeeper_backend_errors_total") == 2
    assert value(s, "ratekeeper_backend_outages_total") == 1


# --- the collector's contract ------------------------------------------------------------------------------------


def test_describe_names_every_family_without_reading_samples(clock: rk.ManualClock) -> None:
    lim = rk.Limiter("1/s", clock=clock)
    collector = RateLimitCollector(lim, top_refused=3)
    described = list(collector.describe())
    assert all(not family.samples for family in described)
    assert [f.name for f in described] == [f.name for f in collector.collect()]


def test_labels_are_bounded_and_const_labels_tell_limiters_apart(clock: rk.ManualClock) -> None:
    lim = rk.Limiter("1/s", clock=clock)
    for i in range(100):
        lim.allow(f"peer-{i}")
        lim.allow(f"peer-{i}")
    s = scrape(lim, const_labels={"limiter": "api"}, namespace="edge")
    label_names = {name for _, labels in s for name, _ in labels}
    assert label_names <= {"limiter", "group", "result", "le"}
    assert value(s, "edge_requests_total", limiter="api", group="default", result="refused") == 100
    top = scrape(lim, top_refused=5)
    assert len([key for key in top if key[0] == "ratekeeper_top_refused"]) == 5


@pytest.mark.parametrize(
    ("options", "error", "field"),
    [
        ({"top_refused": -1}, ValueError, "top_refused"),
        ({"top_refused": True}, ValueError, "top_refused"),
        ({"namespace": "rate keeper"}, ValueError, "namespace"),
        ({"const_labels": {"limiter": 1}}, TypeError, "const_labels"),
    ],
)
def test_bad_collector_options_name_the_field(options: dict[str, object], error: type[Exception], field: str) -> None:
    with pytest.raises(error, match=field):
        RateLimitCollector(rk.Limiter("1/s"), **options)  # type: ignore[arg-type]


def test_a_collector_needs_a_limiter() -> None:
    with pytest.raises(
        TypeError, match=r"limiter: must be a ratekeeper\.Limiter or a mapping of names to them, got str"
    ):
        RateLimitCollector("1/s")  # type: ignore[arg-type]


def two_limiters(clock: rk.ManualClock) -> tuple[rk.Limiter, rk.Limiter]:
    """Two limiters with a group of the same name and different numbers: edge refuses 3 of alice's 5 and
    waits once; api refuses 1 of bob's 2 and 1 of carol's 2."""
    edge = rk.Limiter("2/s", clock=clock)
    api = rk.Limiter("1/s", clock=clock)
    for _ in range(5):
        edge.allow("alice")
    edge.throttle("alice", timeout=5.0)  # waits 0.5 s on the manual clock
    for peer in ("bob", "carol"):
        api.allow(peer)
        api.allow(peer)
    return edge, api


def test_two_collectors_in_one_registry_clash_whatever_their_const_labels(clock: rk.ManualClock) -> None:
    # Why several limiters go through one collector: the registry refuses a second collector of the same
    # names (it checks names, not labels).
    edge, api = two_limiters(clock)
    registry = CollectorRegistry()
    registry.register(RateLimitCollector(edge, const_labels={"limiter": "edge"}))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(RateLimitCollector(api, const_labels={"limiter": "api"}))


def test_one_collector_exports_several_limiters_each_labelled(clock: rk.ManualClock) -> None:
    edge, api = two_limiters(clock)
    registry = CollectorRegistry()
    registry.register(
        RateLimitCollector({"edge": edge, "api": api}, label="limiter", top_refused=2, const_labels={"dc": "eu"})
    )
    s = parse(generate_latest(registry).decode())
    for limiter, allowed, delayed, refused in (("edge", 2, 1, 3), ("api", 2, None, 2)):
        for result, expected in (("allowed", allowed), ("delayed", delayed), ("refused", refused)):
            key = (
                "ratekeeper_requests_total",
                (("dc", "eu"), ("group", "default"), ("limiter", limiter), ("result", result)),
            )
            assert s.get(key) == expected, key
    assert value(s, "ratekeeper_keys", dc="eu", limiter="edge", group="default") == 1
    assert value(s, "ratekeeper_keys", dc="eu", limiter="api", group="default") == 2
    assert value(s, "ratekeeper_tracked_keys", dc="eu", limiter="edge") == 1
    assert value(s, "ratekeeper_tracked_keys", dc="eu", limiter="api") == 2
    assert value(s, "ratekeeper_wait_seconds_sum", dc="eu", limiter="edge", group="default") == pytest.approx(0.5)
    assert value(s, "ratekeeper_wait_seconds_bucket", dc="eu", limiter="edge", group="default", le="0.5") == 1
    assert not any(n == "ratekeeper_wait_seconds_count" and ("limiter", "api") in labels for n, labels in s)
    assert value(s, "ratekeeper_top_refused", dc="eu", limiter="edge", peer="alice") == 3
    assert value(s, "ratekeeper_top_refused", dc="eu", limiter="api", peer="bob") == 1
    assert value(s, "ratekeeper_top_refused", dc="eu", limiter="api", peer="carol") == 1
    # Every series of the collector carries the limiter's name: none is left unlabelled or merged.
    assert all(("limiter", "edge") in labels or ("limiter", "api") in labels for _, labels in s)


def test_a_limiter_added_to_a_collector_appears_at_the_next_scrape(clock: rk.ManualClock) -> None:
    edge, api = two_limiters(clock)
    collector = RateLimitCollector({"edge": edge})
    registry = CollectorRegistry()
    registry.register(collector)
    assert not any(("limiter", "api") in labels for _, labels in parse(generate_latest(registry).decode()))
    collector.add("api", api)
    s = parse(generate_latest(registry).decode())
    assert value(s, "ratekeeper_requests_total", limiter="api", group="default", result="refused") == 2
    assert value(s, "ratekeeper_requests_total", limiter="edge", group="default", result="refused") == 3
    with pytest.raises(ValueError, match="name: 'api' is already exported"):
        collector.add("api", edge)
    with pytest.raises(ValueError, match="built for one limiter"):
        RateLimitCollector(edge).add("api", api)


def test_the_node_limiter_collector_labels_several_limiters_too(clock: rk.ManualClock) -> None:
    from ratekeeper.prometheus import NodeLimiterCollector

    edge, api = two_limiters(clock)
    registry = CollectorRegistry()
    registry.register(NodeLimiterCollector({"edge": edge, "api": api}, label="node"))
    s = parse(generate_latest(registry).decode())
    assert value(s, "ar_limiter_rejected_total", node="edge", limiter_id="default") == 3
    assert value(s, "ar_limiter_rejected_total", node="api", limiter_id="default") == 2


@pytest.mark.parametrize(
    ("limiters", "options", "error", "message"),
    [
        ({"edge": None}, {}, TypeError, r"limiter\['edge'\]: must be a ratekeeper\.Limiter, got NoneType"),
        ({1: "lim"}, {}, TypeError, r"limiter: the names must be str, got 1"),
        ({"": "lim"}, {}, ValueError, r"limiter: a name must not be empty"),
        ({"edge": "lim"}, {"label": "group"}, ValueError, r"label: 'group' is a label of the metrics themselves"),
        ({"edge": "lim"}, {"label": "two words"}, ValueError, r"label: must be a label name"),
        ({"edge": "lim"}, {"const_labels": {"limiter": "x"}}, ValueError, r"const_labels: 'limiter' is"),
    ],
)
def test_bad_limiter_mappings_name_the_field(
    limiters: dict[object, object], options: dict[str, object], error: type[Exception], message: str
) -> None:
    lim = rk.Limiter("1/s")
    limiters = {name: lim if given == "lim" else given for name, given in limiters.items()}
    with pytest.raises(error, match=message):
        RateLimitCollector(limiters, **options)  # type: ignore[arg-type]


# --- consistency under threads -----------------------------------------------------------------------------------


def test_counters_add_up_under_8_threads(clock: rk.ManualClock) -> None:
    lim = rk.Limiter(rules=[rk.Rule("^/a", "a", "50/s"), rk.Rule("^/b", "b", "20/s")], clock=clock)
    per_thread = 5_000
    start = threading.Barrier(8)

    def hammer(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            lim.check(f"peer-{(i * 7 + n) % 40}", "/a" if i % 3 else "/b")

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    s = scrape(lim, top_refused=40)
    total = 0.0
    for group in ("a", "b"):
        results = {r: value(s, "ratekeeper_requests_total", group=group, result=r) for r in ("allowed", "refused")}
        stats = lim.stats()["groups"][group]
        assert results == {"allowed": stats["allowed"], "refused": stats["refused"]}
        assert stats["requests"] == stats["allowed"] + stats["refused"]
        total += sum(results.values())
    assert total == 8 * per_thread
    # 40 peers, 16 counters per shard: every refused peer is counted exactly.
    refused_by_peer = sum(v for (name, _), v in s.items() if name == "ratekeeper_top_refused")
    assert refused_by_peer == sum(lim.stats()["groups"][g]["refused"] for g in ("a", "b"))


# --- who is being limited ----------------------------------------------------------------------------------------


def test_the_sketch_finds_the_top_refusers_of_a_zipf_flood_within_its_bound(clock: rk.ManualClock) -> None:
    peers = [f"10.0.{i // 256}.{i % 256}" for i in range(100_000)]
    weights = list(itertools.accumulate(1 / (rank + 1) ** 1.1 for rank in range(len(peers))))
    flood = random.Random(3).choices(peers, cum_weights=weights, k=1_000_000)
    lim = rk.Limiter("1/hour", clock=clock)
    for peer in flood:
        lim.allow(peer)
    sent = Counter(flood)
    refused = {peer: n - 1 for peer, n in sent.items() if n > 1}
    top = lim.top_refused(10)
    error = lim.top_refused_error()
    assert error <= sum(refused.values()) // 16  # far tighter in practice: one shard's refusals / 16
    true_top = sorted(refused, key=lambda p: (-refused[p], p))[:10]
    assert [peer for peer, _ in top] == true_top
    for peer, count in top:
        assert refused[peer] <= count <= refused[peer] + error
    assert lim.top_refused(3, group="default") == top[:3]


def test_top_refused_merges_groups_and_names_a_bad_group(clock: rk.ManualClock) -> None:
    lim = rk.Limiter(rules=[rk.Rule("^/a", "a", "1/min"), rk.Rule("^/b", "b", "1/min")], clock=clock)
    for path, times in (("/a", 4), ("/b", 3)):
        for _ in range(times):
            lim.allow("mallory", path)
            lim.allow("eve", "/a")
    assert lim.top_refused(5) == [("eve", 6), ("mallory", 5)]  # mallory: 3 in a, 2 in b
    assert lim.top_refused(5, group="b") == [("mallory", 2)]
    assert lim.top_refused_error() == 0
    with pytest.raises(rk.InvalidValue, match='group: no group named "c"'):
        lim.top_refused(1, group="c")


# --- OpenTelemetry -----------------------------------------------------------------------------------------------


def otel_points(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = {
                    tuple(sorted((k, str(v)) for k, v in point.attributes.items())): point.value  # type: ignore[union-attr]
                    for point in metric.data.data_points
                }
    return out


def test_the_otel_instruments_report_the_collectors_numbers(clock: rk.ManualClock) -> None:
    lim = rk.Limiter("2/s", clock=clock)
    for _ in range(5):
        lim.allow("alice")
    lim.throttle("alice", timeout=5.0)
    reader = InMemoryMetricReader()
    instrument(lim, MeterProvider(metric_readers=[reader]).get_meter("test"), top_refused=2)
    points = otel_points(reader)
    s = scrape(lim)
    for result in ("allowed", "delayed", "refused"):
        assert points["ratekeeper.requests"][(("group", "default"), ("result", result))] == value(
            s, "ratekeeper_requests_total", group="default", result=result
        )
    # Nothing was exempt: that series has not appeared, in either export.
    assert (("group", "default"), ("result", "exempt")) not in points["ratekeeper.requests"]
    assert ("ratekeeper_requests_total", (("group", "default"), ("result", "exempt"))) not in s
    assert points["ratekeeper.wait.time"][(("group", "default"),)] == pytest.approx(0.5)
    assert points["ratekeeper.wait.count"][(("group", "default"),)] == 1
    assert points["ratekeeper.keys"][(("group", "default"),)] == 1
    assert points["ratekeeper.top_refused"] == {(("peer", "alice"),): 3}


def test_instrument_checks_its_arguments() -> None:
    meter = MeterProvider().get_meter("test")
    with pytest.raises(TypeError, match="limiter"):
        instrument("nope", meter)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_refused"):
        instrument(rk.Limiter("1/s"), meter, top_refused=-2)


def test_two_limiters_on_one_meter_are_told_apart_by_an_attribute(clock: rk.ManualClock) -> None:
    edge, api = two_limiters(clock)
    reader = InMemoryMetricReader()
    instrument({"edge": edge, "api": api}, MeterProvider(metric_readers=[reader]).get_meter("test"), top_refused=2)
    points = otel_points(reader)
    requests = points["ratekeeper.requests"]
    for limiter, allowed, refused in (("edge", 2, 3), ("api", 2, 2)):
        assert requests[(("group", "default"), ("limiter", limiter), ("result", "allowed"))] == allowed
        assert requests[(("group", "default"), ("limiter", limiter), ("result", "refused"))] == refused
    assert points["ratekeeper.tracked_keys"] == {(("limiter", "edge"),): 1, (("limiter", "api"),): 2}
    assert points["ratekeeper.wait.time"] == {(("group", "default"), ("limiter", "edge")): pytest.approx(0.5)}
    assert points["ratekeeper.top_refused"][(("limiter", "api"), ("peer", "carol"))] == 1


def test_instrumenting_a_meter_twice_is_refused_as_the_second_would_be_dropped(clock: rk.ManualClock) -> None:
    # The SDK keeps the first instruments of a name and drops the second call's callbacks (with a
    # warning): the second limiter's numbers would never be exported.
    edge, api = two_limiters(clock)
    meter = MeterProvider().get_meter("test")
    instrument(edge, meter)
    with pytest.raises(ValueError, match=r"meter: already instrumented with namespace 'ratekeeper'"):
        instrument(api, meter)
    instrument(api, meter, namespace="api")  # other names: no clash
    instrument(api, MeterProvider().get_meter("test"))  # another meter


def test_instrument_checks_its_limiter_mapping() -> None:
    meter = MeterProvider().get_meter("test")
    with pytest.raises(ValueError, match="limiter: no limiter to instrument"):
        instrument({}, meter)
    with pytest.raises(ValueError, match="attribute: 'peer' is a label of the metrics themselves"):
        instrument({"edge": rk.Limiter("1/s")}, meter, attribute="peer")


# --- a real scrape -----------------------------------------------------------------------------------------------


@pytest.fixture
def served(clock: rk.ManualClock) -> Iterator[tuple[httpx.Client, rk.Limiter]]:
    with _serve.build_limiter(clock=clock) as limiter, Server(_serve.build_app(limiter)) as client:
        yield client, limiter


def test_the_serve_command_serves_its_metrics_over_http(served: tuple[httpx.Client, rk.Limiter]) -> None:
    client, limiter = served
    alice = {_serve.ACCOUNT_HEADER: "alice@example.com"}
    statuses = [client.get("/", headers=alice).status_code for _ in range(8)]
    assert 429 in statuses
    for _ in range(3):  # /metrics itself is never limited
        response = client.get(_serve.METRICS_PATH)
        assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    s = parse(response.text)
    refused = statuses.count(429)
    assert value(s, "ratekeeper_requests_total", group="default", result="refused") == refused
    assert value(s, "ratekeeper_requests_total", group="default", result="allowed") == 8 - refused
    assert value(s, "ratekeeper_top_refused", peer="alice@example.com") == refused
    assert limiter.top_refused(1) == [("alice@example.com", refused)]


# --- the node limiter's own names -------------------------------------------------------------------------------------


def test_the_node_limiter_collector_exports_the_node_limiters_own_names(clock: rk.ManualClock) -> None:
    from ratekeeper.compat import node_limiter
    from ratekeeper.prometheus import NodeLimiterCollector

    lim = node_limiter({"metrics.leaky_limit": 2}, {"^/metrics$": "metrics", "": "general"}, clock=clock)
    for peer in ("a", "b"):
        for _ in range(3):
            lim.allow(peer, "/metrics")
    assert lim.reduce("a", "/metrics")
    for _ in range(64):  # at least one decision sampled for the response time
        lim.allow("c", "/info")
    registry = CollectorRegistry()
    registry.register(NodeLimiterCollector(lim))
    s = parse(generate_latest(registry).decode())
    assert value(s, "ar_limiter_requests_total", limiter_id="metrics") == 6
    assert value(s, "ar_limiter_rejected_total", limiter_id="metrics") == 2
    assert value(s, "ar_limiter_reduce_requests_total", limiter_id="metrics") == 1
    # Two peers, each with one state here (the leaky bucket: no sliding window by default, and the
    # concurrency gate holds state only while a request is in flight).
    assert value(s, "ar_limiter_peers", limiter_id="metrics") == 2
    assert value(s, "ar_limiter_tracked_items_total", limiter_id="metrics") == 2
    assert ("ar_limiter_response_time_microseconds_bucket", (("le", "0.1"),)) in s  # microseconds: 100 ns
    assert value(s, "ar_limiter_requests_total", limiter_id="general") == 64
    assert value(s, "ar_limiter_response_time_microseconds_count") >= 1
    assert value(s, "ar_limiter_cleanup_tick_expired_sliding_peers_deleted_total", limiter_id="general") == 0
