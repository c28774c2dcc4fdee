"""OpenTelemetry metrics for a limiter: observable instruments, read when the SDK collects.

    from opentelemetry import metrics
    from ratekeeper.otel import instrument

    instrument(lim, metrics.get_meter("my-service"))

Several limiters on one meter go through one call, each observed with its name (``limiter="edge"``):

    instrument({"edge": edge, "api": api}, metrics.get_meter("my-service"))

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
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Literal

try:
    from opentelemetry.metrics import CallbackOptions, Meter, Observation
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "ratekeeper.otel needs opentelemetry-api: pip install 'ratekeeper[otel]'"
        " (from a checkout: pip install '.[otel]')"
    ) from error

from ratekeeper._metrics import Family, Source, check_options, families, labelled, otel_name

if TYPE_CHECKING:
    from ratekeeper.limiter import Limiter

__all__ = ["instrument"]

# The instruments' callbacks run one after another in one collection: they share one read of the
# limiters rather than each calling stats().
_FRESH_SECONDS = 1.0

# The namespaces instrumented on each meter. A second call with the same names would be dropped: the SDK
# keeps the first instrument of a name (with a warning) and never calls the second one's callbacks.
_instrumented: weakref.WeakKeyDictionary[Meter, set[str]] = weakref.WeakKeyDictionary()
_instrumenting = threading.Lock()


class _Snapshot:
    def __init__(self, sources: list[Source], top_refused: int) -> None:
        self._sources = sources
        self._top_refused = top_refused
        self._lock = threading.Lock()
        self._read_at = -_FRESH_SECONDS
        self._families: dict[str, Family] = {}

    def read(self) -> list[Family]:
        return labelled(self._sources, lambda limiter: families(limiter, self._top_refused))

    def family(self, name: str) -> Family | None:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= _FRESH_SECONDS:
                self._families = {f.name: f for f in self.read()}
                self._read_at = now
            return self._families.get(name)


def instrument(
    limiter: Limiter | Mapping[str, Limiter],
    meter: Meter,
    *,
    namespace: str = "ratekeeper",
    top_refused: int = 0,
    attribute: str = "limiter",
) -> list[object]:
    """Creates the limiters' observable instruments on ``meter``; returns them.

    A meter holds one instrument of a name, so several limiters are instrumented by one call, each
    observation carrying the limiter's name: ``instrument({"edge": edge, "api": api}, meter)`` observes
    ``ratekeeper.requests`` with ``limiter="edge"`` and with ``limiter="api"``.

    Args:
        limiter: the limiter to read (once per collection, by ``stats()``; never per decision), observed
            without an added attribute; or a mapping of names to limiters, each observed with
            ``attribute=<name>``.
        meter: from ``opentelemetry.metrics.get_meter(...)`` or an SDK ``MeterProvider``.
        namespace: the names' prefix.
        top_refused: also observe the peers refused most (``ratekeeper.top_refused``, attribute
            ``peer``), at most this many per limiter; 0 (default): none.
        attribute: the attribute naming each limiter of a mapping; not ``group``, ``result``, ``peer``.

    Raises:
        ValueError: ``meter`` already has this namespace's instruments (from an earlier call, whose
            instruments the SDK would keep in place of these), or a bad option.
        TypeError: a limiter that is not a Limiter.
    """
    sources = check_options(limiter, namespace, top_refused, attribute, "attribute")
    if not sources:
        raise ValueError("limiter: no limiter to instrument (an empty mapping)")
    snapshot = _Snapshot(sources, top_refused)
    # The families present now name the instruments (a backend's, top_refused's): one read for both.
    present = snapshot.read()
    with _instrumenting:
        try:
            namespaces = _instrumented.setdefault(meter, set())
        except TypeError:  # a meter that takes no weak reference: not tracked
            namespaces = set()
        if namespace in namespaces:
            raise ValueError(
                f"meter: already instrumented with namespace {namespace!r}; instrument several limiters "
                "with one call (instrument({'edge': edge, 'api': api}, meter)), or give each a namespace"
            )
        namespaces.add(namespace)
    instruments: list[object] = []
    for family in present:
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
