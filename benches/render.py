"""Writes the benchmark figures of the docs from the results files: every figure has one source.

The pages mark each generated part with a pair of comments, ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``; what lies between them is replaced by what ``BLOCKS[NAME]`` makes of the results
files (``benches/results/*.json``, written by the scripts through ``benches/run.py``). A pair on one line
is a figure within a sentence. A block whose results file is missing says so instead of showing a figure.
Rendering the committed results again changes nothing (``tests/docs/test_benchmark_figures.py`` checks it),
so the pages always show what the results files hold, each block with the machine it ran on.

Usage
    python benches/render.py                       # rewrite the pages in place from benches/results
    python benches/render.py --check               # exit 1 if a page is not what the results make
    python benches/render.py --results DIR --into OUT   # render DIR's results into copies of the pages in OUT
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
DOCS = ROOT / "docs"
PAGES = (
    DOCS / "benchmarks.md",
    ROOT / "README.md",
    DOCS / "index.md",
    DOCS / "workers-and-machines.md",
    DOCS / "flask.md",
    DOCS / "outgoing-calls.md",
    DOCS / "adaptive-concurrency.md",
)
BLOCK = re.compile(r"<!-- bench:([\w-]+) -->(.*?)<!-- /bench:\1 -->", re.DOTALL)
TIMES = "\N{MULTIPLICATION SIGN}"
MINUS = "\N{MINUS SIGN}"
DASH = "\N{EM DASH}"
EN = "\N{EN DASH}"

Results = dict[str, dict[str, Any]]


class Missing(Exception):
    """A block needs a results file that is not there."""


def load(results: Path) -> Results:
    """Every results file of ``results``, by name (``run.json`` as ``run``)."""
    found: Results = {}
    for path in sorted(results.glob("*.json")):
        found[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    return found


def need(results: Results, *names: str) -> list[dict[str, Any]]:
    for name in names:
        if name not in results:
            raise Missing(name)
    return [results[name] for name in names]


# --- formatting --------------------------------------------------------------------------------------------


def ns(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def number(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def signed(value: float, digits: int = 2) -> str:
    return f"{value:+.{digits}f}".replace("-", MINUS)


def runs(count: int, what: str = "run") -> str:
    return f"{count:,} {what}" + ("" if count == 1 else "s")


def times(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}{TIMES}"


def percent(value: float, base: float, digits: int = 2) -> str:
    """The change from ``base`` to ``value``, signed."""
    change = (value / base - 1) * 100
    return f"{'+' if change >= 0 else MINUS}{abs(change):.{digits}f} %"


def span(values: Iterable[float], fmt: Callable[[float], str]) -> str:
    """``low-high`` of ``values`` (one figure when they agree once formatted)."""
    ordered = sorted(values)
    low, high = fmt(ordered[0]), fmt(ordered[-1])
    return low if low == high else f"{low}{EN}{high}"


def table(header: list[str], align: str, rows: Iterable[list[str]]) -> str:
    """A Markdown table; ``align`` has one letter a column: l(eft) or r(ight)."""
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join(rule)}|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


# How the ratekeeper measured was installed (machine.py's ``installed``), as the machine line says it; results
# written before the machine block said so say nothing.
INSTALLS = {"wheel": ", installed from its wheel", "editable": ", an editable build", "source": ", built from source"}


def at_commit(m: dict[str, Any]) -> str:
    """``ratekeeper at commit `...` ``, with how it was installed when the machine block ``m`` says so."""
    return f"ratekeeper at commit `{m['commit']}`{INSTALLS.get(m.get('install', ''), '')}"


def machine(result: dict[str, Any]) -> str:
    """The line every block ends with: what ran, on what, when."""
    m = result["machine"]
    versions = ", ".join(f"{name} {value}" for name, value in m["versions"].items())
    text = (
        f"Measured by `{result['command']}` on {m['date']}: {m['cpu']}, {m['cores']} cores, {m['kernel']}, "
        f"{m['python']}; {at_commit(m)}; {versions}."
    )
    if "http" in m:
        text += f" HTTP: {m['http']}."
    return f"<sub>{text}</sub>"


def verdicts(result: dict[str, Any]) -> str:
    """A verdict's line: its status (PASS / MISS, or another a script states, e.g. "cannot tell") and text."""
    found = result["data"].get("verdicts", [])
    return "\n".join(f"- {v.get('status') or ('PASS' if v['passed'] else 'MISS')}: {v['text']}" for v in found)


# --- the Rust core (criterion) -------------------------------------------------------------------------------


def core_ns(core: dict[str, Any], bench: str) -> float | None:
    return next((row["median_ns"] for row in core["data"]["rows"] if row["id"] == bench), None)


def core_block(results: Results) -> str:
    (core,) = need(results, "core")

    def cell(*benches: str) -> str:
        values = [core_ns(core, bench) for bench in benches]
        return " / ".join(DASH if v is None else ns(v) for v in values)

    decisions = table(
        ["decision", "ns (criterion's median)"],
        "lr",
        [
            ["GCRA, hot key / 100k keys", cell("decide/gcra/hot_key", "decide/gcra/100k_keys")],
            ["token bucket, hot key / 100k keys", cell("decide/token_bucket/hot_key", "decide/token_bucket/100k_keys")],
            ["GCRA, path routed by 4 rules", cell("decide/gcra/4_rules_path")],
            ["GCRA with the `Decision` report", cell("decide/gcra/check_with_report")],
            [
                "GCRA in a shared region (`rk.Shared`), hot key / 100k keys",
                cell("shared/gcra/hot_key/region", "shared/gcra/100k_keys/region"),
            ],
            [
                "… the same limiter in memory, hot key / 100k keys",
                cell("shared/gcra/hot_key/memory", "shared/gcra/100k_keys/memory"),
            ],
        ],
    )
    threads = []
    for label, bench in (
        ("1 thread, its own hot key", "threads/1_threads_1_keys_each"),
        ("2 threads, each its own hot key", "threads/2_threads_1_keys_each"),
        ("1 thread, 1,000 keys", "threads/1_threads_1000_keys_each"),
        ("2 threads, 1,000 keys each", "threads/2_threads_1000_keys_each"),
    ):
        value = core_ns(core, bench)
        threads.append([label, DASH if value is None else number(value / 1e6, 1)])
    scaling = table(["threads (GCRA, 1M decisions each)", "ms"], "lr", threads)
    return f"{decisions}\n\n{scaling}\n\n{machine(core)} Build: {core['settings']['profile']}."


# --- from Python (compare.py) ------------------------------------------------------------------------------

PEERS = (  # compare.py's library name -> (the page's name, the distribution whose version it shows)
    ("ratekeeper", "**ratekeeper** `allow(peer)`", ""),
    ("dict GCRA (pure Python)", "dict GCRA, 10 lines of pure Python", ""),
    ("token-bucket", "token-bucket {v}", "token-bucket"),
    ("limits FixedWindow", "limits {v} FixedWindow (MemoryStorage)", "limits"),
    ("limits MovingWindow", "limits {v} MovingWindow", "limits"),
    ("throttled-py GCRA", "throttled-py {v} GCRA", "throttled-py"),
    ("pyrate-limiter GCRA", "pyrate-limiter {v} GCRA", "pyrate-limiter"),
)
HOT, KEYS = "hot key", "100k keys"


def compare_ns(compare: dict[str, Any], library: str, scenario: str) -> float | None:
    rows = compare["data"]["rows"]
    return next((r["ns"] for r in rows if r["library"] == library and r["scenario"] == scenario), None)


def ratekeeper_ns(compare: dict[str, Any]) -> tuple[float, float]:
    """ratekeeper's ``allow(peer)`` on a hot key and over 100k keys."""
    hot, many = compare_ns(compare, "ratekeeper", HOT), compare_ns(compare, "ratekeeper", KEYS)
    if hot is None or many is None:
        raise Missing("compare")
    return hot, many


def peer_name(compare: dict[str, Any], library: str) -> str:
    for name, shown, package in PEERS:
        if name == library:
            return shown.format(v=compare["data"]["versions"].get(package, ""))
    return library


def memory_per_key(compare: dict[str, Any]) -> float:
    memory = compare["data"]["memory"]
    return float(memory["rss_growth_bytes"] / memory["keys"])


