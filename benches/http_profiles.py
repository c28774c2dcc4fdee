"""The per-account quota experiment over HTTP: wrk against ``python -m ratekeeper serve``, every profile at once.

What is measured
    The server (``ratekeeper/_serve.py``) keys requests by ``X-Account-ID`` and takes each account's quota
    from a provider, with a failsafe of 5/min while a fetch is pending or the provider does not know the
    account. This script starts it on a free loopback port and runs one ``wrk`` per profile, all at the
    same time, for ``--trials`` trials of ``--seconds`` each, one after the other on the same server (a
    longer study would run 4 trials of 1,000 s). ``benches/wrk/profile.lua`` sets
    the header, gives ``invalidN`` a new id on every request, and reports counts and latency percentiles.

    Profiles (``X-Account-ID``):
      alice     alice@example.com, quota 1/min       bob      bob@example.com, quota 100/min
      carol     carol@example.com, quota 1000/min    dave     dave@example.com, quota 10/s
      anonymous no header: decided as ANONYMOUS, 10/min
      invalid   invalid@example.com: the provider raises LookupError; stays on the failsafe (5/min)
      invalidN  a new id on every request: the failsafe admits each (fail open)
      admin     admin@example.com, exempt: the control for the latency comparison

Checks (exit status 1 if one fails)
    Over the whole run (T seconds from the first wrk's start to the last one's end), a limited profile
    with quota q (GCRA: a burst of q's count, then q's rate) is admitted at most
    ``failsafe burst + count(q) + floor(rate(q) * T)``: what the failsafe admitted before the quota landed,
    plus what the quota allows. ``invalid`` at most ``failsafe burst + floor(rate(failsafe) * T)``.
    ``invalidN`` and ``admin`` must have every request admitted. No profile may see socket errors.
    The server's own ``/metrics`` (the Prometheus collector), scraped at the end, must count what wrk
    counted: as many decisions and refusals, give or take the requests in flight when wrk stopped.

Output
    A table on stdout; a TSV (``--out``, one row per trial and profile); two charts (``--charts``) drawn
    with matplotlib: allowed and denied requests per second per profile, and each
    profile's latency distribution per trial against the ``admin`` control.

Usage
    python benches/http_profiles.py                     # 4 trials of 30 s, charts into docs/
    python benches/http_profiles.py --trials 1 --seconds 5 --no-charts
    python benches/http_profiles.py --connections 16 --out /tmp/profiles.tsv --charts /tmp
    python benches/http_profiles.py --quick             # smoke run: 1 trial of 3 s

Needs ``wrk`` (Debian: ``apt-get install wrk``), uvicorn and matplotlib (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import IO

import ratekeeper as rk
from ratekeeper import _serve, _top

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "wrk" / "profile.lua"
PERCENTILES = ("1", "5", "10", "25", "50", "75", "90", "95", "99", "99.9")


@dataclass(frozen=True)
class Profile:
    name: str
    account: str  # what profile.lua is given: an id, "@none" or "@new:<tag>"
    quota: str | None  # the quota the server gives it; None: admitted always (invalidN, admin)
    on_failsafe_only: bool = False


PROFILES = (
    Profile("alice", "alice@example.com", _serve.QUOTAS["alice@example.com"]),
    Profile("bob", "bob@example.com", _serve.QUOTAS["bob@example.com"]),
    Profile("carol", "carol@example.com", _serve.QUOTAS["carol@example.com"]),
    Profile("dave", "dave@example.com", _serve.QUOTAS["dave@example.com"]),
    Profile("anonymous", "@none", _serve.QUOTAS[_serve.ANONYMOUS]),
    Profile("invalid", "invalid@example.com", _serve.FAILSAFE, on_failsafe_only=True),
    Profile("invalidN", "@new", None),
    Profile("admin", _serve.ADMIN, None),
)


@dataclass
class Run:
    """One wrk run: one profile in one trial."""

    trial: int
    profile: Profile
    requests: int
    refused: int
    seconds: float
    socket_errors: int
    mean_ms: float
    max_ms: float
    percentiles_ms: dict[str, float] = field(default_factory=dict)

    @property
    def allowed(self) -> int:
        return self.requests - self.refused


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_server(port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """``python -m ratekeeper serve`` on ``port``, once it answers; its stderr goes to ``log``."""
    command = [sys.executable, "-m", "ratekeeper", "serve", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            log.seek(0)
            raise SystemExit(f"the server exited: {log.read().decode(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise SystemExit("the server did not start listening within 30 s") from None
            time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_wrk(profile: Profile, trial: int, url: str, seconds: int, connections: int) -> subprocess.Popen[str]:
    account = f"@new:{trial}" if profile.account == "@new" else profile.account
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(SCRIPT), url]
    return subprocess.Popen([*command, "--", account], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def parse_result(trial: int, profile: Profile, output: str) -> Run:
    """The ``RESULT {json}`` line profile.lua prints when wrk is done."""
    line = next((line for line in output.splitlines() if line.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"wrk printed no RESULT line for {profile.name}:\n{output}")
    result = json.loads(line.removeprefix("RESULT "))
    return Run(
        trial=trial,
        profile=profile,
        requests=result["requests"],
        refused=result["refused"],
        seconds=result["duration_us"] / 1e6,
        socket_errors=result["socket_errors"],
        mean_ms=result["mean_us"] / 1e3,
        max_ms=result["max_us"] / 1e3,
        percentiles_ms={p: result["percentiles_us"][p] / 1e3 for p in PERCENTILES},
    )


def run_trials(port: int, trials: int, seconds: int, connections: int) -> tuple[list[Run], float]:
    """Every profile's wrk at once, ``trials`` times; returns the runs and the seconds from first to last."""
    url = f"http://127.0.0.1:{port}/"
    runs: list[Run] = []
    started = time.monotonic()
    for trial in range(1, trials + 1):
        processes = [(profile, start_wrk(profile, trial, url, seconds, connections)) for profile in PROFILES]
        for profile, process in processes:
            out, err = process.communicate(timeout=seconds + 60)
            if process.returncode != 0:
                raise SystemExit(f"wrk failed for {profile.name} (exit {process.returncode}): {err}")
            runs.append(parse_result(trial, profile, out))
        print(f"  trial {trial}/{trials} done", file=sys.stderr)
    return runs, time.monotonic() - started


