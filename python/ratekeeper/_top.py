"""``python -m ratekeeper top URL``: who a running service is limiting, read from its Prometheus endpoint.

The limiter lives in the service's process; its ``/metrics`` (``RateLimitCollector`` with ``top_refused``)
is what another process can see, so this reads that, parsed by prometheus-client's own parser.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

RESULTS = ("allowed", "delayed", "refused", "exempt")


class ScrapeError(Exception):
    """The endpoint could not be read, or serves no ratekeeper metrics."""


@dataclass
class Scrape:
    """One read of the endpoint: requests by group and result, keys by group, the peers refused most."""

    requests: dict[str, dict[str, float]] = field(default_factory=dict)
    keys: dict[str, float] = field(default_factory=dict)
    top_refused: list[tuple[str, float]] = field(default_factory=list)
    top_refused_error: float | None = None
    at: float = 0.0

    def total(self, result: str) -> float:
        return sum(results.get(result, 0.0) for results in self.requests.values())


def _row(labels: dict[str, str], *known: str) -> str:
    """A series' row name: its group, behind the limiter's name when one endpoint exports several
    (``RateLimitCollector({"edge": a, "api": b})`` labels each series with its limiter: ``edge/login``)."""
    others = [value for name, value in sorted(labels.items()) if name not in known]
    return "/".join([*others, labels["group"]]) if "group" in labels else "/".join(others)


def scrape(url: str, namespace: str = "ratekeeper", timeout: float = 10.0) -> Scrape:
    """Reads ``url`` once; raises :class:`ScrapeError` naming the URL if it cannot."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as error:
        message = (
            "top needs prometheus-client: pip install 'ratekeeper[prometheus]'"
            " (from a checkout: pip install '.[prometheus]')"
        )
        raise ImportError(message) from error
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise ScrapeError(f"cannot read {url}: {getattr(error, 'reason', error)}") from error
    read = Scrape(at=time.monotonic())
    prefix = f"{namespace}_" if namespace else ""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as error:
        raise ScrapeError(f"{url} does not serve Prometheus text: {error}") from error
    for family in families:
        for sample in family.samples:
            name = sample.name.removeprefix(prefix)
            if name == "requests_total":
                group = read.requests.setdefault(_row(sample.labels, "group", "result"), {})
                group[sample.labels["result"]] = sample.value
            elif name == "keys":
                read.keys[_row(sample.labels, "group")] = sample.value
            elif name == "top_refused":
                owner = _row(sample.labels, "peer")
                peer = f"{owner}:{sample.labels['peer']}" if owner else sample.labels["peer"]
                read.top_refused.append((peer, sample.value))
            elif name == "top_refused_error":
                read.top_refused_error = sample.value
    if not read.requests:
        raise ScrapeError(f"{url} serves no {prefix}requests_total: is RateLimitCollector registered there?")
    read.top_refused.sort(key=lambda item: -item[1])
    return read


def render(now: Scrape, before: Scrape | None = None) -> str:
    """A table by group (with refusals per second since ``before``) and the peers refused most."""
    headers = ["group", *RESULTS, "keys"]
    seconds = now.at - before.at if before is not None else 0.0
    if before is not None and seconds > 0:
        headers.append("refused/s")
    rows = []
    for group, results in sorted(now.requests.items()):
        row = [group, *(f"{results.get(result, 0.0):,.0f}" for result in RESULTS), f"{now.keys.get(group, 0):,.0f}"]
        if len(headers) > len(row):
            assert before is not None
            refused_before = before.requests.get(group, {}).get("refused", 0.0)
            row.append(f"{(results.get('refused', 0.0) - refused_before) / seconds:,.1f}")
        rows.append(row)
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
    if now.top_refused:
        bound = f" (each over by at most {now.top_refused_error:,.0f})" if now.top_refused_error else ""
        top = ", ".join(f"{peer} ({count:,.0f})" for peer, count in now.top_refused)
        lines.append(f"refused most{bound}: {top}")
    elif now.total("refused") > 0:
        lines.append("refused most: not exported (RateLimitCollector(..., top_refused=10) exports it)")
    return "\n".join(lines)


def run(url: str, namespace: str, every: float | None, count: int | None) -> int:
    """Prints the table once, or every ``every`` seconds (``count`` times, or until interrupted)."""
    before = None
    done = 0
    try:
        while True:
            now = scrape(url, namespace)
            print(f"{url}\n{render(now, before)}\n", flush=True)
            done += 1
            if every is None or (count is not None and done >= count):
                return 0
            before = now
            time.sleep(every)
    except KeyboardInterrupt:
        return 0
