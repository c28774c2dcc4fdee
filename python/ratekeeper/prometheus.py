"""Prometheus metrics for a limiter: a custom collector, read at scrape time (no cost per decision).

::

    from prometheus_client import REGISTRY
    from ratekeeper.prometheus import RateLimitCollector

    REGISTRY.register(RateLimitCollector(lim))

Needs ``prometheus-client`` (``pip install 'ratekeeper[prometheus]'``). Labels are bounded: ``group``,
``result``; never the peer or the path, except ``top_refused``'s at most ``top_refused`` series.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

try:
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("ratekeeper.prometheus needs prometheus-client: pip install 'ratekeeper[prometheus]'") from error

from ratekeeper._metrics import Family, check_options, families, node_limiter_families

if TYPE_CHECKING:
    from ratekeeper._stats import Histogram
    from ratekeeper.limiter import Limiter

__all__ = ["NodeLimiterCollector", "RateLimitCollector"]


class RateLimitCollector:
    """Exports ``limiter``'s numbers at each scrape, from one ``stats()`` call (which locks one shard at a
    time and never walks the keys).

    Args:
        limiter: the limiter to read.
        namespace: the metric names' prefix (``ratekeeper_requests_total``).
        top_refused: also export the peers refused most (``<namespace>_top_refused{peer=...}``), at most
            this many series; 0 (default) exports none.
        const_labels: labels added to every series, e.g. ``{"limiter": "api"}`` to tell two limiters
            apart in one registry.
    """

    def __init__(
        self,
        limiter: Limiter,
        *,
        namespace: str = "ratekeeper",
        top_refused: int = 0,
        const_labels: dict[str, str] | None = None,
    ) -> None:
        check_options(limiter, namespace, top_refused)
        labels = dict(const_labels or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TypeError(f"const_labels: must map str to str, got {const_labels!r}")
        self._limiter = limiter
        self._namespace = namespace
        self._top_refused = top_refused
        self._const_labels = labels

    def _families(self) -> list[Family]:
        return families(self._limiter, self._top_refused)

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
    """Seed 003's own metric names, for dashboards built on the Arweave node's limiter:
    ``ar_limiter_requests_total{limiter_id}``, ``ar_limiter_rejected_total``,
    ``ar_limiter_reduce_requests_total``, ``ar_limiter_peers``, ``ar_limiter_tracked_items_total``,
    ``ar_limiter_cleanup_tick_expired_sliding_peers_deleted_total`` and
    ``ar_limiter_response_time_microseconds``; ``limiter_id`` is the group. The seed's leaky-tick
    metrics have no counterpart: the leaky bucket here drains lazily, with no timer to tick.
    """

    def __init__(self, limiter: Limiter, *, const_labels: dict[str, str] | None = None) -> None:
        super().__init__(limiter, namespace="ar_limiter", const_labels=const_labels)

    def _families(self) -> list[Family]:
        return node_limiter_families(self._limiter)


def _cumulative(histogram: Histogram) -> list[tuple[str, float]]:
    """Prometheus's buckets: cumulative counts by ``le``, ``+Inf`` last."""
    buckets: list[tuple[str, float]] = []
    running = 0
    bounds = [*(repr(b) for b in histogram["bounds"]), "+Inf"]
    for bound, count in zip(bounds, histogram["counts"], strict=True):
        running += count
        buckets.append((bound, float(running)))
    return buckets