def compare_block(results: Results) -> str:
    (compare,) = need(results, "compare")
    hot, many = ratekeeper_ns(compare)
    rows = []
    for library, _, _ in PEERS:
        mine = [compare_ns(compare, library, HOT), compare_ns(compare, library, KEYS)]
        if mine == [None, None]:
            continue
        cells = [DASH if v is None else ns(v) for v in mine]
        if library == "ratekeeper":
            rows.append([peer_name(compare, library), *(f"**{c}**" for c in cells), DASH])
            continue
        ratios = [DASH if v is None else times(v / ref) for v, ref in zip(mine, (hot, many), strict=True)]
        rows.append([peer_name(compare, library), *cells, " / ".join(ratios)])
    peers = table(
        ["library", "hot key (ns/call)", "100k keys (ns/call)", "ratekeeper is … faster (hot / 100k)"], "lrrr", rows
    )
    calls = table(
        ["ratekeeper call", "ns/call"],
        "lr",
        [
            [
                "`allow(peer, path)` routed by 4 regex rules",
                ns(compare_ns(compare, "ratekeeper", "allow(peer, path), 4 rules") or 0),
            ],
            ["`check(peer)` (builds a `Decision`)", ns(compare_ns(compare, "ratekeeper", "check(peer), hot key") or 0)],
        ],
    )
    baseline = compare_ns(compare, "dict GCRA (pure Python)", KEYS)
    per_key = memory_per_key(compare)
    at = compare["data"]["memory"]["at_keys"]
    targets = [
        f"- 100,000 keys cost **{times(many / hot, 2)}** a hot key (target ≤ 1.6{TIMES}: "
        f"{'PASS' if many / hot <= 1.6 else 'MISS'})",
    ]
    if baseline is not None:
        targets.append(
            f"- ratekeeper is **{times(baseline / many, 2)}** faster than the dict GCRA over the same keys "
            f"(target ≥ 1.6{TIMES}: {'PASS' if baseline / many >= 1.6 else 'MISS'})"
        )
    targets.append(
        f'- a tracked key takes **{per_key:.1f} bytes** of RSS at {at:,} keys in `Limiter("10/min")` '
        f"(target ≤ 64: {'PASS' if per_key <= 64 else 'MISS'})"
    )
    settings = compare["settings"]
    how = f"Best of {settings['repeats']} runs of about {settings['target_s']:g} s each, loop overhead included."
    return f"{peers}\n\n{calls}\n\n" + "\n".join(targets) + f"\n\n{how} {machine(compare)}"


SLOTS = ("gcra", "token_bucket", "fixed_window", "sliding_window", "leaky_bucket")
STEPPED = "hot key, manual clock +1 µs per call"


def algorithms_block(results: Results) -> str:
    (compare,) = need(results, "compare")
    core = results.get("core")
    python = {(a["algorithm"], a["scenario"]): a["ns"] for a in compare["data"]["algorithms"]}
    rows = []

    def row(label: str, py: float | None, py_base: float | None, rust: float | None, rust_base: float | None) -> None:
        rows.append(
            [
                label,
                DASH if py is None else ns(py),
                DASH if py is None or not py_base else f"{py / py_base:.2f}",
                DASH if rust is None else ns(rust),
                DASH if rust is None or not rust_base else f"{rust / rust_base:.2f}",
            ]
        )

    def rust(bench: str) -> float | None:
        return None if core is None else core_ns(core, bench)

    base_py, base_rust = python.get(("gcra", HOT)), rust("decide/gcra/hot_key")
    for algorithm in SLOTS:
        row(algorithm, python.get((algorithm, HOT)), base_py, rust(f"decide/{algorithm}/hot_key"), base_rust)
    policy = next((v for (a, _), v in python.items() if a.startswith("all policy")), None)
    row("`all` policy, gcra + sliding_window", policy, base_py, rust("decide/all_policy_2_limits/hot_key"), base_rust)
    stepped_py, stepped_rust = python.get(("gcra", STEPPED)), rust("decide_manual_clock/gcra/hot_key")
    for live in (10, 10_000):
        row(
            f"sliding_log, {live:,} live stamps¹",
            python.get(("sliding_log", f"{STEPPED}, {live:,} live stamps")),
            stepped_py,
            rust(f"decide_manual_clock/sliding_log/{live}_live_stamps"),
            stepped_rust,
        )
    out = table(["algorithm", "from Python (ns)", f"{TIMES} GCRA", "Rust core (ns)", f"{TIMES} GCRA"], "lrrrr", rows)
    note = (
        f"¹ On a manual clock moved 1 µs before each call, against GCRA timed the same way (from Python: "
        f"{DASH if stepped_py is None else ns(stepped_py)} ns, a Python closure around the call; in the core: "
        f"{DASH if stepped_rust is None else ns(stepped_rust)} ns)."
    )
    logs = [(a, s, v) for (a, s), v in python.items() if "keys," in s]
    if logs:
        note += " Over 2,000 keys at 10⁶/s (never refused): " + ", ".join(f"{a} {ns(v)} ns" for a, _, v in logs) + "."
    core_line = "" if core is None else f"\n\n{machine(core)}"
    return f"{out}\n\n{note}\n\n{machine(compare)}{core_line}"


# --- metrics ----------------------------------------------------------------------------------------------------


def scrape_block(results: Results) -> str:
    (scrape,) = need(results, "scrape")
    rows = [
        [
            f"{r['states']:,}{', ' + r['case'] if r['case'] else ''}",
            r["read"],
            f"{r['median_ms']:.2f}",
            f"{r['max_ms']:.2f}",
        ]
        for r in scrape["data"]["rows"]
    ]
    groups = scrape["data"]["groups"]
    out = table(["states", "read", "median ms", "max ms"], "llrr", rows)
    runs = scrape["settings"]["runs"]
    return f"{out}\n\n{groups} groups; median and max of {runs} runs. {machine(scrape)}"


# --- web -------------------------------------------------------------------------------------------------------

VARIANTS = {
    "none": "no limiter",
    "fields-only-allowed": "the two fields alone (a bare middleware adds them, no limiter)",
    "ratekeeper-quiet-allowed": "**ratekeeper**, fields on 429s only",
    "ratekeeper-allowed": "**ratekeeper**, fields on every response",
    "ratekeeper-refused": "**ratekeeper**, refused",
    "ratekeeper-shared-allowed": "**ratekeeper**, states in one shared region (`rk.Shared`)",
    "slowapi-allowed": "slowapi, allowed",
    "slowapi-refused": "slowapi, refused",
    "flask-limiter-allowed": "flask-limiter, allowed (memory storage)",
    "flask-limiter-refused": "flask-limiter, refused",
    "django-ratelimit-allowed": "django-ratelimit, allowed",
    "django-ratelimit-refused": "django-ratelimit, refused",
}
FRAMEWORKS = {"fastapi": "FastAPI", "flask": "Flask", "django": "Django"}


def counted(results: Results) -> dict[tuple[str, str], dict[str, Any]]:
    (web,) = need(results, "web_instructions")
    return {(r["framework"], r["variant"]): r for r in web["data"]["rows"]}


def web_instructions_block(results: Results) -> str:
    (web,) = need(results, "web_instructions")
    rows_of = counted(results)
    rows = []
    for (framework, variant), r in rows_of.items():
        none = rows_of.get((framework, "none"))
        floor = rows_of.get((framework, "fields-only-allowed"))
        versus = DASH if none is None or r is none else percent(r["cycles"], none["cycles"])
        if variant == "ratekeeper-allowed" and floor is not None:
            versus += f" (**{percent(r['cycles'], floor['cycles'])}** over the fields alone)"
        elif variant in ("ratekeeper-quiet-allowed", "ratekeeper-refused"):
            versus = f"**{versus}**"
        rows.append(
            [
                FRAMEWORKS[framework],
                VARIANTS.get(variant, variant),
                number(r["instructions"]),
                number(r["l1_misses"]),
                number(r["ll_misses"], 1),
                number(r["cycles"]),
                versus,
                f"{number(r['idle_cycles'])} ({r['idle_cycles'] / r['cycles'] * 100:.1f} %)",
            ]
        )
    out = table(
        [
            "app",
            "case",
            "instructions",
            "L1 misses",
            "LL misses",
            "est. cycles",
            "vs no limiter",
            "idle work subtracted",
        ],
        "llrrrrrr",
        rows,
    )
    s = web["settings"]
    caches = web["data"]["caches"]
    cache_text = ", ".join(f"{name} {size // 1024:,} KiB {ways}-way" for name, (size, ways, _) in caches.items())
    how = (
        f"{s['requests']:,} counted requests a case after {s['warmup']:,}, median of {runs(s['repeat'])}; idle "
        f"interval {s['idle_s']:g} s; simulated caches: {cache_text}, 64-byte lines."
    )
    return f"{out}\n\n{verdicts(web)}\n\n{how} {machine(web)}"


