"""OpenTelemetry metrics for a limiter: observable instruments, read when the SDK collects.

::

    from opentelemetry import metrics
    from ratekeeper.otel import instrument

    instrument(lim, metrics.get_meter("my-service"))

Needs ``opentelemetry-api`` (``pip install 'ratekeeper[otel]'``) and, to export, an SDK. The names are
the Prometheus collector's in OpenTelemetry's form: ``ratekeeper.requests`` (unit ``{request}``), which a
Prometheus exporter turns back into ``ratekeeper_requests_total``. The OpenTelemetry API has no
asynchronous histogram, so each histogram is exported as two observable counters, its sum
(``ratekeeper.wait.time``, in seconds) and its count (``ratekeeper.wait.count``); the buckets are the
Prometheus collector's alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

try:
    from opentelemetry.metrics import CallbackOptions, Meter, Observation
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("ratekeeper.otel needs opentelemetry-api: pip install 'ratekeeper[otel]'") from error

from ratekeeper._metrics import Family, check_options, families, otel_name

if TYPE_CHECKING:
    from ratekeeper.limiter import Limiter

__all__ = ["instrument"]

# The instruments' callbacks run one after another in one collection: they share one read of the
# limiter rather than each calling stats().
_FRESH_SECONDS = 1.0


class _Snapshot:
    def __init__(self, limiter: Limiter, top_refused: int) -> None:
        self._limiter = limiter
        self._top_refused = top_refused
        self._lock = threading.Lock()
        self._read_at = -_FRESH_SECONDS
        self._families: dict[str, Family] = {}

    def family(self, name: str) -> Family | None:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= _FRESH_SECONDS:
                self._families = {f.name: f for f in families(self._limiter, self._top_refused)}
                self._read_at = now
            return self._families.get(name)


def instrument(limiter: Limiter, meter: Meter, *, namespace: str = "ratekeeper", top_refused: int = 0) -> list[object]:
    """Creates ``limiter``'s observable instruments on ``meter``; returns them.

    Args:
        limiter: the limiter to read (once per collection, by ``stats()``; never per decision).
        meter: from ``opentelemetry.metrics.get_meter(...)`` or an SDK ``MeterProvider``.
        namespace: the names' prefix.
        top_refused: also observe the peers refused most (``ratekeeper.top_refused``, attribute
            ``peer``), at most this many; 0 (default): none.
    """
    check_options(limiter, namespace, top_refused)
    snapshot = _Snapshot(limiter, top_refused)
    instruments: list[object] = []
    for family in families(limiter, top_refused):
        name = otel_name(family.name, namespace)
        if family.kind == "histogram":
            instruments.append(
                meter.create_observable_counter(
                    f"{name}.time", [_histogram(snapshot, family.name, "sum")], "s", f"{family.help} (sum)"
                )
            )
            instruments.append(
                meter.create_observable_counter(
                    f"{name}.count", [_histogram(snapshot, family.name, "count")], "1", f"{family.help} (count)"
                )
            )
        elif family.kind == "counter":
            instruments.append(
                meter.create_observable_counter(name, [_samples(snapshot, family.name)], family.unit, family.help)
            )
        else:
            instruments.append(
                meter.create_observable_gauge(name, [_samples(snapshot, family.name)], family.unit, family.help)
            )
    return instruments


Callback = Callable[[CallbackOptions], Iterable[Observation]]


def _samples(snapshot: _Snapshot, name: str) -> Callback:
    def observe(_: CallbackOptions) -> Iterable[Observation]:
        family = snapshot.family(name)
        return [Observation(value, dict(labels)) for labels, value in family.samples] if family else []

    return observe


def _histogram(snapshot: _Snapshot, name: str, part: Literal["sum", "count"]) -> Callback:
    def observe(_: CallbackOptions) -> Iterable[Observation]:
        family = snapshot.family(name)
        if family is None:
            return []
        return [Observation(histogram[part], dict(labels)) for labels, histogram in family.histograms]

    return observe
