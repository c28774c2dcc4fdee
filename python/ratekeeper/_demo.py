"""``python -m ratekeeper demo``: decisions, waits and refusals for a few peers, as readable tables.

Everything runs on a ManualClock, so the demo takes no wall time and prints the same numbers every run.
"""

from __future__ import annotations

import logging
import threading

import ratekeeper as rk

# (peer, path, requests per second it sends): a few kinds of client, mapped onto routing groups.
TRAFFIC = [
    ("alice", "/login", 2.0),  # a script retrying a login: 3/min allowed
    ("bob", "/api/items", 5.0),  # within 10/s
    ("carol", "/api/items", 40.0),  # four times over 10/s
    ("admin", "/api/items", 40.0),  # exempt peer
    ("dave", "/health", 40.0),  # exempt path
    ("erin", "/static/app.js", 40.0),  # no rule: not limited
]
SECONDS = 10
STEP = 0.01


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, sep, *body])


def _traffic() -> str:
    clock = rk.ManualClock()
    lim = rk.Limiter(
        rules=[rk.Rule(r"^/login$", "login", "3/min"), rk.Rule(r"^/api/", "api", "10/s", burst=20)],
        exempt_peers=["admin"],
        exempt_paths=[r"^/health$"],
        clock=clock,
    )
    sent = {peer: 0 for peer, _, _ in TRAFFIC}
    allowed = dict.fromkeys(sent, 0)
    first_refusal: dict[str, rk.Decision] = {}
    due = dict.fromkeys(sent, 0.0)
    for step in range(int(SECONDS / STEP)):
        now = step * STEP
        for peer, path, per_second in TRAFFIC:
            while due[peer] <= now + 1e-9:
                due[peer] += 1.0 / per_second
                sent[peer] += 1
                decision = lim.check(peer, path)
                allowed[peer] += decision.allowed
                if not decision.allowed and peer not in first_refusal:
                    first_refusal[peer] = decision
        clock.advance(STEP)
    rows = []
    for peer, path, per_second in TRAFFIC:
        refusal = first_refusal.get(peer)
        rows.append(
            [
                peer,
                path,
                f"{per_second:g}/s",
                str(sent[peer]),
                str(allowed[peer]),
                str(sent[peer] - allowed[peer]),
                f"{refusal.retry_after:.2f}s" if refusal is not None else "-",
            ]
        )
    headers = ["peer", "path", "sends", "sent", "allowed", "refused", "first retry_after"]
    intro = (
        f"check(): {SECONDS} s of traffic; rules ^/login$ -> 3/min, ^/api/ -> 10/s (burst 20); admin and /health exempt"
    )
    return intro + "\n\n" + _table(headers, rows)


def _waits() -> str:
    clock = rk.ManualClock()
    lim = rk.Limiter("1/s", clock=clock)
    rows = []
    for caller in range(5):
        start = clock.now()
        decision = lim.throttle("worker", timeout=3.5) if caller < 4 else None
        if decision is None:
            try:
                lim.throttle("worker", timeout=0.5)
            except rk.RateLimited as refused:
                result = f"RateLimited (retry_after {refused.retry_after:.1f}s)"
                rows.append([f"#{caller}", f"{start:.1f}s", "-", result])
            continue
        rows.append([f"#{caller}", f"{start:.1f}s", f"{clock.now():.1f}s", "admitted"])
    intro = "throttle(): callers one after another on one key at 1/s; each waits for its slot (#4 has timeout=0.5)"
    return intro + "\n\n" + _table(["caller", "called at", "admitted at", "result"], rows)


def _burst_then_pace() -> str:
    clock = rk.ManualClock()
    lim = rk.Limiter("3/60s", clock=clock)
    rows = []
    for at in [0, 0, 0, 1, 5, 10, 15, 21, 22]:
        clock.advance(at - clock.now())
        d = lim.check("player")
        verdict = "ALLOW" if d.allowed else "REJECT"
        rows.append([f"{at}s", verdict, f"{d.reset_after:.0f}s", f"{d.retry_after:.0f}s" if not d.allowed else "-"])
    intro = (
        "check() at 3 per 60 s (GCRA, the default): 3 at once, then one every 20 s; reset_after is how long\n"
        "until the key has all 3 again, retry_after how long a refused request waits"
    )
    return intro + "\n\n" + _table(["t", "decision", "reset_after", "retry_after"], rows)


PLANS = {"alice": "1/min", "bob": "100/min"}
# The billing service "answers" once the demo has shown the first phase, so every run prints the same.
_BILLING_UP = threading.Event()


def _plan_of(peer: str, group: str) -> str:
    _BILLING_UP.wait(5.0)
    if peer not in PLANS:
        raise LookupError(f"no such account: {peer}")
    return PLANS[peer]


def _quotas() -> str:
    clock = rk.ManualClock()
    rows = []
    logging.getLogger("ratekeeper").setLevel(logging.ERROR)  # mallory's failed fetch is the point here
    with rk.Limiter("60/min", quotas=rk.Quotas(_plan_of, failsafe="2/min"), clock=clock) as lim:
        for phase in ("before the fetch lands", "after it landed"):
            for peer in ("alice", "bob", "mallory"):
                allowed = sum(lim.allow(peer) for _ in range(150))
                info = lim.quota(peer, "default")
                rows.append([phase, peer, str(allowed), str(info.rate), info.source])
            _BILLING_UP.set()
            lim.wait_quotas(timeout=5.0)
    intro = (
        "per-account quotas from a slow billing service: 150 requests per account at once, before and after\n"
        "its quota is fetched; failsafe 2/min; mallory has no account (the provider raises: the failsafe\n"
        "stays, fail open)"
    )
    return intro + "\n\n" + _table(["phase", "peer", "allowed", "quota now", "source"], rows)