def web_inprocess_block(results: Results) -> str:
    (web,) = need(results, "web_inprocess")
    bare = {r["framework"]: r["us"] for r in web["data"]["rows"] if r["case"] == "bare"}
    rows = []
    for r in web["data"]["rows"]:
        added = DASH if r["case"] == "bare" else signed(r["us"] - bare[r["framework"]])
        rows.append([r["framework"], r["case"].removeprefix("+ "), f"{r['us']:.2f}", added])
    out = table(["app", "case", "µs per request", "µs added"], "llrr", rows)
    s = web["settings"]
    how = f"{s['requests']:,} requests a run, best of {s['repeat']} interleaved runs; no server, no HTTP parser."
    return f"{out}\n\n{verdicts(web)}\n\n{how} {machine(web)}"


def django_inprocess_block(results: Results) -> str:
    (django,) = need(results, "django_inprocess")
    best, median = django["data"]["best_us"], django["data"]["median_us"]
    none = best["none"]
    rows = [
        [
            variant,
            f"{us:.1f} ({median[variant]:.1f})",
            DASH if variant == "none" else signed(us - none, 1),
            DASH if variant == "none" else percent(none, us, 1),
        ]
        for variant, us in best.items()
    ]
    out = table(["variant", "µs per request, best (median)", "µs added", "requests/s vs none"], "lrrr", rows)
    s = django["settings"]
    how = (
        f"Best of {s['rounds']} interleaved loops of {s['calls']:,} requests; the WSGI app called directly, no server."
    )
    return f"{out}\n\n{verdicts(django)}\n\n{how} {machine(django)}"


def http_bench_block(results: Results) -> str:
    (http,) = need(results, "http_bench")
    rows_of = {(r["framework"], r["variant"], r["workers"]): r for r in http["data"]["rows"]}
    rows = []
    for (framework, variant, workers), r in rows_of.items():
        base = rows_of.get((framework, "none", workers))
        if base is None and workers > 1:
            base = rows_of.get((framework, "ratekeeper-allowed", workers))
        versus = DASH if base is None or base is r else percent(r["median"], base["median"], 1)
        if workers > 1 and base is not None and base is not r:
            versus += " (against each worker's own memory)"
        label = VARIANTS.get(variant, variant) + (f", {workers} workers" if workers > 1 else "")
        rows.append(
            [
                FRAMEWORKS[framework],
                label,
                number(r["median"]),
                span(r["runs"], number),
                versus,
                f"{r['p99_ms']:.1f}",
            ]
        )
    out = table(["app", "case", "req/s (median)", "runs", "vs no limiter", "p99 ms"], "llrrrr", rows)
    s = http["settings"]
    how = (
        f"wrk -t1 -c{s['connections']}, {runs(s['runs'])} of {s['seconds']} s a case after 1 s of warm-up, interleaved"
        + ("; the server on one CPU, wrk on the other" if s.get("pinned") else "")
        + "."
    )
    return f"{out}\n\n{verdicts(http)}\n\n{how} {machine(http)}"


def http_profiles_block(results: Results) -> str:
    (profiles,) = need(results, "http_profiles")
    found = profiles["data"]["profiles"]
    counts = table(
        ["profile", "requests", "allowed", "denied", "most allowed"],
        "lrrrr",
        [
            [
                p["profile"],
                number(p["requests"]),
                number(p["allowed"]),
                number(p["denied"]),
                "all" if p["most_allowed"] is None else number(p["most_allowed"]),
            ]
            for p in found
        ],
    )
    rates = table(
        ["profile", "allowed/s", "denied/s", "p50 ms", "p99 ms"],
        "lrrrr",
        [
            [
                p["profile"],
                number(p["allowed_per_s"], 2),
                number(p["denied_per_s"]),
                f"{p['p50_ms']:.2f}",
                f"{p['p99_ms']:.2f}",
            ]
            for p in found
        ],
    )
    s = profiles["settings"]
    problems = profiles["data"]["problems"]
    verdict = "every check held" if not problems else "checks failed: " + "; ".join(problems)
    how = (
        f"{runs(s['trials'], 'trial')} of {s['seconds']} s, {s['connections']} wrk connections per profile, all 8 "
        f"profiles at once on one worker: {verdict}."
    )
    return f"{counts}\n\n{rates}\n\n{how} {machine(profiles)}"


# --- the shared store -------------------------------------------------------------------------------------------


def scaling(shared: dict[str, Any], backend: str, processes: int) -> float:
    return float(
        next(r["per_s"] for r in shared["data"]["scaling"] if (r["backend"], r["processes"]) == (backend, processes))
    )


def pyrate_speedup(shared: dict[str, Any]) -> float | None:
    log = shared["data"]["pyrate_ns"].get("pyrate MultiprocessBucket")
    return None if log is None else float(log / shared["data"]["hot_ns"]["shared"])


def shared_block(results: Results) -> str:
    (shared,) = need(results, "shared")
    d = shared["data"]
    hot, keys = d["hot_ns"], d["keys_ns"]
    exact = d["exact"]
    rows = [
        ["`allow(peer)`, hot key (ns)", ns(hot["memory"]), ns(hot["shared"]), times(hot["shared"] / hot["memory"], 2)],
        [
            f"`allow(peer)`, {d['keys']:,} keys, warmed (ns)",
            ns(keys["memory"]),
            ns(keys["shared"]),
            times(keys["shared"] / keys["memory"], 2),
        ],
        [
            f"1 process, {d['process_keys']:,} keys of its own (decisions/s)",
            number(scaling(shared, "memory", 1)),
            number(scaling(shared, "shared", 1)),
            "",
        ],
        [
            f"2 processes together, {d['process_keys']:,} keys each (decisions/s)",
            number(scaling(shared, "memory", 2)),
            number(scaling(shared, "shared", 2)),
            f"{times(scaling(shared, 'shared', 2) / scaling(shared, 'shared', 1), 2)} one process "
            f"(memory: {times(scaling(shared, 'memory', 2) / scaling(shared, 'memory', 1), 2)})",
        ],
        [
            f"2 processes, one key limited to {exact['limit']:,} per 365 days, 2 {TIMES} {exact['attempts_each']:,} "
            "attempts (decisions/s)",
            "",
            number(exact["per_s"]),
            f"exactly {exact['limit']:,} admitted in every run",
        ],
    ]
    for name, value in d["pyrate_ns"].items():
        rows.append(
            [
                f"{name.replace('pyrate ', 'pyrate-limiter ')}, hot key (decisions/s)",
                "",
                number(1e9 / hot["shared"]),
                f"{number(1e9 / value)} decisions/s: ratekeeper {times(value / hot['shared'], 0)} faster",
            ]
        )
    rows.append([f"the region file for max_keys={d['max_keys']:,}", "", f"{d['region_bytes'] / 1e6:.1f} MB", ""])
    out = table(["scenario", "memory", "shared", "ratio"], "lrrl", rows)
    s = shared["settings"]
    how = (
        f"Best of {s['repeats']} interleaved runs; processes started with `{s['start_method']}`, as "
        "`uvicorn --workers` starts them."
    )
    return f"{out}\n\n{how} {machine(shared)}"


# --- Redis ------------------------------------------------------------------------------------------------------