def admissions_bound(profile: Profile, seconds: float) -> int | None:
    """The most ``profile`` may be admitted in ``seconds`` (see the module docstring); None: no bound."""
    if profile.quota is None:
        return None
    failsafe = rk.Rate(_serve.FAILSAFE)
    quota = failsafe if profile.on_failsafe_only else rk.Rate(profile.quota)
    allowance = quota.count + math.floor(Fraction(seconds) * quota.count / Fraction(quota.period))
    return allowance if profile.on_failsafe_only else failsafe.count + allowance


def check(runs: list[Run], seconds: float) -> list[str]:
    """What went wrong, one line each; empty if every check holds."""
    problems = []
    for profile in PROFILES:
        mine = [run for run in runs if run.profile is profile]
        allowed = sum(run.allowed for run in mine)
        requests = sum(run.requests for run in mine)
        errors = sum(run.socket_errors for run in mine)
        if errors:
            problems.append(f"{profile.name}: {errors} socket errors")
        bound = admissions_bound(profile, seconds)
        if bound is None and allowed != requests:
            problems.append(f"{profile.name}: {requests - allowed} of {requests} requests refused; none may be")
        elif bound is not None and allowed > bound:
            problems.append(f"{profile.name}: {allowed} admitted in {seconds:.1f} s, more than the {bound} allowed")
    return problems


def scrape_metrics(port: int) -> _top.Scrape | None:
    """The server's /metrics as ``python -m ratekeeper top`` reads it; None if it serves none."""
    try:
        return _top.scrape(f"http://127.0.0.1:{port}{_serve.METRICS_PATH}")
    except (_top.ScrapeError, ImportError):
        return None


def check_server_view(runs: list[Run], view: _top.Scrape, in_flight: int) -> list[str]:
    """The server counts what wrk counts, give or take the requests in flight when wrk stopped."""
    problems = []
    for what, server, client in (
        ("decisions", sum(view.total(result) for result in _top.RESULTS), sum(run.requests for run in runs)),
        ("refusals", view.total("refused"), sum(run.refused for run in runs)),
    ):
        if not 0 <= server - client <= in_flight:
            problems.append(f"the server's /metrics counts {server:.0f} {what}, wrk {client} (in flight: {in_flight})")
    return problems