# The live section's traffic: (peer, path, requests per second), the flood first.
LIVE_TRAFFIC = [
    ("mallory", "/login", 20.0),  # guessing passwords: 3/min allowed
    ("carol", "/api/items", 40.0),  # four times over 10/s
    ("dave", "/api/items", 15.0),  # a little over
    ("bob", "/api/items", 5.0),  # within
    ("admin", "/api/items", 10.0),  # exempt
]
LIVE_EXEMPT_PEERS = ["admin"]
LIVE_PACE = 0.1  # real seconds per simulated half second, on a terminal: the live table runs about 2 s
LIVE_HEADERS = ["group", "allowed", "delayed", "refused", "exempt", "keys"]


def _figures(lim: rk.Limiter) -> tuple[list[list[str]], list[tuple[str, int]]]:
    """The rows of the metrics table and the peers refused most, from what the Prometheus collector exports."""
    from ratekeeper._metrics import families

    exported = {family.name: family for family in families(lim, top_refused=3)}
    counts: dict[str, dict[str, str]] = {}
    for labels, value in exported["requests"].samples:
        counts.setdefault(labels["group"], {})[labels["result"]] = f"{value:.0f}"
    for labels, value in exported["keys"].samples:
        counts[labels["group"]]["keys"] = f"{value:.0f}"
    rows = [[group, *(c.get(h, "0") for h in LIVE_HEADERS[1:])] for group, c in counts.items()]
    top = [(labels["peer"], int(value)) for labels, value in exported["top_refused"].samples]
    return rows, top


def _live(pace: float) -> tuple[list[list[str]], list[tuple[str, int]]]:
    """Runs the live traffic, calling back every simulated half second; ``pace``: real seconds per half second."""
    clock = rk.ManualClock()
    lim = rk.Limiter(
        rules=[rk.Rule(r"^/login$", "login", "3/min"), rk.Rule(r"^/api/", "api", "10/s", burst=20)],
        exempt_peers=LIVE_EXEMPT_PEERS,
        clock=clock,
    )
    due = {peer: 0.0 for peer, _, _ in LIVE_TRAFFIC}
    view = _LiveView(pace)
    with view:
        for step in range(int(SECONDS / STEP)):
            now = step * STEP
            for peer, path, per_second in LIVE_TRAFFIC:
                while due[peer] <= now + 1e-9:
                    due[peer] += 1.0 / per_second
                    lim.allow(peer, path)
            clock.advance(STEP)
            if (step + 1) % 50 == 0:
                view.show(now + STEP, *_figures(lim))
    return _figures(lim)


class _LiveView:
    """A rich table redrawn in place on a terminal with rich installed, and removed when the traffic ends;
    otherwise nothing. Either way the final figures are then printed once, as a plain table, the same
    every run."""

    def __init__(self, pace: float) -> None:
        self.pace = pace
        self.live: object | None = None
        if pace > 0:
            try:
                from rich.live import Live
            except ImportError:
                return
            self.live = Live(refresh_per_second=20, transient=True)

    def __enter__(self) -> _LiveView:
        if self.live is not None:
            self.live.__enter__()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)  # type: ignore[attr-defined]

    def show(self, at: float, rows: list[list[str]], top: list[tuple[str, int]]) -> None:
        if self.live is None:
            return
        import time

        from rich.table import Table

        table = Table(title=f"ratekeeper metrics, t = {at:.1f} s (simulated)", caption=_top_line(top))
        for header in LIVE_HEADERS:
            table.add_column(header, justify="left" if header == "group" else "right")
        for row in rows:
            table.add_row(*row)
        self.live.update(table)  # type: ignore[attr-defined]
        time.sleep(self.pace)


def _top_line(top: list[tuple[str, int]]) -> str:
    return "refused most: " + ", ".join(f"{peer} ({count})" for peer, count in top)


def _metrics_intro() -> str:
    """Says that this section runs a scenario of its own, and which traffic."""
    by_path: dict[str, list[str]] = {}
    for peer, path, per_second in LIVE_TRAFFIC:
        exempt = " (exempt)" if peer in LIVE_EXEMPT_PEERS else ""
        by_path.setdefault(path, []).append(f"{peer} {per_second:g}/s{exempt}")
    lines = [
        f"  {', '.join(peers[:-1])} and {peers[-1]} to {path}" if len(peers) > 1 else f"  {peers[0]} to {path}"
        for path, peers in by_path.items()
    ]
    return "\n".join(
        [
            f"metrics: another scenario, with traffic and a limiter of its own (the same rules). For {SECONDS} s:",
            *lines,
            "The counts are read as the Prometheus collector exports them (ratekeeper_requests_total by",
            "result, ratekeeper_keys, ratekeeper_top_refused).",
        ]
    )


def _metrics() -> str:
    import sys

    # On a terminal with rich installed a table is redrawn in place as the traffic runs (about 2 s), then
    # removed: the final figures are printed once, below the intro, as on any other output.
    rows, top = _live(pace=LIVE_PACE if sys.stdout.isatty() else 0.0)
    return _table(LIVE_HEADERS, rows) + "\n" + _top_line(top)


def run() -> None:
    print(f"ratekeeper {rk.__version__} demo\n")
    for section in (_traffic, _waits, _burst_then_pace, _quotas):
        print(section(), end="\n\n", flush=True)
    print(_metrics_intro() + "\n", flush=True)  # before the live table, which runs under it
    print(_metrics(), end="\n\n", flush=True)