def versus_ping(row: dict[str, Any], blocking: list[dict[str, Any]], ping: float) -> str:
    """A round trip against PING's; sync mode, which decides in memory, against the in-memory ``allow``."""
    memory = next((r["median_us"] for r in blocking if r["name"] == "ratekeeper memory"), None)
    if row["name"] == "ratekeeper memory":
        return "(the reference of sync mode)"
    if row["name"] == "ratekeeper sync" and memory:
        return f"{times(row['median_us'] / memory, 2)} the in-memory `allow`"
    return times(row["median_us"] / ping, 2)


def redis_block(results: Results) -> str:
    (redis,) = need(results, "redis")
    d = redis["data"]
    ping = next(r["median_us"] for r in d["blocking"] if "PING" in r["name"])
    blocking = table(
        ["one caller, blocking", "µs per decision (median)", "min", "vs a redis-py `PING`"],
        "lrrr",
        [
            [
                f"**{r['name']}**" if r["name"].startswith("ratekeeper") else r["name"],
                number(r["median_us"], 1 if r["median_us"] >= 1 else 3),
                number(r["min_us"], 1 if r["min_us"] >= 1 else 3),
                versus_ping(r, d["blocking"], ping),
            ]
            for r in d["blocking"]
        ],
    )
    concurrent = table(
        [f"{d['tasks']} asyncio callers on one loop", "decisions/s (median)", "max"],
        "lrr",
        [
            [
                f"**{r['name']}**" if r["name"].startswith("ratekeeper") else r["name"],
                number(r["median_per_s"]),
                number(r["max_per_s"]),
            ]
            for r in d["concurrent"]
        ],
    )
    server = table(
        ["server time per decision", "script µs", "main thread CPU µs"],
        "lrr",
        [[r["name"], f"{r['script_us']:.1f}", f"{r['cpu_us']:.1f}"] for r in d["server_time"]],
    )
    s = redis["settings"]
    how = f"{runs(s['runs'])} of {s['calls']:,} calls a case, interleaved, medians; client and server share the cores."
    notes = "".join(f"\n- {note}" for note in d.get("notes", []))
    return f"{blocking}\n\n{concurrent}\n\n{server}\n\n{verdicts(redis)}{notes}\n\n{how} {machine(redis)}"


# --- Redis modes (redis_modes.py, the modes part of redis_bench.py) ------------------------------------------


def redis_modes(results: Results) -> tuple[dict[str, Any], dict[str, Any]]:
    """The modes part's figures, and the results they come with: the part's own command and machine when it
    ran alone (``--modes-only``, merged into ``redis.json``), else the run's."""
    (redis,) = need(results, "redis")
    modes = redis["data"].get("modes")
    if modes is None:
        raise Missing("redis")
    source = {
        "command": modes.get("command", redis["command"]),
        "machine": modes.get("machine", redis["machine"]),
    }
    return modes, source


def keys_scenario(scenario: str) -> str:
    """``"100000 keys"`` as ``"100,000 keys"``."""
    count, _, rest = scenario.partition(" ")
    return f"{int(count):,} {rest}" if count.isdigit() else scenario


def demand_cell(demand: int | None) -> str:
    return "as fast as it can" if demand is None else f"{demand:,}/s"


def minus(text: str) -> str:
    return text.replace("-", MINUS)


def trips(value: float) -> str:
    """Round trips per 1,000 decisions: whole when there are many (or none)."""
    return number(value) if value >= 10 or value == 0 else f"{value:.2f}"


def versus_memory(value: float) -> str:
    return times(value, 2 if value >= 0.1 else 3)


def modes_speed(modes: dict[str, Any]) -> str:
    s = modes["settings"]
    rows = []
    memory = {r["scenario"]: r["per_process_per_s"] for r in modes["speed"] if r["mode"] == "memory"}
    for r in modes["speed"]:
        calls = r["commands_per_1000"]
        rows.append(
            [
                keys_scenario(r["scenario"]),
                f"**{r['mode']}**" if r["mode"] == "lease" else r["mode"],
                number(r["per_process_per_s"]),
                versus_memory(r["per_process_per_s"] / memory[r["scenario"]]),
                number(r["round_trips_per_1000"], 2),
                DASH if calls is None else number(calls, 2),
            ]
        )
    head = (
        f"**{modes['processes']} processes, decisions/s per process** (a limit no run reaches, 10⁹ an hour, "
        "burst 10⁹ on the hot key and 10,000 on the 100,000 keys; "
        f"{s['decisions']:,} decisions each, or as many as fit in {s['seconds']:g} s; the median of the "
        f"{modes['processes']}, the median of {runs(s['runs'])})"
    )
    out = table(
        [
            "scenario",
            "mode",
            "decisions/s per process",
            f"{TIMES} memory",
            "round trips / 1,000 decisions",
            "server calls / 1,000 decisions",
        ],
        "llrrrr",
        rows,
    )
    return f"{head}\n\n{out}"


def admitted_windows(r: dict[str, Any]) -> str:
    if r["algorithm"] != "fixed_window":
        return "(the run)"
    text = ", ".join(f"{certain:,}/{touched:,}" for certain, touched in r["windows"])
    if r["outside"] and r["mode"] != "sync":
        text += f"; {r['outside']:,} outside any window"
    return text


def modes_admitted(modes: dict[str, Any]) -> str:
    rows = []
    for r in modes["admitted"]:
        ratio = f"{r['max_ratio']:.4f}"
        if r["max_ratio_upper"] != r["max_ratio"]:
            ratio += f" ({r['max_ratio_upper']:.4f})"
        if r["mode"] != "sync" and r["max_ratio"] > 1.0:
            ratio = f"**{ratio}, above the limit**"
        rows.append(
            [
                r["algorithm"],
                f"**{r['mode']}**" if r["mode"] == "lease" else r["mode"],
                number(r["offered"]),
                number(r["admitted"]),
                admitted_windows(r),
                ratio,
                f"{r['use'] * 100:.1f} %",
                f"{r['bound']:.2f}",
            ]
        )
    limit = modes["admitted"][0]["limit_per_s"]
    head = (
        f"**Admitted against the limit** (hot key, {limit:,}/s, {modes['processes']} processes offering as fast as "
        f"they can for {modes['settings']['offer_seconds']:g} s; max ratio: the most admitted over what the limit "
        "allows, in parentheses with the calls that straddled a window's edge counted in both windows; bound: "
        "what the mode promises, sync mode's from the rate it admitted)"
    )
    out = table(
        [
            "algorithm",
            "mode",
            "offered",
            "admitted",
            "per window (certain/touched)",
            "max ratio",
            "use of the limit",
            "bound",
        ],
        "llrrlrrr",
        rows,
    )
    return f"{head}\n\n{out}"


def modes_moved(modes: dict[str, Any]) -> str:
    rows = [
        [
            demand_cell(m["a_demand_per_s"]),
            f"**{m['mode']}**" if m["mode"] == "lease" else m["mode"],
            number(m["b_admitted"]),
            number(m["allowed"]),
            minus(number(m["shortfall"])),
            minus(number(m["shortfall_ms"])),
        ]
        for m in modes["moved"]
    ]
    first = modes["moved"][0]
    limit = first["limit_per_s"]
    head = (
        f"**Demand that moves** (hot key, {limit:,}/s GCRA, burst {limit:,}: A alone for "
        f"{modes['settings']['busy_seconds']:g} s, then A stops and B, as fast as it can, starts)"
    )
    out = table(
        [
            "A's demand",
            "mode",
            f"B admitted, its first {first['first_seconds']:g} s",
            "the limit over it",
            "shortfall (units)",
            "in ms of the limit",
        ],
        "llrrrr",
        rows,
    )
    return f"{head}\n\n{out}"


def millis(values: list[float]) -> str:
    value = statistics.median(values)
    return "not reached" if value == float("inf") else number(value, 1)


def modes_killed(modes: dict[str, Any]) -> str:
    rows = [
        [
            demand_cell(k["a_demand_per_s"]),
            f"**{k['mode']}**" if k["mode"] == "lease" else k["mode"],
            millis(k["first_ms"]),
            millis(k["full_rate_ms"]),
            number(statistics.median(k["admitted_first_second"])),
            minus(number(k["not_admitted_first_second"])),
        ]
        for k in modes["killed"]
    ]
    s = modes["settings"]
    head = (
        f"**A killed holder** (hot key, {modes['killed'][0]['limit_per_s']:,}/s GCRA: A busy for "
        f"{s['busy_seconds']:g} s, then SIGKILLed; B, as fast as it can, starts at once; {runs(s['kills'], 'kill')}, "
        "medians; lease span 0.1 s)"
    )
    out = table(
        [
            "A's demand",
            "mode",
            "ms to B's first admission",
            "ms to the full rate",
            "B admitted, its first second",
            "allowed, not admitted",
        ],
        "llrrrr",
        rows,
    )
    return f"{head}\n\n{out}"


