"""Any bytes in a shared region's file: a worker's ``rk.Limiter`` on it, its ``allow`` and ``stats()``, and
``python -m ratekeeper inspect`` on it, each return or raise ``ValueError`` within a few seconds, and the process
lives (no hang, abort, crash). The region is made by a real limiter in a child process, then corrupted here (random
bytes, numbers at the edges, stretches of garbage, anywhere past the file's header) and used by a long-lived child
that is asked one case at a time and must answer each within ``PATIENCE``; a child that dies or is silent fails
the case. ``inspect`` on a corrupt file must print sane numbers (no more keys than the region has slots) or exit 2
with one line naming the file. The Rust fuzz test (``src/shared/fuzz.rs``) covers each part of the region with
thousands of cases; this one proves the same through Python.
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
import time
from pathlib import Path

#: Cases per run; ``RK_FUZZ_SEED`` replays a seed (printed on failure).
CASES = 300
#: How long a case may take: decisions take microseconds, a lock made anew a few tens of milliseconds. Generous,
#: so that a busy machine is not taken for a hang.
PATIENCE = 20.0
MAX_KEYS = 1_000
#: The file's own header (checksummed): corruption goes after it, into the region's parts.
HEADER = 64

MAKE = """
import sys
import ratekeeper as rk

limiter = rk.Limiter(
    "5/min",
    rules=[rk.Rule("^/g", "g", "5/min"), rk.Rule("^/l", "l", limits=[rk.Limit("20/min", algorithm="sliding_log")])],
    max_keys=1_000,
    backend=rk.Shared(path=sys.argv[1]),
)
for round in range(6):
    for peer in range(150):
        for path in ("/g", "/l"):
            limiter.allow(f"peer-{peer}", path=path)
"""

#: Reads a path per line; for each: a limiter on it, decisions, stats, and inspect; answers one JSON line.
WORKER = """
import contextlib
import io
import json
import sys
import ratekeeper as rk
from ratekeeper.__main__ import main

for line in sys.stdin:
    path = line.strip()
    answer = {"limiter": "ok", "inspect": None, "keys": None}
    try:
        limiter = rk.Limiter(
            "5/min",
            rules=[
                rk.Rule("^/g", "g", "5/min"),
                rk.Rule("^/l", "l", limits=[rk.Limit("20/min", algorithm="sliding_log")]),
            ],
            max_keys=1_000,
            backend=rk.Shared(path=path),
        )
        for peer in ("peer-1", "peer-77", "someone-new"):
            for target in ("/g", "/l"):
                limiter.allow(peer, path=target)
        stats = limiter.stats()
        answer["len"] = len(limiter)
        del limiter
    except ValueError as error:
        answer["limiter"] = f"ValueError: {error}"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        answer["inspect"] = main(["inspect", "--path", path, "--json"])
    if answer["inspect"] == 0:
        answer["keys"] = json.loads(out.getvalue())["keys"]
    else:
        answer["error"] = err.getvalue()
    print(json.dumps(answer), flush=True)
"""


class Worker:
    """The long-lived child that runs the cases."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ask(self, path: Path) -> dict[str, object] | str:
        """The worker's answer for ``path``, or why there is none (it died, or did not answer in time)."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], PATIENCE)
        if not ready:
            return f"no answer within {PATIENCE} s (a hang)"
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait(timeout=PATIENCE)
            stderr = self.process.stderr.read() if self.process.stderr else ""
            return f"the worker died (exit {code}): {stderr[-2000:]}"
        answer: dict[str, object] = json.loads(line)
        return answer

    def close(self) -> None:
        self.process.kill()
        self.process.communicate(timeout=PATIENCE)  # also closes the pipes


def corrupt(data: bytearray, rng: random.Random) -> str:
    """Writes garbage into ``data`` past its header; says where."""
    size = len(data)
    kind = rng.randrange(4)
    if kind == 0:
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
    elif kind == 1:
        edge = rng.choice([0, 1, 0x7F, 0xFF, 0x8000_0000, 0xFFFF_FFFF, 2**64 - 1, 40, 297, 4096])
        raw = edge.to_bytes(8, "little")[: rng.choice([4, 8])]
    elif kind == 2:
        raw = os.urandom(64)
    else:
        raw = os.urandom(rng.randrange(64, 4096))
    at = rng.randrange(HEADER, size)
    raw = raw[: size - at]
    data[at : at + len(raw)] = raw
    return f"{len(raw)} bytes at {at:#x}"


def test_corrupt_regions_never_hang_or_crash_a_worker_or_inspect(tmp_path: Path) -> None:
    template = tmp_path / "template"
    subprocess.run([sys.executable, "-c", MAKE, str(template)], check=True, timeout=120)
    pristine = template.read_bytes()
    seed = int(os.environ.get("RK_FUZZ_SEED", str(time.time_ns() % 1_000_000)))
    rng = random.Random(seed)
    worker = Worker()
    failures: list[str] = []
    opened = 0
    try:
        for case in range(CASES):
            data = bytearray(pristine)
            where = ", ".join(corrupt(data, rng) for _ in range(rng.randrange(1, 4)))
            path = tmp_path / f"case-{case % 2}"
            path.unlink(missing_ok=True)
            path.write_bytes(data)
            path.chmod(0o600)
            answer = worker.ask(path)
            if isinstance(answer, str):
                failures.append(f"seed {seed} case {case} ({where}): {answer}")
                worker.close()
                worker = Worker()
                continue
            opened += answer["limiter"] == "ok"
            if answer["inspect"] not in (0, 2):
                failures.append(f"seed {seed} case {case} ({where}): inspect exited {answer['inspect']}")
            keys = answer["keys"]
            if isinstance(keys, int) and keys > 2 * MAX_KEYS:
                failures.append(f"seed {seed} case {case} ({where}): inspect shows {keys:,} keys")
            length = answer.get("len")
            if isinstance(length, int) and length > 2 * MAX_KEYS:
                failures.append(f"seed {seed} case {case} ({where}): the limiter holds {length:,} keys")
            error = answer.get("error")
            if isinstance(error, str):
                lines = error.strip().splitlines()
                if len(lines) != 1 or str(path) not in lines[0]:
                    failures.append(f"seed {seed} case {case} ({where}): inspect's error is not one line: {error!r}")
    finally:
        worker.close()
    assert not failures, f"{len(failures)} of {CASES} cases failed:\n" + "\n".join(failures[:20])
    assert opened > CASES // 2, f"only {opened} of {CASES} corrupt regions were used: most cases prove nothing"


def test_inspect_on_a_corrupt_region_exits_2_with_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "region"
    subprocess.run([sys.executable, "-c", MAKE, str(path)], check=True, timeout=120)
    data = bytearray(path.read_bytes())
    # The meta's numbers (seeds, max_keys, shape), just after the header: checksummed, so refused.
    data[HEADER + 40 : HEADER + 48] = (2**64 - 1).to_bytes(8, "little")
    path.write_bytes(data)
    shown = subprocess.run(
        [sys.executable, "-m", "ratekeeper", "inspect", "--path", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 2, shown
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1, shown.stderr
    assert str(path) in lines[0], shown.stderr
    assert "corrupt" in lines[0], shown.stderr
