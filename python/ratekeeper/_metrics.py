"""The limiter's numbers as metric families, read from one [`stats`][ratekeeper.Limiter.stats] call: what the
Prometheus collector and the OpenTelemetry instruments both export, so the two cannot drift apart.

A group's series are present from its first decision for ``requests`` (allowed and refused) and ``keys``;
the others appear once they leave zero, as a labelled child of a prometheus-client metric does once it is
first used. A scrape then grows with what happened, not with every possible series of every group: each
sample costs prometheus-client about 8 µs to build and format.

Names are given without the namespace and in Prometheus form (``wait_seconds``; counters without
``_total``, which the exporters add); ``otel_name`` gives the OpenTelemetry form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ratekeeper._stats import AdaptiveStats, GroupStats, Histogram, Stats
    from ratekeeper.limiter import Limiter

__all__ = [
    "FAMILY_LABELS",
    "Family",
    "Source",
    "check_label",
    "check_limiter",
    "check_options",
    "families",
    "labelled",
    "node_limiter_families",
    "otel_name",
    "source",
]

Kind = Literal["counter", "gauge", "histogram"]
Labels = dict[str, str]
GroupNumber = Literal[
    "abandoned", "reductions", "keys", "evictions", "dropped", "quota_fetches", "quota_failures", "quota_unknown"
]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric: its samples (counters, gauges) or histograms, each with its labels."""

    name: str
    kind: Kind
    help: str
    #: UCUM, as OpenTelemetry wants it: ``s``, ``By``, ``{request}``.
    unit: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    histograms: list[tuple[Labels, Histogram]] = field(default_factory=list)


#: Labels of the families themselves: the label telling limiters apart must be another.
FAMILY_LABELS = frozenset({"group", "result", "peer", "le", "limiter_id", "controller"})

#: A limiter to read, with the labels added to each of its samples.
Source = tuple[Labels, "Limiter"]


def check_options(
    limiter: object, namespace: object, top_refused: object, label: object, label_field: str
) -> list[Source]:
    """The options both exporters take, checked alike: a clear error naming the field. Returns the
    limiters to read: a limiter alone, unlabelled; or each of a mapping's, labelled ``{label: name}``."""
    if not isinstance(namespace, str) or not namespace.isidentifier():
        raise ValueError(f"namespace: must be a name prefix like 'ratekeeper', got {namespace!r}")
    if isinstance(top_refused, bool) or not isinstance(top_refused, int) or top_refused < 0:
        raise ValueError(f"top_refused: must be an int of at least 0, got {top_refused!r}")
    label = check_label(label, label_field)
    if not isinstance(limiter, Mapping):
        return [({}, check_limiter(limiter, "limiter", " or a mapping of names to them"))]
    return [source(label, name, named) for name, named in limiter.items()]


def check_label(label: object, field: str) -> str:
    if not isinstance(label, str) or not label.isidentifier() or not label.isascii() or label.startswith("__"):
        raise ValueError(f"{field}: must be a label name like 'limiter', got {label!r}")
    if label in FAMILY_LABELS:
        raise ValueError(f"{field}: {label!r} is a label of the metrics themselves; choose another, like 'limiter'")
    return label


def check_limiter(limiter: object, field: str, alternative: str = "") -> Limiter:
    from ratekeeper.limiter import Limiter

    if not isinstance(limiter, Limiter):
        raise TypeError(f"{field}: must be a ratekeeper.Limiter{alternative}, got {type(limiter).__name__}")
    return limiter


def source(label: str, name: object, limiter: object) -> Source:
    """One limiter of a mapping, labelled with its name; the name and the limiter checked."""
    if not isinstance(name, str):
        raise TypeError(f"limiter: the names must be str, got {name!r}")
    if not name:
        raise ValueError("limiter: a name must not be empty (Prometheus reads an empty label as no label)")
    return {label: name}, check_limiter(limiter, f"limiter[{name!r}]")


def labelled(sources: Sequence[Source], read: Callable[[Limiter], list[Family]]) -> list[Family]:
    """Every source's families, one family per name holding each limiter's samples with its labels: a
    name must come once in an exposition (or on a meter), so limiters share families, told apart by label."""
    if len(sources) == 1 and not sources[0][0]:
        return read(sources[0][1])  # a limiter alone: its families as they are
    out: dict[str, Family] = {}
    for labels, limiter in sources:
        for family in read(limiter):
            merged = out.get(family.name)
            if merged is None:
                merged = Family(family.name, family.kind, family.help, family.unit, (*labels, *family.labels))
                out[family.name] = merged
            merged.samples.extend(({**labels, **own}, value) for own, value in family.samples)
            merged.histograms.extend(({**labels, **own}, histogram) for own, histogram in family.histograms)
    return list(out.values())