def modes_summary(modes: dict[str, Any]) -> str:
    """What the tables say, in figures taken from them: lease mode's ratio, speed, shortfall, recovery."""
    sentences = []
    admitted = modes["admitted"]
    lease = [r for r in admitted if r["mode"] == "lease"]
    exact = [r for r in admitted if r["mode"] == "exact"]
    if lease:
        top = max(lease, key=lambda r: r["max_ratio"])
        if top["max_ratio"] <= 1.0 and not any(r["outside"] for r in lease):
            sentence = f"Lease mode never admitted more than the limit: at most {top['max_ratio']:.4f} of it"
        else:
            sentence = f"**Lease mode admitted more than the limit**: {top['max_ratio']:.4f} of it ({top['algorithm']})"
        if exact:
            sentence += f" (exact mode: {max(r['max_ratio'] for r in exact):.4f})"
        sentences.append(sentence + ".")
    speed = {(r["scenario"], r["mode"]): r for r in modes["speed"]}
    for scenario in dict.fromkeys(r["scenario"] for r in modes["speed"]):
        for mode, name in (("lease", "lease mode"), ("standing", "lease mode with standing shares")):
            mine, memory, one = (speed.get((scenario, m)) for m in (mode, "memory", "exact"))
            if mine is None or memory is None or one is None:
                continue
            rate = mine["per_process_per_s"]
            sentences.append(
                f"{keys_scenario(scenario).capitalize()}: {name} made {trips(mine['round_trips_per_1000'])} "
                f"round trips per 1,000 decisions and ran at {times(rate / one['per_process_per_s'], 1)} exact "
                f"mode's decisions/s, {versus_memory(rate / memory['per_process_per_s'])} memory's."
            )
    moved = {(m["a_demand_per_s"], m["mode"]): m for m in modes["moved"]}
    for demand in dict.fromkeys(m["a_demand_per_s"] for m in modes["moved"]):
        mine, one = moved.get((demand, "lease")), moved.get((demand, "exact"))
        if mine is None or one is None:
            continue
        sentences.append(
            f"When A ({demand_cell(demand)}) stopped, B was short {minus(number(mine['shortfall']))} units in "
            f"lease mode against {minus(number(one['shortfall']))} in exact mode."
        )
    killed = [k for k in modes["killed"] if k["mode"] == "lease"]
    if killed:
        after = [f"{millis(k['full_rate_ms'])} ms after the kill ({demand_cell(k['a_demand_per_s'])})" for k in killed]
        sentences.append(f"After a lease holder was killed, B had the full rate again {' and '.join(after)}.")
    sync = [r for r in admitted if r["mode"] == "sync"]
    if sync:
        within = all(r["max_ratio"] <= r["bound"] for r in sync)
        ratios = ", ".join(f"{r['max_ratio']:.2f}" for r in sync)
        bounds = ", ".join(f"{r['bound']:.2f}" for r in sync)
        sentences.append(
            f"Sync mode's max ratios ({ratios}) are {'within' if within else '**above**'} its stated bound ({bounds})."
        )
    return " ".join(sentences)


def modes_load(modes: dict[str, Any]) -> str:
    load = modes.get("load")
    if load is None:
        return ""
    before, after = (", ".join(f"{v:.2f}" for v in load[k]) for k in ("before", "after"))
    return (
        f"Load average (1, 5, 15 min): {before} before the run, {after} after; the run's own processes and "
        f"`redis-server` share the {modes.get('machine', {}).get('cores', 2)} cores."
    )


def redis_modes_block(results: Results) -> str:
    modes, source = redis_modes(results)
    parts = [
        modes_speed(modes),
        modes_admitted(modes),
        modes_moved(modes),
        modes_killed(modes),
        "\n".join(f"- {'PASS' if v['passed'] else 'MISS'}: {v['text']}" for v in modes["verdicts"]),
        modes_summary(modes),
    ]
    load = modes_load(modes)
    parts.append(f"{load} {machine(source)}".strip())
    return "\n\n".join(part for part in parts if part)


MODES_COMPARED = {  # mode -> guarantee, round trips per decision, over- or under-admission, a crashed process
    "exact": ("never above the limit", "1", "none", "nothing (its permits come back after `lease_ttl`)"),
    "sync": (
        "above the limit by at most min((N\N{MINUS SIGN}1)·L, R·(2Δ+2·RTT))",
        "0 (one pipelined round trip per `sync_interval` per node)",
        "over by that bound",
        "the usage it had not pushed (at most Δ of its admissions) is never counted",
    ),
    "lease": (
        "never above the limit",
        "about 0 on a busy key (1 for a key's first request here)",
        "under by the units other processes hold (at most about twice what each spent in a span), back when "
        "their holder is idle for a span or they lapse",
        "its lease's units count as used (a window's until its end, GCRA's as a burst spent, permits until "
        "`lease_ttl`)",
    ),
    "standing": (
        "never above the limit",
        "0 for any key its share admits, even one never seen here; beyond it, as lease mode",
        "under by the shares nobody holds (`standing_fraction` \N{MULTIPLICATION SIGN} "
        "(S\N{MINUS SIGN}n)/S of each key's limit, n of S held) and by a share's keys starting empty for one "
        "tolerance (burst/rate) after it is claimed",
        "its share is idle until its time to live ends (10 spans, at least 1 s), then free to another "
        "process; its leases as lease mode",
    ),
    "memory": ("the limit in each process, none shared (N processes: up to N·L)", "0", DASH, DASH),
}


def lease_modes_block(results: Results) -> str:
    """The table of the Redis modes in docs/workers-and-machines.md: what each promises, and what it measured."""
    modes, source = redis_modes(results)
    speed = {(r["scenario"], r["mode"]): r for r in modes["speed"]}
    scenarios = list(dict.fromkeys(r["scenario"] for r in modes["speed"]))
    rows = []
    for mode, (guarantee, per_decision, bound, crash) in MODES_COMPARED.items():
        found = [speed.get((scenario, mode)) for scenario in scenarios]
        rates = " / ".join(DASH if r is None else number(r["per_process_per_s"]) for r in found)
        counted = " / ".join(DASH if r is None else trips(r["round_trips_per_1000"]) for r in found)
        name = {"memory": "memory (the reference)", "standing": "**lease, standing shares**"}.get(mode, f"**{mode}**")
        rows.append([name, guarantee, per_decision, bound, crash, rates, counted])
    shown = " / ".join(keys_scenario(scenario) for scenario in scenarios)
    out = table(
        [
            "mode",
            "guarantee",
            "round trips per decision",
            "over- or under-admission",
            "what a crashed process costs",
            f"decisions/s per process, {shown} (measured)",
            f"round trips per 1,000 decisions, {shown} (measured)",
        ],
        "lllllrr",
        rows,
    )
    m = source["machine"]
    return (
        f"{out}\n\n<sub>Measured by `{source['command']}` on {m['date']}: {modes['processes']} processes on one "
        f"`redis-server` on loopback, {m['cpu']}, {m['cores']} cores; {at_commit(m)}. Every "
        "figure of the run is on the [benchmarks page](benchmarks.md#redis-modes).</sub>"
    )


# --- outgoing calls (outgoing_bench.py) ---------------------------------------------------------------------

CLIENT_NAMES = {
    "httpx": "httpx `Client`",
    "httpx async": "httpx `AsyncClient`",
    "requests": "requests",
    "aiohttp": "aiohttp",
}
TRANSPORTS = {
    "httpx": "`Transport`",
    "httpx async": "`AsyncTransport`",
    "requests": "`Adapter`",
    "aiohttp": "`Middleware`",
}
DIALECT_NAMES = {"github": "GitHub", "openai": "OpenAI", "ietf": "IETF"}
NO_NETWORK = "no network"


