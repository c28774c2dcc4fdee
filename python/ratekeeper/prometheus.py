"""Prometheus metrics for a limiter: a custom collector, read at scrape time (no cost per decision).

    from prometheus_client import REGISTRY
    from ratekeeper.prometheus import RateLimitCollector

    REGISTRY.register(RateLimitCollector(lim))

Several limiters go through one collector, each labelled with its name (``limiter="edge"``):

    REGISTRY.register(RateLimitCollector({"edge": edge, "api": api}))

Needs ``prometheus-client`` (``pip install 'ratekeeper[prometheus]'``). Labels are bounded: ``group``,
``result``, and ``limiter`` naming each of several limiters; never the peer or the path, except
``top_refused``'s at most ``top_refused`` series per limiter.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

try:
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "ratekeeper.prometheus needs prometheus-client: pip install 'ratekeeper[prometheus]'"
        " (from a checkout: pip install '.[prometheus]')"
    ) from error

from ratekeeper._metrics import (
    FAMILY_LABELS,
    Family,
    check_options,
    families,
    labelled,
    node_limiter_families,
    source,
)

if TYPE_CHECKING:
    from ratekeeper._outgoing import HostStats
    from ratekeeper._stats import Histogram
    from ratekeeper.limiter import Limiter

__all__ = ["NodeLimiterCollector", "OutgoingCollector", "RateLimitCollector"]


class RateLimitCollector:
    """Exports limiters' numbers at each scrape, from one ``stats()`` call per limiter (which locks one
    shard at a time and never walks the keys).

    A registry takes one collector of these names: several limiters go through one collector, each
    labelled with its name, as ``RateLimitCollector({"edge": edge, "api": api})`` exports
    ``ratekeeper_requests_total{limiter="edge", group=..., result=...}`` and its ``limiter="api"``
    twin. (Two collectors in one registry clash whatever their ``const_labels``: prometheus-client
    checks names, not labels.)

    Args:
        limiter: the limiter to read, exported without a label; or a mapping of names to limiters,
            each limiter's series labelled ``label=<name>``. More can be added with
            [`add`][ratekeeper.prometheus.RateLimitCollector.add].
        label: the label naming each limiter of a mapping (``"limiter"``); not ``group``, ``result``,
            ``peer``, ``le``, which the metrics use.
        namespace: the metric names' prefix (``ratekeeper_requests_total``).
        top_refused: also export the peers refused most (``<namespace>_top_refused{peer=...}``), at most
            this many series per limiter; 0 (default) exports none.
        const_labels: labels added to every series, e.g. ``{"worker": str(os.getpid())}`` to tell
            processes apart when each is scraped on its own.

    Raises:
        TypeError, ValueError: a bad option, naming it (``limiter['api']: must be a ratekeeper.Limiter``).
    """

    def __init__(
        self,
        limiter: Limiter | Mapping[str, Limiter],
        *,
        label: str = "limiter",
        namespace: str = "ratekeeper",
        top_refused: int = 0,
        const_labels: Mapping[str, str] | None = None,
    ) -> None:
        sources = check_options(limiter, namespace, top_refused, label, "label")
        labels = dict(const_labels or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TypeError(f"const_labels: must map str to str, got {const_labels!r}")
        for name in labels:
            if name in FAMILY_LABELS or (name == label and isinstance(limiter, Mapping)):
                raise ValueError(f"const_labels: {name!r} is a label the collector sets itself; choose another")
        self._sources = sources
        # None: built for one limiter, whose series have no label to tell another limiter's apart.
        self._label = label if isinstance(limiter, Mapping) else None
        self._adding = threading.Lock()
        self._namespace = namespace
        self._top_refused = top_refused
        self._const_labels = labels

    def add(self, name: str, limiter: Limiter) -> None:
        """Exports ``limiter`` too, labelled ``label=name``, from the next scrape on.

        Raises:
            ValueError: ``name`` is exported already, or the collector was built for one limiter.
            TypeError: ``limiter`` is not a Limiter.
        """
        if self._label is None:
            raise ValueError(
                "add: this collector was built for one limiter, without a label; build it from a mapping "
                "(RateLimitCollector({'edge': limiter})) to add others"
            )
        added = source(self._label, name, limiter)
        with self._adding:
            if any(labels.get(self._label) == name for labels, _ in self._sources):
                raise ValueError(f"name: {name!r} is already exported by this collector")
            # A new list, not an append: a scrape running now keeps reading the list it took.
            self._sources = [*self._sources, added]

    def _read(self, limiter: Limiter) -> list[Family]:
        return families(limiter, self._top_refused)

    def _families(self) -> list[Family]:
        return labelled(self._sources, self._read)

    def describe(self) -> Iterator[Metric]:
        """The families' names without their samples (what a registry checks for duplicates)."""
        for family in self._families():
            yield self._family(family, with_samples=False)

    def collect(self) -> Iterator[Metric]:
        for family in self._families():
            yield self._family(family, with_samples=True)

    def _family(self, family: Family, *, with_samples: bool) -> Metric:
        name = f"{self._namespace}_{family.name}"
        names = [*self._const_labels, *family.labels]
        const = list(self._const_labels.values())
        if family.kind == "histogram":
            histograms = HistogramMetricFamily(name, family.help, labels=names)
            for labels, histogram in family.histograms if with_samples else ():
                values = const + [labels[k] for k in family.labels]
                histograms.add_metric(values, _cumulative(histogram), histogram["sum"])
            return histograms
        kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
        metric = kind(name, family.help, labels=names)
        for labels, value in family.samples if with_samples else ():
            metric.add_metric(const + [labels[k] for k in family.labels], value)
        return metric


