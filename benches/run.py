"""Every benchmark, one after the other, then the figures of the docs: what ``make bench`` runs.

Each step runs one script of ``benches/`` (or criterion, for the Rust core) with the settings below and
writes its figures and a machine block (``benches/machine.py``) as ``<results>/<step>.json``; then
``benches/render.py`` rewrites the generated blocks of ``docs/benchmarks.md`` and the README from every
results file. The steps run in turn, never two at once: each would disturb the others' timings. How long
each took is kept in ``<results>/run.json``, and the benchmarks page shows it.

``--quick`` is a smoke run: every step with the shortest settings its script takes, into a fresh
temporary folder (never ``benches/results``), rendered into copies of the pages in that folder; the
committed results and pages are left alone.

Usage
    python benches/run.py                      # everything: about 25 minutes on 2 cores (make bench)
    python benches/run.py --quick              # smoke run (make bench QUICK=1)
    python benches/run.py --only compare,shared
    python benches/run.py --list
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

from machine import describe  # noqa: E402


@dataclass(frozen=True)
class Step:
    name: str  # the results file's stem and the generated blocks' source
    script: str  # benches/<script>, or "cargo" for criterion
    full: tuple[str, ...] = ()  # the settings of make bench
    quick: tuple[str, ...] = ("--quick",)  # the settings of a smoke run
    tools: tuple[str, ...] = ()  # executables it needs
    outputs: tuple[str, ...] = ()  # its options naming other files it writes (kept out of benches/ when quick)
    about: str = ""


STEPS = (
    Step(
        "core",
        "cargo",
        full=("--warm-up-time", "1", "--measurement-time", "3"),
        quick=("--warm-up-time", "0.1", "--measurement-time", "0.2"),
        tools=("cargo",),
        about="the Rust core alone (criterion, benches/core.rs)",
    ),
    Step("compare", "compare.py", full=(), about="allow() from Python against peer libraries, per algorithm"),
    Step("scrape", "scrape_bench.py", full=(), about="a Prometheus scrape of a big limiter"),
    Step("shared", "shared_bench.py", full=(), about="the shared-memory store against memory and pyrate-limiter"),
    Step(
        "web_inprocess",
        "web_inprocess.py",
        full=("--requests", "2000", "--repeat", "25"),
        about="Flask and Starlette requests in process",
    ),
    Step("django_inprocess", "django_inprocess.py", full=(), about="Django requests in process"),
    Step(
        "web_instructions",
        "web_instructions.py",
        full=(),
        tools=("valgrind", "callgrind_control"),
        about="FastAPI, Flask and Django requests counted under callgrind",
    ),
    Step(
        "http_bench",
        "http_bench.py",
        full=("--runs", "3", "--seconds", "2"),
        tools=("wrk",),
        outputs=("--out",),
        about="FastAPI, Flask and Django over HTTP under wrk",
    ),
    Step(
        "http_profiles",
        "http_profiles.py",
        full=("--trials", "2", "--seconds", "20"),
        tools=("wrk",),
        outputs=("--out", "--charts"),
        about="the quota server over HTTP under wrk",
    ),
    Step(
        "redis",
        "redis_bench.py",
        full=("--runs", "5", "--calls", "10000"),
        tools=("redis-server",),
        outputs=("--out",),
        about="decisions with limits in Redis against peers' Redis storages",
    ),
    Step(
        "outgoing",
        "outgoing_bench.py",
        full=(),
        about="httpx, requests and aiohttp calls bare and through ratekeeper's transports (loopback, no network)",
    ),
)


def bench_requirements() -> list[str]:
    """The bench extra of pyproject.toml, as pip takes it."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    with open(ROOT / "pyproject.toml", "rb") as pyproject:
        extras = tomllib.load(pyproject)["project"]["optional-dependencies"]
    requirements: list[str] = extras["bench"]
    return requirements


def missing(steps: list[Step]) -> list[str]:
    """What the steps need and this machine lacks, one line each."""
    problems = [f"{tool} is not on the PATH" for step in steps for tool in step.tools if shutil.which(tool) is None]
    for requirement in bench_requirements():
        name = requirement.split(";")[0].split("[")[0]
        for separator in "<>=!~ ":
            name = name.split(separator)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} is not installed (the bench extra: pip install -e '.[bench]')")
    return sorted(set(problems))