def outgoing_rows(outgoing: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, dict[str, Any]]]:
    """(client, store, dialect) -> setup -> row, in the order the script measured them."""
    found: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for row in outgoing["data"]["rows"]:
        found.setdefault((row["client"], row["store"], row["dialect"]), {})[row["setup"]] = row
    return found


def client_cell(client: str, store: str) -> str:
    shown = f"{CLIENT_NAMES.get(client, client)}, {TRANSPORTS.get(client, 'transport')}"
    return shown if store == "memory" else f"{shown} on `{store}`"


def outgoing_cells(by_setup: dict[str, dict[str, Any]], setup: str) -> list[str]:
    row = by_setup.get(setup)
    if row is None:
        return [DASH, DASH, DASH]
    return [f"{row['bare_us']:.1f}", f"{row['with_us']:.1f}", f"**{signed(row['added_us'], 1)}**"]


def interval(values: list[float], digits: int = 1) -> str:
    """A 95 % interval, ``[low, high]``."""
    return f"[{signed(values[0], digits)}, {signed(values[1], digits)}]"


def quiet_cells(row: dict[str, Any] | None) -> list[str]:
    """The no-network figures of a row: added (its interval), the no-op hook's own cost, above the hook (its
    interval), the noise floor."""
    if row is None:
        return [DASH] * 5
    return [
        f"{row['bare_us']:.1f}",
        f"**{signed(row['added_us'], 1)}** {interval(row['added_ci_us'])}",
        signed(row["hook_us"], 1),
        f"{signed(row['above_hook_us'], 1)} {interval(row['above_hook_ci_us'])}",
        f"\N{PLUS-MINUS SIGN}{row['noise_us']:.1f}",
    ]


def outgoing_reads(outgoing: dict[str, Any]) -> str:
    return ", ".join(
        f"{DIALECT_NAMES.get(r['dialect'], r['dialect'])} {r['us']:.1f} µs" for r in outgoing["data"]["reads"]
    )


def outgoing_block(results: Results) -> str:
    (outgoing,) = need(results, "outgoing")
    quiet, loopback = [], []
    for (client, store, dialect), by_setup in outgoing_rows(outgoing).items():
        fields = DIALECT_NAMES.get(dialect, dialect)
        quiet.append([client_cell(client, store), fields, *quiet_cells(by_setup.get(NO_NETWORK))])
        loopback.append([client_cell(client, store), fields, *outgoing_cells(by_setup, "loopback")])
    quiet_table = table(
        [
            "client, ratekeeper's transport",
            "answer's fields",
            "bare µs",
            "added µs [95 % CI]",
            "no-op hook µs",
            "added above the hook µs [95 % CI]",
            "noise floor µs",
        ],
        "llrrrrr",
        quiet,
    )
    loopback_table = table(
        ["client, ratekeeper's transport", "answer's fields", "bare µs", "with ratekeeper µs", "added µs"],
        "llrrr",
        loopback,
    )
    s = outgoing["settings"]
    problems = "".join(f"\n- PROBLEM: {problem}" for problem in outgoing["data"].get("problems", []))
    how = (
        f"With no network: µs per call; each client and dialect ran as bare, bare again, with a no-op hook "
        f"and through ratekeeper, side by side in {s['blocks']:,} rounds of blocks of {s['block_calls']} calls "
        f"(the clients and dialects taking turns, ten rounds each, all through the run), the order turning each "
        f'round, the garbage collector off while timing. "added" is the median of the rounds\' paired differences '
        f'with the bare client, with its 95 % confidence interval; "no-op hook" what '
        f'a transport, adapter or middleware that only passes the call on costs by itself; "added above the hook" '
        f"ratekeeper against that hook. The noise floor is the larger end of the A/A run's 95 % interval (bare "
        f"again against bare): a difference the run cannot tell from nothing. Over loopback: medians of "
        f"{runs(s['rounds'], 'round')} of {s['calls']:,} calls interleaved with the bare client, against a server "
        f"in its own process; socket noise is tens of µs there, so those figures show the order of things. Reading "
        f"the server's fields alone (`ratekeeper._server_words.read`): {outgoing_reads(outgoing)}."
    )
    return (
        f"{quiet_table}\n\n{verdicts(outgoing)}{problems}\n\nOver loopback:\n\n{loopback_table}\n\n{how} "
        f"{machine(outgoing)}"
    )


def outgoing_cost_block(results: Results) -> str:
    """The short table of the outgoing-calls page: GitHub's fields, each client, both setups."""
    (outgoing,) = need(results, "outgoing")
    rows = []
    for (client, store, dialect), by_setup in outgoing_rows(outgoing).items():
        if dialect != "github":
            continue
        loopback, alone = by_setup.get("loopback"), by_setup.get(NO_NETWORK)
        rows.append(
            [
                client_cell(client, store),
                DASH if loopback is None else f"{loopback['bare_us']:.0f}",
                DASH if alone is None else f"{signed(alone['added_us'], 1)} {interval(alone['added_ci_us'])}",
                DASH if alone is None else signed(alone["above_hook_us"], 1),
                DASH if alone is None else f"\N{PLUS-MINUS SIGN}{alone['noise_us']:.1f}",
            ]
        )
    out = table(
        [
            "client, transport",
            "a bare call over loopback (µs)",
            "ratekeeper adds, no network (µs) [95 % CI]",
            "… above a no-op hook (µs)",
            "noise floor (µs)",
        ],
        "lrrrr",
        rows,
    )
    m = outgoing["machine"]
    return (
        f"{out}\n\n{verdicts(outgoing)}\n\nMedians of paired blocks of calls against the same client bare, with "
        f"answers made in process carrying GitHub's fields; reading the fields alone takes {outgoing_reads(outgoing)}. "
        f"Every client and dialect, the method and the loopback figures are on the "
        f"[benchmarks page](benchmarks.md#outgoing-calls). <sub>Measured by `{outgoing['command']}` on {m['date']}: "
        f"{m['cpu']}, {m['cores']} cores, {m['python']}; {at_commit(m)}.</sub>"
    )


# --- how long it takes ----------------------------------------------------------------------------------------


def run_block(results: Results) -> str:
    (run,) = need(results, "run")
    rows = [[f"`{s['command']}`", f"{s['seconds'] / 60:.1f}"] for s in run["steps"]]
    which = "make bench QUICK=1" if run.get("quick") else "make bench"
    rows.append([f"**all of `{which}`** ({before_run(run)})", f"**{run['seconds'] / 60:.1f}**"])
    out = table(["step", "minutes"], "lr", rows)
    m = run["machine"]
    return f"{out}\n\n<sub>On {run['date']}: {m['cpu']}, {m['cores']} cores, {m['kernel']}, {m['python']}.</sub>"


# --- the summaries ------------------------------------------------------------------------------------------------