class NodeLimiterCollector(RateLimitCollector):
    """Exports a limiter's numbers under the ``ar_limiter_*`` names that dashboards built for a node
    limiter ([`node_limiter`][ratekeeper.compat.node_limiter]) read:
    ``ar_limiter_requests_total{limiter_id}``, ``ar_limiter_rejected_total``,
    ``ar_limiter_reduce_requests_total``, ``ar_limiter_peers``, ``ar_limiter_tracked_items_total``,
    ``ar_limiter_cleanup_tick_expired_sliding_peers_deleted_total`` and
    ``ar_limiter_response_time_microseconds``; ``limiter_id`` is the group. There are no leaky-tick
    metrics: the leaky bucket here drains lazily, with no timer to tick.
    ``limiter`` and ``label`` work as in [`RateLimitCollector`][ratekeeper.prometheus.RateLimitCollector]: a mapping
    labels each limiter.
    """

    def __init__(
        self,
        limiter: Limiter | Mapping[str, Limiter],
        *,
        label: str = "limiter",
        const_labels: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(limiter, label=label, namespace="ar_limiter", const_labels=const_labels)

    def _read(self, limiter: Limiter) -> list[Family]:
        return node_limiter_families(limiter)


class _CountsCalls(Protocol):
    def stats(self) -> Mapping[str, HostStats]: ...


#: The counters of an outgoing transport's stats(): (metric name, HostStats field, help).
_OUTGOING_COUNTERS = (
    ("outgoing_calls", "calls", "Calls sent to rate-limited servers (a retry is one more)."),
    ("outgoing_waits", "waits", "Calls that waited their turn."),
    ("outgoing_wait_seconds", "waited", "Seconds calls spent waiting, turns and retries."),
    ("outgoing_refused", "refused", "Calls refused with RateLimited, not sent."),
    ("outgoing_throttled", "throttled", "429s (and 503s or 403s with a wait, 403s with a budget spent) received."),
    ("outgoing_retries", "retries", "Calls sent again after a 429."),
)


class OutgoingCollector:
    """Exports the counters of outgoing-call transports (``ratekeeper.httpx``, ``ratekeeper.requests``,
    ``ratekeeper.aiohttp``) at each scrape, from their ``stats()``:

        REGISTRY.register(OutgoingCollector(transport))
        REGISTRY.register(OutgoingCollector(sync_transport, async_transport, adapter))

    A registry takes one collector of these names: give it every transport of the process. A key several of
    them call is one series: their counters added up, and the server's word the latest any of them heard.
    Transports that share an ``Outgoing`` are counted once.

    Series are labelled ``key``: the host, or the host and a fingerprint of the API key (never the key
    itself); the server's last word is ``<namespace>_outgoing_remaining{key, budget}`` and
    ``<namespace>_outgoing_reset_seconds{key, budget}``. The counters are this process's.

    Args:
        outgoing: transports, adapters or middlewares, or the ``Outgoing`` they share.
        namespace: the metric names' prefix (``ratekeeper_outgoing_calls_total``).
        const_labels: labels added to every series.

    Raises:
        TypeError: no transport, or one that is not a transport (a ``Limiter``, say: export it with
            ``RateLimitCollector``).
    """

    def __init__(
        self, *outgoing: _CountsCalls, namespace: str = "ratekeeper", const_labels: Mapping[str, str] | None = None
    ) -> None:
        from ratekeeper._outgoing import Outgoing

        if not outgoing:
            raise TypeError("outgoing: give at least one transport, adapter, middleware or Outgoing")
        engines: dict[int, Outgoing] = {}
        for each in outgoing:
            engine = each if isinstance(each, Outgoing) else getattr(each, "outgoing", None)
            if not isinstance(engine, Outgoing):
                raise TypeError(
                    f"outgoing: must be a transport, adapter, middleware or Outgoing, got {type(each).__name__}"
                )
            engines[id(engine)] = engine
        self._engines, self._namespace = list(engines.values()), namespace
        self._const_labels = dict(const_labels or {})

    def describe(self) -> Iterator[Metric]:
        """The families' names without their samples."""
        yield from self._metrics({})

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics(_merged(engine.stats() for engine in self._engines))

    def _metrics(self, stats: Mapping[str, HostStats]) -> Iterator[Metric]:
        names = [*self._const_labels, "key"]
        const = list(self._const_labels.values())
        for name, field, text in _OUTGOING_COUNTERS:
            counter = CounterMetricFamily(f"{self._namespace}_{name}", text, labels=names)
            for key, counts in stats.items():
                value = counts[field]  # type: ignore[literal-required]
                counter.add_metric([*const, key], float(value))
            yield counter
        for name, field, text in (
            ("outgoing_remaining", "remaining", "What the server last said is left of a budget."),
            ("outgoing_reset_seconds", "reset", "Seconds to a budget's reset, as the server last said."),
        ):
            gauge = GaugeMetricFamily(f"{self._namespace}_{name}", text, labels=[*names, "budget"])
            for key, counts in stats.items():
                budgets: Mapping[str, float] = counts[field]  # type: ignore[literal-required]
                for budget, value in budgets.items():
                    gauge.add_metric([*const, key, budget], float(value))
            yield gauge


def _merged(every: Iterator[Mapping[str, HostStats]]) -> dict[str, HostStats]:
    """Several engines' ``stats()`` as one: each key's counters added up, its server's word the latest heard."""
    merged: dict[str, HostStats] = {}
    for stats in every:
        for key, counts in stats.items():
            seen = merged.get(key)
            if seen is None:
                merged[key] = counts
                continue
            for _, field, _ in _OUTGOING_COUNTERS:
                seen[field] += counts[field]  # type: ignore[literal-required]
            if counts["said_at"] > seen["said_at"]:
                for word in ("dialect", "remaining", "reset", "said_at"):
                    seen[word] = counts[word]
    return merged


def _cumulative(histogram: Histogram) -> list[tuple[str, float]]:
    """Prometheus's buckets: cumulative counts by ``le``, ``+Inf`` last."""
    buckets: list[tuple[str, float]] = []
    running = 0
    bounds = [*(repr(b) for b in histogram["bounds"]), "+Inf"]
    for bound, count in zip(bounds, histogram["counts"], strict=True):
        running += count
        buckets.append((bound, float(running)))
    return buckets