def print_server_view(view: _top.Scrape) -> None:
    print(f"\nthe server's /metrics (python -m ratekeeper top):\n{_top.render(view)}")


COLUMNS = ["trial", "profile", "seconds", "requests", "allowed", "denied", "allowed_per_s", "denied_per_s"]
COLUMNS += ["mean_ms", *(f"p{p}_ms" for p in PERCENTILES), "max_ms", "socket_errors"]


def rows(runs: list[Run]) -> list[list[str]]:
    table = []
    for run in runs:
        row = [str(run.trial), run.profile.name, f"{run.seconds:.3f}", str(run.requests), str(run.allowed)]
        row += [str(run.refused), f"{run.allowed / run.seconds:.2f}", f"{run.refused / run.seconds:.2f}"]
        row += [f"{run.mean_ms:.3f}", *(f"{run.percentiles_ms[p]:.3f}" for p in PERCENTILES), f"{run.max_ms:.3f}"]
        table.append([*row, str(run.socket_errors)])
    return table


def write_tsv(path: Path, runs: list[Run]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows(runs))


def print_summary(runs: list[Run], seconds: float) -> None:
    print(f"\n{len({run.trial for run in runs})} trial(s), {seconds:.1f} s in all\n")
    header = "| profile | requests | allowed | denied | allowed/s | denied/s | p50 ms | p99 ms | most allowed |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for profile in PROFILES:
        mine = [run for run in runs if run.profile is profile]
        requests = sum(run.requests for run in mine)
        allowed = sum(run.allowed for run in mine)
        elapsed = sum(run.seconds for run in mine)
        p50 = sorted(run.percentiles_ms["50"] for run in mine)[len(mine) // 2]
        p99 = sorted(run.percentiles_ms["99"] for run in mine)[len(mine) // 2]
        bound = admissions_bound(profile, seconds)
        print(
            f"| {profile.name} | {requests:,} | {allowed:,} | {requests - allowed:,} | {allowed / elapsed:,.2f} "
            f"| {(requests - allowed) / elapsed:,.0f} | {p50:.2f} | {p99:.2f} | {'all' if bound is None else bound} |"
        )


def draw_charts(runs: list[Run], directory: Path) -> list[Path]:
    """Two charts: allow/deny rates per profile, and latency per profile against ``admin``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    names = [profile.name for profile in PROFILES]
    trials = sorted({run.trial for run in runs})

    def per_second(profile: Profile, what: str) -> float:
        mine = [run for run in runs if run.profile is profile]
        count = sum(run.allowed if what == "allowed" else run.refused for run in mine)
        return count / sum(run.seconds for run in mine)

    figure, axes = plt.subplots(figsize=(9, 4.5))
    width = 0.4
    for offset, (what, colour) in zip(
        (-width / 2, width / 2), (("allowed", "tab:green"), ("denied", "tab:red")), strict=False
    ):
        values = [per_second(profile, what) for profile in PROFILES]
        positions = [index + offset for index in range(len(PROFILES))]
        bars = axes.bar(positions, [max(value, 1e-3) for value in values], width, label=what, color=colour)
        axes.bar_label(bars, labels=[f"{value:,.3g}" for value in values], fontsize=7, padding=2)
    axes.set_yscale("log")
    axes.set_ylim(bottom=1e-3)
    axes.set_xticks(range(len(PROFILES)), names)
    axes.set_ylabel("requests per second (log scale)")
    axes.set_title("ratekeeper serve under wrk: allowed and denied rate per profile")
    axes.legend()
    figure.tight_layout()
    rates = directory / "http_profiles_rates.png"
    figure.savefig(rates, dpi=110)
    plt.close(figure)

    # Box plots from wrk's percentiles: box p25-p75, line p50, whiskers p1-p99, a dot at p99.9.
    figure, grid = plt.subplots(1, len(trials), figsize=(4.2 * len(trials), 4.5), sharey=True, squeeze=False)
    for axes, trial in zip(grid[0], trials, strict=False):
        mine = {run.profile.name: run for run in runs if run.trial == trial}
        stats = [
            {
                "label": name,
                "q1": mine[name].percentiles_ms["25"],
                "med": mine[name].percentiles_ms["50"],
                "q3": mine[name].percentiles_ms["75"],
                "whislo": mine[name].percentiles_ms["1"],
                "whishi": mine[name].percentiles_ms["99"],
                "fliers": [mine[name].percentiles_ms["99.9"]],
            }
            for name in names
        ]
        boxes = axes.bxp(stats, patch_artist=True, showfliers=True)
        for name, box in zip(names, boxes["boxes"], strict=False):
            box.set_facecolor("lightgrey" if name == "admin" else "tab:blue")
            box.set_alpha(0.8)
        axes.tick_params(axis="x", labelrotation=45)
        axes.set_title(f"trial {trial}")
        axes.grid(True, axis="y", alpha=0.3)
    grid[0][0].set_ylabel("latency, ms")
    figure.suptitle("latency per profile: box p25-p75, whiskers p1-p99, dot p99.9 (admin, grey: exempt control)")
    figure.tight_layout()
    latencies = directory / "http_profiles_latency.png"
    figure.savefig(latencies, dpi=110)
    plt.close(figure)
    return [rates, latencies]


def write_json(args: argparse.Namespace, runs: list[Run], seconds: float, problems: list[str]) -> None:
    """The figures for ``benches/render.py``: per profile, over every trial (latencies: the median trial's)."""
    from machine import describe, uvicorn_http, version, write_results

    profiles = []
    for profile in PROFILES:
        mine = [run for run in runs if run.profile is profile]
        elapsed = sum(run.seconds for run in mine)
        allowed = sum(run.allowed for run in mine)
        requests = sum(run.requests for run in mine)
        profiles.append(
            {
                "profile": profile.name,
                "requests": requests,
                "allowed": allowed,
                "denied": requests - allowed,
                "allowed_per_s": allowed / elapsed,
                "denied_per_s": (requests - allowed) / elapsed,
                "p50_ms": sorted(run.percentiles_ms["50"] for run in mine)[len(mine) // 2],
                "p99_ms": sorted(run.percentiles_ms["99"] for run in mine)[len(mine) // 2],
                "most_allowed": admissions_bound(profile, seconds),
            }
        )
    data = {"profiles": profiles, "seconds": seconds, "problems": problems}
    http = f"python -m ratekeeper serve: uvicorn {version('uvicorn')}, one worker, --http auto ({uvicorn_http()})"
    machine = describe(["uvicorn", "httptools", "prometheus-client"], http=http)
    settings = {"trials": args.trials, "seconds": args.seconds, "connections": args.connections}
    write_results(args.json, "http_profiles", data, machine, **settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4, help="trials, one after the other (default 4)")
    parser.add_argument("--seconds", type=int, default=30, help="seconds per trial (default 30)")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections per profile (default 8)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "http_profiles.tsv", help="the TSV")
    parser.add_argument("--charts", type=Path, default=HERE.parent / "docs", help="directory for the charts")
    parser.add_argument("--no-charts", action="store_true", help="draw no charts")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 trial of 3 s")
    parser.add_argument("--json", type=Path, help="also write the figures and the machine block here (render.py)")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.seconds = 1, 3
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    print(f"{platform.platform()}, {os.cpu_count()} CPUs; ratekeeper {rk.__version__}", file=sys.stderr)
    shape = f"{len(PROFILES)} profiles x {args.connections} connections, {args.trials} x {args.seconds} s"
    print(shape, file=sys.stderr)

    port = free_port()
    with tempfile.TemporaryFile() as log:
        server = start_server(port, log)
        try:
            runs, seconds = run_trials(port, args.trials, args.seconds, args.connections)
            view = scrape_metrics(port)
        finally:
            stop(server)
    write_tsv(args.out, runs)
    print_summary(runs, seconds)
    if view is not None:
        print_server_view(view)
    print(f"\nTSV: {args.out}")
    if not args.no_charts:
        for chart in draw_charts(runs, args.charts):
            print(f"chart: {chart}")
    problems = check(runs, seconds)
    if view is not None:
        problems += check_server_view(runs, view, in_flight=len(PROFILES) * args.connections * args.trials)
    write_json(args, runs, seconds, problems)
    for problem in problems:
        print(f"FAIL {problem}")
    if not problems:
        print("OK every limited profile stayed within its quota; invalidN and admin were never refused")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