def otel_name(name: str, namespace: str) -> str:
    """``wait_seconds`` -> ``ratekeeper.wait``: the namespace dotted, the unit left to the instrument's."""
    for suffix in ("_seconds", "_bytes"):
        name = name.removesuffix(suffix)
    return f"{namespace}.{name}"


def _adaptive_families(groups: Mapping[str, GroupStats]) -> list[Family]:
    """The adaptive limits' gauges, by group and controller (a group's limits of one controller are summed):
    none when no group has one, so that a limiter without them exports what it always did."""
    gates = [(group, a) for group, g in groups.items() for a in g["adaptive"]]
    if not gates:
        return []

    def gauge(name: str, help: str, unit: str, read: Callable[[AdaptiveStats], float | None]) -> Family:
        samples: list[tuple[Labels, float]] = []
        for group, adaptive in gates:
            value = read(adaptive)
            if value is not None:
                samples.append(({"group": group, "controller": adaptive["controller"]}, float(value)))
        return Family(name, "gauge", help, unit, ("group", "controller"), samples)

    def counter(name: str, help: str, read: Callable[[AdaptiveStats], int]) -> Family:
        samples = [({"group": group, "controller": a["controller"]}, float(read(a))) for group, a in gates]
        return Family(name, "counter", help, "{request}", ("group", "controller"), samples)

    return [
        gauge("adaptive_limit", "An adaptive limit's permits now.", "{request}", lambda a: a["limit"]),
        gauge(
            "adaptive_in_flight", "Requests holding an adaptive limit's permits.", "{request}", lambda a: a["in_flight"]
        ),
        gauge(
            "adaptive_baseline_latency_seconds",
            "An adaptive limit's learned unloaded latency (re-learned by its probes).",
            "s",
            lambda a: a["baseline_latency"],
        ),
        gauge(
            "adaptive_recent_latency_seconds",
            "A moving mean of an adaptive limit's recent windows' latency.",
            "s",
            lambda a: a["recent_latency"],
        ),
        counter("adaptive_samples", "Released requests an adaptive limit learned from.", lambda a: a["samples"]),
        counter("adaptive_drops", "Of them, drops (a 5xx, an exception).", lambda a: a["drops"]),
        counter("adaptive_timeouts", "Of them, timeouts.", lambda a: a["timeouts"]),
    ]


def families(limiter: Limiter, top_refused: int = 0) -> list[Family]:
    """Every family, read now; ``top_refused`` > 0 adds the peers refused most (at most that many series)."""
    stats = limiter.stats()
    groups = stats["groups"]

    def per_group(name: str, kind: Kind, unit: str, help: str, key: GroupNumber) -> Family:
        samples: list[tuple[Labels, float]] = [
            ({"group": group}, float(counts[key])) for group, counts in groups.items() if counts[key] or kind == "gauge"
        ]
        return Family(name, kind, help, unit, ("group",), samples)

    requests = Family(
        "requests",
        "counter",
        "Requests decided, by group and result: allowed at once, delayed (a wait was granted), refused, or exempt.",
        "{request}",
        ("group", "result"),
    )
    for group, g in groups.items():
        granted = g["delayed"] + g["abandoned"]
        requests.samples.append(({"group": group, "result": "allowed"}, float(g["allowed"] - granted)))
        if granted:
            requests.samples.append(({"group": group, "result": "delayed"}, float(granted)))
        requests.samples.append(({"group": group, "result": "refused"}, float(g["refused"])))
        if g["exempt"]:
            requests.samples.append(({"group": group, "result": "exempt"}, float(g["exempt"])))
    out = [
        requests,
        per_group(
            "waits_abandoned",
            "counter",
            "{request}",
            "Waits given back before their slot (a timeout, a cancelled task).",
            "abandoned",
        ),
        per_group("reductions", "counter", "{token}", "Tokens given back by reduce().", "reductions"),
        per_group("keys", "gauge", "{key}", "States held: one per (peer, group) and limit.", "keys"),
        per_group(
            "evictions", "counter", "{key}", "States evicted as least used to stay within max_keys.", "evictions"
        ),
        per_group(
            "idle_dropped",
            "counter",
            "{key}",
            "Idle states dropped to make room (a drop never lets a key admit more).",
            "dropped",
        ),
        per_group("quota_fetches", "counter", "{fetch}", "Quota fetches started.", "quota_fetches"),
        per_group(
            "quota_failures",
            "counter",
            "{fetch}",
            "Quota fetches that failed (raised, timed out, answered nonsense).",
            "quota_failures",
        ),
        per_group(
            "quota_unknown",
            "counter",
            "{fetch}",
            "Quota fetches answered 'no such key' (LookupError).",
            "quota_unknown",
        ),
        Family(
            "wait_seconds",
            "histogram",
            "How long each granted wait was (throttle, athrottle, the middleware's delay mode).",
            "s",
            ("group",),
            histograms=[({"group": group}, g["waits"]) for group, g in groups.items() if g["waits"]["count"]],
        ),
        Family(
            "decision_seconds",
            "histogram",
            "Decision latency in this process, sampled: one decision in 64 per thread.",
            "s",
            histograms=[({}, stats["decision_seconds"])],
        ),
        *_limiter_gauges(stats),
        *_adaptive_families(groups),
    ]
    if limiter.backend is not None:
        out += _backend_families(stats)
    if top_refused > 0:
        out += _top_refused(limiter, top_refused)
    return out