def criterion(step: Step, arguments: tuple[str, ...], json_path: Path, quick: bool) -> list[str]:
    """Runs the criterion benches into a fresh folder, then gathers their estimates into ``json_path``."""
    with tempfile.TemporaryDirectory(prefix="criterion-") as home:
        # Its own target folder: the editable install builds the same crate with other features into target/.
        environment = {**os.environ, "CRITERION_HOME": home, "CARGO_TARGET_DIR": str(ROOT / "target" / "bench")}
        command = ["cargo", "bench", "--bench", "core", "--features", "bench", "--", *arguments]
        subprocess.run(command, cwd=ROOT, env=environment, check=True)
        rows = []
        for found in sorted(Path(home).rglob("new/benchmark.json")):
            benchmark = json.loads(found.read_text())
            estimates = json.loads((found.parent / "estimates.json").read_text())
            rows.append(
                {
                    "id": benchmark["full_id"],
                    "median_ns": estimates["median"]["point_estimate"],
                    "mean_ns": estimates["mean"]["point_estimate"],
                }
            )
    if not rows:
        raise SystemExit("criterion wrote no estimates")
    from machine import write_results

    settings = {"criterion": " ".join(arguments), "profile": "release (Cargo.toml: lto = fat, codegen-units = 1)"}
    machine = describe()
    machine["versions"]["rustc"] = rustc_version()
    shown = " ".join(["cargo", *command[1:]])
    write_results(json_path, "core", {"rows": rows}, machine, made_by=shown, **settings)
    return command


def rustc_version() -> str:
    done = subprocess.run(["rustc", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.split()[1] if done.returncode == 0 and done.stdout else "unknown"


@dataclass
class Ran:
    step: str
    command: str
    seconds: float
    status: int
    problems: list[str] = field(default_factory=list)


def run_step(step: Step, results: Path, quick: bool) -> Ran:
    arguments = step.quick if quick else step.full
    json_path = results / f"{step.name}.json"
    json_path.unlink(missing_ok=True)  # a step that fails leaves no figures of an earlier run behind
    started = time.monotonic()
    print(f"\n=== {step.name}: {step.about}", file=sys.stderr, flush=True)
    if step.script == "cargo":
        command = criterion(step, arguments, json_path, quick)
        return Ran(step.name, " ".join(command), time.monotonic() - started, 0)
    command = [sys.executable, str(HERE / step.script), *arguments, "--json", str(json_path)]
    if "--out" in step.outputs:  # the raw runs, beside the figures
        command += ["--out", str(results / f"{Path(step.script).stem}.tsv")]
    if "--charts" in step.outputs and quick:  # a smoke run leaves docs/ alone
        command += ["--charts", str(results)]
    done = subprocess.run(command, cwd=ROOT, check=False)
    shown = " ".join(["python", f"benches/{step.script}", *arguments])
    ran = Ran(step.name, shown, time.monotonic() - started, done.returncode)
    if done.returncode != 0:
        ran.problems.append(f"{step.script} exited with status {done.returncode}")
    elif not json_path.exists():
        ran.problems.append(f"{step.script} wrote no {json_path.name}")
    return ran


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run into a temporary folder (docs untouched)")
    parser.add_argument("--only", help="these steps only, comma-separated (see --list)")
    parser.add_argument(
        "--results", type=Path, help="where the results go (default benches/results; quick: a temp dir)"
    )
    parser.add_argument("--no-render", action="store_true", help="measure only: leave the pages alone")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument("--requirements", action="store_true", help="print the bench extra's requirements and exit")
    args = parser.parse_args(argv)
    if args.requirements:
        print(" ".join(bench_requirements()))  # for a shell's word splitting: none holds a space
        return 0
    if args.list:
        for step in STEPS:
            print(f"{step.name:<18} {step.about}")
        return 0
    wanted = set(args.only.split(",")) if args.only else {step.name for step in STEPS}
    unknown = wanted - {step.name for step in STEPS}
    if unknown:
        parser.error(f"unknown steps: {', '.join(sorted(unknown))} (see --list)")
    steps = [step for step in STEPS if step.name in wanted]
    problems = missing(steps)
    if problems:
        print("cannot run the benchmarks:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    results = args.results or (Path(tempfile.mkdtemp(prefix="ratekeeper-bench-")) if args.quick else RESULTS)
    results.mkdir(parents=True, exist_ok=True)
    print(f"results into {results}", file=sys.stderr)

    started = time.monotonic()
    ran = [run_step(step, results, args.quick) for step in steps]
    total = time.monotonic() - started
    record = {
        "quick": args.quick,
        "seconds": total,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "machine": describe(),
        "steps": [{"step": r.step, "command": r.command, "seconds": r.seconds, "status": r.status} for r in ran],
    }
    run_json = results / "run.json"
    if run_json.exists() and args.only:  # a partial run keeps the other steps' times
        earlier = json.loads(run_json.read_text())
        kept = [s for s in earlier.get("steps", []) if s["step"] not in wanted]
        record["steps"] = sorted(kept + record["steps"], key=lambda s: [x.name for x in STEPS].index(s["step"]))
        record["seconds"] = sum(s["seconds"] for s in record["steps"])
    run_json.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    print(f"\n=== {len(ran)} step(s) in {total / 60:.1f} min", file=sys.stderr)
    for r in ran:
        print(
            f"  {r.step:<18} {r.seconds:7.1f} s  {'ok' if not r.problems else '; '.join(r.problems)}", file=sys.stderr
        )
    failed = [problem for r in ran for problem in r.problems]
    if not args.no_render:
        import render

        into = results if args.quick else None
        changed = render.render_all(results, into=into)
        where = f"into {results}" if into else "in place"
        print(f"rendered {where}: {', '.join(str(p) for p in changed) or 'nothing changed'}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
