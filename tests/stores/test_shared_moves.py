"""A shared region's file removed or replaced while workers run: every worker moves to the file now at
the path at its first decision a quarter of a second after the change (``_check_region`` makes it the
next decision here), carrying what each key used, so that old and new workers together admit at most
twice a burst around the change (each file once), and exactly the limit's rate after it."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import ratekeeper as rk

BURST = 10


def worker(path: str, commands: Connection, rate: str, algorithm: str) -> None:
    """Decides for ``alice`` as told: ``("take", n)`` admits up to n and answers how many, ``"check"``
    forces the check of the file, ``"stop"`` ends."""
    limiter = rk.Limiter(rate, algorithm=algorithm, max_keys=1_000, backend=rk.Shared(path=path))  # type: ignore[arg-type]
    commands.send("ready")
    while True:
        command = commands.recv()
        if command == "stop":
            return
        if command == "check":
            limiter._check_region()
            commands.send("checked")
            continue
        _, n = command
        commands.send(sum(limiter.allow("alice") for _ in range(n)))


class Worker:
    def __init__(
        self,
        context: multiprocessing.context.BaseContext,
        path: Path,
        rate: str = f"{BURST}/hour",
        algorithm: str = "gcra",
    ) -> None:
        self.here, there = multiprocessing.Pipe()
        process = context.Process(target=worker, args=(str(path), there, rate, algorithm))  # type: ignore[attr-defined]
        self.process = process
        self.process.start()
        assert self.ask_ready()

    def ask_ready(self) -> bool:
        return self.here.poll(30) and self.here.recv() == "ready"

    def take(self, n: int) -> int:
        self.here.send(("take", n))
        assert self.here.poll(30), "the worker did not answer"
        answer: int = self.here.recv()
        return answer

    def check(self) -> None:
        self.here.send("check")
        assert self.here.poll(30)
        assert self.here.recv() == "checked"

    def stop(self) -> None:
        self.here.send("stop")
        self.process.join(30)
        assert self.process.exitcode == 0


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("change", ["removed", "replaced"])
def test_workers_follow_a_removed_or_replaced_file_carrying_usage(tmp_path: Path, method: str, change: str) -> None:
    context = multiprocessing.get_context(method)
    path = tmp_path / "region"
    old = [Worker(context, path), Worker(context, path)]
    try:
        assert old[0].take(4) + old[1].take(2) == 6
        if change == "removed":
            path.unlink()
        else:
            # Made elsewhere and moved over it, as an operator restoring a copy might.
            elsewhere = tmp_path / "elsewhere"
            rk.Limiter(f"{BURST}/hour", max_keys=1_000, backend=rk.Shared(path=elsewhere))
            os.replace(elsewhere, path)
        # A worker started since decides in the file now at the path, where alice is fresh.
        new = Worker(context, path)
        fresh = new.take(BURST)
        assert fresh == BURST
        for each in old:
            each.check()
        after = sum(each.take(BURST) for each in (*old, new))
        # Around the change: 6 in the old file, 10 in the new, nothing after: 16, at most twice the burst.
        assert 6 + fresh + after <= 2 * BURST
        assert after == 0, "the usage of the old file was carried into the new one"
        late = Worker(context, path)
        assert late.take(BURST) == 0
        late.stop()
        new.stop()
    finally:
        for each in old:
            each.stop()


def test_a_removed_file_is_made_anew_by_the_first_worker_to_notice_and_nothing_is_lost(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    path = tmp_path / "region"
    old = [Worker(context, path), Worker(context, path)]
    try:
        assert old[0].take(BURST) == BURST
        path.unlink()
        for each in old:
            each.check()
        assert sum(each.take(BURST) for each in old) == 0
        assert path.exists()
        late = Worker(context, path)
        assert late.take(BURST) == 0, "a worker started after the move sees alice spent"
        late.stop()
    finally:
        for each in old:
            each.stop()


@pytest.mark.parametrize(
    ("old_algorithm", "new_algorithm"), [("token_bucket", "leaky_bucket"), ("gcra", "sliding_log")]
)
def test_a_rolling_deploy_that_changes_the_algorithm_admits_the_burst_once(
    tmp_path: Path, old_algorithm: str, new_algorithm: str
) -> None:
    """Old and new workers side by side, each deciding under its own rules: one budget, never 60 of 10."""
    context = multiprocessing.get_context("spawn")
    path = tmp_path / "region"
    workers = [Worker(context, path, algorithm=old_algorithm), Worker(context, path, algorithm=new_algorithm)]
    try:
        admitted = sum(workers[n % 2].take(1) for n in range(60))
        assert admitted == BURST
        # Then a new worker with a larger rate: what the others used is carried over, as update_rule does.
        bigger = Worker(context, path, rate=f"{2 * BURST}/hour", algorithm=new_algorithm)
        more = bigger.take(2 * BURST)
        assert more <= BURST
        bigger.stop()
    finally:
        for each in workers:
            each.stop()