def _gauge(name: str, unit: str, help: str, value: float) -> Family:
    return Family(name, "gauge", help, unit, samples=[({}, value)])


def _limiter_gauges(stats: Stats) -> list[Family]:
    return [
        _gauge("enabled", "1", "1 while the limiter decides, 0 while it is off.", float(stats["enabled"])),
        _gauge("tracked_keys", "{key}", "States held in every group.", float(stats["keys"])),
        _gauge("max_keys", "{key}", "The bound on states held.", float(stats["max_keys"])),
        _gauge(
            "memory_bytes", "By", "Approximate heap bytes of the states and their tables.", float(stats["memory_bytes"])
        ),
        Family(
            "exempt",
            "counter",
            "Requests of exempt peers or paths, those that route to no group included.",
            "{request}",
            samples=[({}, float(stats["exempt"]))],
        ),
        _gauge("quota_records", "{record}", "Per-key quota records held.", float(stats["quota_records"])),
        _gauge("quota_queue", "{fetch}", "Quota fetches waiting for a worker.", float(stats["quota_queue"])),
        _gauge("quota_running", "{fetch}", "Quota fetches in a provider now.", float(stats["quota_running"])),
    ]


def _backend_families(stats: Stats) -> list[Family]:
    return [
        Family(
            "backend_errors",
            "counter",
            "Round trips to the backend that failed, each decided by on_error.",
            "{error}",
            samples=[({}, float(stats["backend_errors"]))],
        ),
        Family(
            "backend_outages",
            "counter",
            "Outages begun: a failed round trip after one that succeeded.",
            "{outage}",
            samples=[({}, float(stats["backend_outages"]))],
        ),
        _gauge("backend_up", "1", "0 while the backend's last round trip failed.", float(not stats["backend_down"])),
        Family(
            "backend_seconds",
            "histogram",
            "The backend's round trip per decision.",
            "s",
            histograms=[({}, stats["backend_seconds"])],
        ),
    ]


def _top_refused(limiter: Limiter, n: int) -> list[Family]:
    top = Family(
        "top_refused",
        "gauge",
        f"Refusals of the {n} peers refused most (estimates; see top_refused_error).",
        "{request}",
        ("peer",),
        [({"peer": peer}, float(count)) for peer, count in limiter.top_refused(n)],
    )
    error = _gauge(
        "top_refused_error",
        "{request}",
        "The most a top_refused count may be off by.",
        float(limiter.top_refused_error()),
    )
    return [top, error]


def node_limiter_families(limiter: Limiter) -> list[Family]:
    """The node limiter's ``ar_limiter_*`` metrics (without the namespace), labelled ``limiter_id`` (the group),
    for the dashboards built on them (see [`ratekeeper.compat.node_limiter`][ratekeeper.compat.node_limiter])."""
    stats = limiter.stats()
    groups = stats["groups"]

    def per_group(name: str, kind: Kind, help: str, read: Callable[[GroupStats], int]) -> Family:
        samples = [({"limiter_id": group}, float(read(g))) for group, g in groups.items()]
        return Family(name, kind, help, "", ("limiter_id",), samples)

    latency = stats["decision_seconds"]
    in_microseconds: Histogram = {
        "bounds": [round(bound * 1e6, 6) for bound in latency["bounds"]],
        "counts": latency["counts"],
        "sum": latency["sum"] * 1e6,
        "count": latency["count"],
    }
    return [
        Family(
            "response_time_microseconds",
            "histogram",
            "Time it took for the limiter to respond to requests (sampled: one decision in 64 per thread).",
            "us",
            histograms=[({}, in_microseconds)],
        ),
        per_group(
            "requests",
            "counter",
            "The number of requests the limiter has processed.",
            lambda g: g["requests"] + g["exempt"],
        ),
        per_group("rejected", "counter", "The number of requests the limiter rejected.", lambda g: g["refused"]),
        per_group("reduce_requests", "counter", "Tokens given back by reduce().", lambda g: g["reductions"]),
        per_group(
            "peers",
            "gauge",
            "Peers the limiter tracks now, counted once per state held (one per peer and limit).",
            lambda g: g["keys"],
        ),
        per_group(
            "tracked_items_total",
            "gauge",
            "States tracked: one per peer and limit.",
            lambda g: g["keys"],
        ),
        per_group(
            "cleanup_tick_expired_sliding_peers_deleted",
            "counter",
            "Idle states dropped to make room (no cleanup timer: dropped when room is needed).",
            lambda g: g["dropped"],
        ),
    ]