def summary_block(results: Results) -> str:
    lines = []
    if "compare" in results:
        compare = results["compare"]
        hot, many = ratekeeper_ns(compare)
        baseline = [compare_ns(compare, "dict GCRA (pure Python)", s) for s in (HOT, KEYS)]
        peers = [
            v / ref
            for library in ("limits FixedWindow", "throttled-py GCRA", "pyrate-limiter GCRA")
            for v, ref in ((compare_ns(compare, library, HOT), hot), (compare_ns(compare, library, KEYS), many))
            if v is not None
        ]
        line = f"- `allow(peer)` from Python: **{ns(hot)} ns** on a hot key, **{ns(many)} ns** over 100,000 keys"
        if None not in baseline:
            line += f"; {span([baseline[0] / hot, baseline[1] / many], times)} faster than a 10-line pure-Python GCRA"
        if peers:
            line += f", {span(peers, lambda v: times(v, 0))} faster than limits, throttled-py and pyrate-limiter"
        lines.append(line + ".")
    if "shared" in results:
        shared = results["shared"]
        hot_ns = shared["data"]["hot_ns"]
        line = (
            f"- Shared memory for the worker processes of one machine (`rk.Shared`): **{ns(hot_ns['shared'])} ns** a "
            f"decision on a hot key, {times(hot_ns['shared'] / hot_ns['memory'], 2)} a decision in memory"
        )
        speedup = pyrate_speedup(shared)
        if speedup is not None:
            line += f", {times(speedup, 0)} faster than pyrate-limiter's `MultiprocessBucket`"
        lines.append(line + ".")
    if "redis" in results:
        d = results["redis"]["data"]
        exact = next(r["median_us"] for r in d["blocking"] if r["name"] == "ratekeeper exact")
        ping = next(r["median_us"] for r in d["blocking"] if "PING" in r["name"])
        rates = {r["name"]: r["median_per_s"] for r in d["concurrent"]}
        peers_rates = [v for name, v in rates.items() if "ratekeeper" not in name and "PING" not in name]
        mine = rates.get("ratekeeper exact")
        line = f"- Redis, exact mode: **{exact:.1f} µs** a decision, against {ping:.1f} µs for a redis-py `PING`"
        if mine is not None and peers_rates:
            line += (
                f"; {number(mine)} decisions/s from {d['tasks']} asyncio callers on one loop, "
                f"{times(mine / max(peers_rates))} the fastest peer library"
            )
        lines.append(line + ".")
    if "web_instructions" in results:
        rows_of = counted(results)
        parts = []
        for framework, name in FRAMEWORKS.items():
            none, quiet = rows_of.get((framework, "none")), rows_of.get((framework, "ratekeeper-quiet-allowed"))
            if none is not None and quiet is not None:
                parts.append(f"{name} {percent(quiet['cycles'], none['cycles'])}")
        refusals = []
        for framework, name in FRAMEWORKS.items():
            none, refused = rows_of.get((framework, "none")), rows_of.get((framework, "ratekeeper-refused"))
            if none is not None and refused is not None:
                refusals.append(f"{name} {times(refused['cycles'] / none['cycles'], 2)}")
        if parts:
            line = (
                "- Over HTTP, counted in instructions and simulated cache misses: the integration and its decision "
                f"add {', '.join(parts)} to a request (fields on 429s only)"
            )
            if refusals:
                line += f"; a refusal costs {', '.join(refusals)} a request without a limiter"
            lines.append(line + ".")
    if not lines:
        raise Missing("compare")
    return "\n".join(lines)


def readme_block(results: Results) -> str:
    """The README's figures: the headline table and what the limiter costs, each row from its results file."""
    (compare,) = need(results, "compare")
    hot, many = ratekeeper_ns(compare)
    rows = []
    for library in ("ratekeeper", "dict GCRA (pure Python)", "limits FixedWindow", "pyrate-limiter GCRA"):
        values = [compare_ns(compare, library, HOT), compare_ns(compare, library, KEYS)]
        if None in values:
            continue
        cell = " / ".join(ns(v) for v in values if v is not None)
        name = peer_name(compare, library)
        rows.append([name, f"**{cell}**" if library == "ratekeeper" else cell])
    speed = table(["", "ns per `allow(peer)` from Python, hot key / 100k keys"], "lr", rows)
    costs = [[f"`allow` over 100,000 keys, {TIMES} its hot-key time", times(many / hot, 2)]]
    baseline = compare_ns(compare, "dict GCRA (pure Python)", KEYS)
    if baseline is not None:
        costs.append(["… against a 10-line dict GCRA over the same keys", f"{times(baseline / many, 2)} faster"])
    costs.append(
        [
            f"memory per tracked key, at {compare['data']['memory']['at_keys']:,} keys",
            f"{memory_per_key(compare):.1f} B",
        ]
    )
    if "web_inprocess" in results:
        web = results["web_inprocess"]["data"]["rows"]
        bare = {r["framework"]: r["us"] for r in web if r["case"] == "bare"}
        added = {
            r["framework"]: r["us"] - bare[r["framework"]]
            for r in web
            if r["case"] in ("+ extension, allowed", "+ middleware, allowed")
        }
        if {"Starlette", "Flask"} <= added.keys():
            costs.append(
                [
                    "Starlette / Flask request, µs added in process",
                    f"{signed(added['Starlette'])} / {signed(added['Flask'])}",
                ]
            )
    if "web_instructions" in results:
        rows_of = counted(results)
        for framework, server in (("fastapi", "FastAPI on uvicorn"), ("flask", "Flask on gunicorn")):
            none = rows_of.get((framework, "none"))
            quiet = rows_of.get((framework, "ratekeeper-quiet-allowed"))
            allowed = rows_of.get((framework, "ratekeeper-allowed"))
            floor = rows_of.get((framework, "fields-only-allowed"))
            if none is None:
                continue
            if quiet is not None:
                costs.append(
                    [f"{server}: the integration and its decision (counted)", percent(quiet["cycles"], none["cycles"])]
                )
            if allowed is not None and floor is not None:
                costs.append(
                    [
                        "… with the two fields on every response",
                        f"{percent(allowed['cycles'], none['cycles'])}, of which the fields alone "
                        f"{percent(floor['cycles'], none['cycles'])}",
                    ]
                )
        refused = [
            (name, rows_of[(framework, "none")], rows_of[(framework, "ratekeeper-refused")])
            for framework, name in (("fastapi", "FastAPI"), ("flask", "Flask"))
            if (framework, "none") in rows_of and (framework, "ratekeeper-refused") in rows_of
        ]
        if refused:
            costs.append(
                [
                    f"a refusal, served at {TIMES} the bare app's rate ({' / '.join(n for n, _, _ in refused)})",
                    " / ".join(times(none["cycles"] / r["cycles"], 2) for _, none, r in refused),
                ]
            )
    cost = table(["what the limiter costs", ""], "lr", costs)
    parts = [speed]
    if "redis" in results:
        d = results["redis"]["data"]
        exact = next(r["median_us"] for r in d["blocking"] if r["name"] == "ratekeeper exact")
        ping = next(r["median_us"] for r in d["blocking"] if "PING" in r["name"])
        parts.append(f"In Redis (exact mode) a decision takes {exact:.1f} µs; a redis-py `PING` takes {ping:.1f} µs.")
    parts.append(cost)
    if "shared" in results:
        shared = results["shared"]
        hot_ns = shared["data"]["hot_ns"]
        keys_ns = shared["data"]["keys_ns"]
        line = (
            f"The shared store (`rk.Shared`): a hot key costs {times(hot_ns['shared'] / hot_ns['memory'], 2)} a "
            f"decision in memory, 100,000 keys {times(keys_ns['shared'] / keys_ns['memory'], 2)}, two processes on "
            f"their own keys {times(scaling(shared, 'shared', 2) / scaling(shared, 'shared', 1), 2)} one, one key "
            f"from two processes exact at {shared['data']['exact']['per_s'] / 1e6:.1f} M decisions/s"
        )
        speedup = pyrate_speedup(shared)
        if speedup is not None:
            line += f", {times(speedup, 0)} faster than pyrate-limiter's `MultiprocessBucket`"
        parts.append(line + ".")
    if "outgoing" in results:
        parts.append(outgoing_readme_line(results["outgoing"]))
    m = compare["machine"]
    parts.append(
        f"<sub>Measured on {m['date']}: {m['cpu']}, {m['cores']} cores, {at_commit(m)} "
        "(each table of the benchmarks page names its own run).</sub>"
    )
    return "\n\n".join(parts)


def outgoing_readme_line(outgoing: dict[str, Any]) -> str:
    """What a call through each client's transport adds (no network, GitHub's fields), with the run's own machine:
    that step may have run on another machine than the README's other figures."""
    rows = outgoing_rows(outgoing)
    added = [
        f"{CLIENT_NAMES.get(client, client)} {signed(by_setup[NO_NETWORK]['added_us'], 1)}"
        for (client, store, dialect), by_setup in rows.items()
        if store == "memory" and dialect == "github" and NO_NETWORK in by_setup
    ]
    m = outgoing["machine"]
    return (
        f"Calling an API through the [transports](docs/outgoing-calls.md) adds to each call (µs over the bare client, "
        f"no network, GitHub's fields): {', '.join(added)} (measured on {m['date']}: {m['cpu']}, {at_commit(m)})."
    )


def allow_ns_inline(results: Results) -> str:
    (compare,) = need(results, "compare")
    hot, _ = ratekeeper_ns(compare)
    return f"in {ns(hot)} ns from Python (a hot key, measured)"


def shared_inline(results: Results) -> str:
    (shared,) = need(results, "shared")
    hot = shared["data"]["hot_ns"]
    return f"at {ns(hot['shared'])} ns a decision ({times(hot['shared'] / hot['memory'], 2)} one in memory)"


def memory_cell(results: Results) -> str:
    (compare,) = need(results, "compare")
    hot, _ = ratekeeper_ns(compare)
    return f"{ns(hot)} ns a decision on a hot key"


def shared_cell(results: Results) -> str:
    (shared,) = need(results, "shared")
    hot = shared["data"]["hot_ns"]
    return f"{ns(hot['shared'])} ns a decision on a hot key, {times(hot['shared'] / hot['memory'], 2)} one in memory"


def shared_pyrate_inline(results: Results) -> str:
    (shared,) = need(results, "shared")
    text = shared_cell(results)
    speedup = pyrate_speedup(shared)
    if speedup is not None:
        text += f", and {times(speedup, 0)} faster than one of pyrate-limiter's `MultiprocessBucket`"
    return text


def redis_us(results: Results, name: str) -> float:
    (redis,) = need(results, "redis")
    return float(next(r["median_us"] for r in redis["data"]["blocking"] if r["name"] == name))


def redis_exact_cell(results: Results) -> str:
    return f"one Redis round trip ({redis_us(results, 'ratekeeper exact'):.1f} µs a decision on loopback)"


def redis_sync_cell(results: Results) -> str:
    return f"{redis_us(results, 'ratekeeper sync'):.3f} µs a decision"


def flask_inline(results: Results) -> str:
    (web,) = need(results, "web_inprocess")
    us = {r["case"]: r["us"] for r in web["data"]["rows"] if r["framework"] == "Flask"}
    bare, allowed, refused = us["bare"], us["+ extension, allowed"], us["+ extension, refused"]
    return (
        f"an allowed request costs {allowed - bare:+.2f} µs against the bare app in process ({bare:.1f} µs), and a "
        f"refusal {refused:.1f} µs"
    ).replace("-", MINUS)


def adaptive_block(results: Results) -> str:
    """The real server check of adaptive limits (``benches/adaptive_bench.py``): served rate against capacity,
    the admitted requests' latency against unloaded, the refusals' latency and status, with and without."""
    (adaptive,) = need(results, "adaptive")
    d = adaptive["data"]

    def ms(value: float | None) -> str:
        return DASH if value is None else f"{value:.1f} ms"

    rows = []
    for row in d["cases"]:
        statuses = ", ".join(str(s) for s in row["refusal_statuses"]) or DASH
        retry = {None: DASH, True: "yes", False: "no"}[row["refusals_with_retry_after"]]
        rows.append(
            [
                "no limit" if row["case"] == "none" else f"`adaptive={row['case']!r}`",
                f"{number(row['served_per_s'])} ({row['served_per_s'] / d['max_per_s'] * 100:.0f} %)",
                f"{ms(row['admitted_p50_ms'])} / {ms(row['admitted_p99_ms'])}",
                times(row["admitted_p99_ms"] / row["unloaded_ms"]),
                number(row["refused_per_s"]),
                f"{ms(row['refused_p50_ms'])} / {ms(row['refused_p99_ms'])}",
                statuses,
                retry,
                DASH if row["limit"] is None else str(row["limit"]),
            ]
        )
    header = [
        "case",
        "served req/s (of capacity)",
        "admitted p50 / p99",
        "p99 / unloaded",
        "refused req/s",
        "refused p50 / p99",
        "status",
        "Retry-After",
        "limit at the end",
    ]
    unloaded = statistics.median(row["unloaded_ms"] for row in d["cases"])
    how = (
        f"A service of {d['capacity']} at once x {d['service_ms']:.0f} ms (at most {number(d['max_per_s'])} req/s, "
        f"unloaded latency {unloaded:.1f} ms), wrk with {d['connections']} connections for "
        f"{adaptive['settings']['seconds']} s a case, the run of median throughput of "
        f"{runs(adaptive['settings'].get('repeats', 1))}; latencies timed in the server, by status."
    ).replace(" x ", f" {TIMES} ")
    spread = "; ".join(
        f"{'no limit' if row['case'] == 'none' else row['case']}: "
        + ", ".join(number(rate) for rate in row.get("served_per_s_runs", [row["served_per_s"]]))
        for row in d["cases"]
    )
    how += f" Served req/s in each run: {spread}."
    return f"{table(header, 'lrrrrrllr', rows)}\n\n{how}\n\n{machine(adaptive)}"


def before_run(run: dict[str, Any]) -> str:
    """What ``make bench`` did before the steps it timed: a smoke run installs the peer libraries only."""
    return "after its install of the peer libraries" if run.get("quick") else "after building and installing the wheel"


def run_minutes_inline(results: Results) -> str:
    (run,) = need(results, "run")
    quick = " (`QUICK=1`)" if run.get("quick") else ""
    return f"{run['seconds'] / 60:.0f} min{quick} on {run['date']}, {before_run(run)}"


BLOCKS: dict[str, Callable[[Results], str]] = {
    "run": run_block,
    "run-minutes": run_minutes_inline,
    "summary": summary_block,
    "compare": compare_block,
    "algorithms": algorithms_block,
    "core": core_block,
    "scrape": scrape_block,
    "web-instructions": web_instructions_block,
    "web-inprocess": web_inprocess_block,
    "django-inprocess": django_inprocess_block,
    "http-bench": http_bench_block,
    "shared": shared_block,
    "redis": redis_block,
    "redis-modes": redis_modes_block,
    "lease-modes": lease_modes_block,
    "http-profiles": http_profiles_block,
    "outgoing": outgoing_block,
    "outgoing-cost": outgoing_cost_block,
    "adaptive": adaptive_block,
    "readme": readme_block,
    "allow-ns": allow_ns_inline,
    "shared-ns": shared_inline,
    "memory-cell": memory_cell,
    "shared-cell": shared_cell,
    "shared-pyrate": shared_pyrate_inline,
    "redis-exact-cell": redis_exact_cell,
    "redis-sync-cell": redis_sync_cell,
    "flask-inprocess": flask_inline,
}


def placeholder(missing: str, inline: bool) -> str:
    if inline:
        return "(not measured yet: `make bench`)"
    return (
        f"*Not measured at this commit yet: `make bench` writes `benches/results/{missing}.json`, and this block "
        "is made from it.*"
    )


def render_text(text: str, results: Results) -> str:
    """``text`` with every generated block made anew from ``results``."""

    def replace(match: re.Match[str]) -> str:
        name, body = match.group(1), match.group(2)
        if name not in BLOCKS:
            raise SystemExit(f"unknown generated block {name!r}; known: {', '.join(BLOCKS)}")
        inline = "\n" not in body
        try:
            content = BLOCKS[name](results).strip()
        except Missing as missing:
            content = placeholder(str(missing), inline)
        if inline:
            return f"<!-- bench:{name} -->{content}<!-- /bench:{name} -->"
        return f"<!-- bench:{name} -->\n{content}\n<!-- /bench:{name} -->"

    return BLOCK.sub(replace, text)


def render_all(results_dir: Path, into: Path | None = None, pages: Iterable[Path] = PAGES) -> list[Path]:
    """Renders ``pages`` from the results in ``results_dir``: in place, or as copies in ``into``. Returns the
    pages written (in place: only those that changed)."""
    results = load(results_dir)
    written = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        new = render_text(text, results)
        if into is not None:
            target = into / page.name
            target.write_text(new, encoding="utf-8")
            written.append(target)
        elif new != text:
            page.write_text(new, encoding="utf-8")
            written.append(page)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results files (default benches/results)")
    parser.add_argument("--into", type=Path, help="write rendered copies of the pages here instead of in place")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page is not up to date")
    args = parser.parse_args(argv)
    if args.check:
        results = load(args.results)
        stale = [
            page
            for page in PAGES
            if render_text(page.read_text(encoding="utf-8"), results) != page.read_text(encoding="utf-8")
        ]
        for page in stale:
            print(
                f"{page.relative_to(ROOT)} is not what {args.results} makes: python benches/render.py", file=sys.stderr
            )
        return 1 if stale else 0
    for page in render_all(args.results, args.into):
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
