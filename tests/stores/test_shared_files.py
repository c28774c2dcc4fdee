"""The shared region's file against what may be found at its path, or done to it: a file that is not a region
(kept and refused, never removed), a region's file corrupt, cut short or grown (refused with the true cause),
an unfinished region whose creator died (made anew), an empty file (made anew), a folder other users may write
to (refused unless sticky), a region truncated under a running worker, and ``python -m ratekeeper inspect`` on
each. Regions are made and used in child processes (``subprocess``, always with a timeout), so that this
process never maps a file the test then cuts short. Every rate is hourly: no refill happens within a test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import ratekeeper as rk

#: Small regions (about 1 MB).
MAX_KEYS = 10_000

#: Makes (or opens) the region at argv[1] and takes argv[2] admissions for "alice": prints how many were given.
DECIDE = """
import sys
import ratekeeper as rk

limiter = rk.Limiter("10/hour", max_keys=10_000, backend=rk.Shared(path=sys.argv[1]))
print(sum(limiter.allow("alice") for _ in range(int(sys.argv[2]))))
"""


def decide(path: Path, tries: int) -> int:
    """In a child process: how many of ``tries`` admissions alice gets from the region at ``path``."""
    child = subprocess.run(
        [sys.executable, "-c", DECIDE, str(path), str(tries)], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == 0, child.stderr
    return int(child.stdout)


def refusal(path: Path) -> str:
    """The error a limiter on ``path`` raises, checking that the file is left as it was."""
    before = path.read_bytes()
    with pytest.raises(rk.InvalidValue) as refused:
        rk.Limiter("10/hour", max_keys=MAX_KEYS, backend=rk.Shared(path=path))
    assert path.read_bytes() == before, "a refused file is left as it was"
    message = str(refused.value)
    assert str(path) in message
    return message


def owned(path: Path, content: bytes) -> Path:
    """A file of this user's at ``path``, mode 0600 as a region's would be."""
    path.write_bytes(content)
    path.chmod(0o600)
    return path


FOREIGN = {
    "text": b"my notes: not a rate limiter's\n" * 100,
    "random": bytes(((i * 2_654_435_761) >> 13) & 0xFF | 1 for i in range(1 << 16)),
    "short text": b"hello\n",
}


@pytest.mark.parametrize("kind", FOREIGN)
def test_a_file_that_is_not_a_region_is_refused_and_never_removed(tmp_path: Path, kind: str) -> None:
    path = owned(tmp_path / "file", FOREIGN[kind])
    assert "it is not a ratekeeper region" in refusal(path)


def test_a_blank_file_the_size_of_a_region_is_refused_and_kept(tmp_path: Path) -> None:
    # What a creator killed between sizing the file and writing its header would leave, or anyone's zeros:
    # not provably a region, so not removed.
    path = owned(tmp_path / "zeros", bytes(1 << 20))
    assert "its header is blank" in refusal(path)


def test_a_region_whose_creator_died_unfinished_is_made_anew(tmp_path: Path) -> None:
    path = tmp_path / "region"
    assert decide(path, 4) == 4
    # As its creator leaves it until the contents are made: the header whole, the ready flag (bytes 12-15)
    # not set, and no process holding the creator's lock.
    with path.open("r+b") as region:
        region.seek(12)
        region.write(bytes(4))
    assert decide(path, 12) == 10, "made anew: a fresh burst"


def test_an_empty_file_is_made_into_the_region(tmp_path: Path) -> None:
    # A creator killed before sizing the file leaves it empty and unlocked; an empty file holds nothing to lose.
    path = owned(tmp_path / "empty", b"")
    assert decide(path, 12) == 10
    assert path.stat().st_size > 1 << 19


def test_a_corrupt_header_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "region"
    assert decide(path, 4) == 4
    with path.open("r+b") as region:
        region.seek(17)  # the size's second byte
        region.write(b"\x5a")
    assert "its header is corrupt" in refusal(path)


@pytest.mark.parametrize("change", [-(1 << 12), 1 << 12])
def test_a_region_cut_short_or_grown_is_refused_with_the_true_cause(tmp_path: Path, change: int) -> None:
    path = tmp_path / "region"
    assert decide(path, 4) == 4
    size = path.stat().st_size
    os.truncate(path, size + change)
    message = refusal(path)
    assert f"the file is {size + change} bytes, its header says {size}: it was truncated or extended" in message
    assert "max_keys" not in message


def test_a_folder_other_users_may_write_to_is_refused_unless_sticky(tmp_path: Path) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(rk.InvalidValue) as refused:
        rk.Limiter("10/hour", max_keys=MAX_KEYS, backend=rk.Shared(path=folder / "region"))
    assert f"refusing the folder {folder}" in str(refused.value)
    assert "reset everyone's limits" in str(refused.value)
    assert not (folder / "region").exists()
    folder.chmod(0o1777)  # as /tmp and /dev/shm
    assert decide(folder / "region", 12) == 10


# --- a region truncated while workers run ------------------------------------------------------------------------

#: A worker: makes the region, decides, says so, then decides again on many keys once told to (a line on stdin).
WORKER = """
import sys
import ratekeeper as rk

limiter = rk.Limiter("10/hour", max_keys=10_000, backend=rk.Shared(path=sys.argv[1]))
print(sum(limiter.allow("alice") for _ in range(12)), flush=True)
sys.stdin.readline()
try:
    admitted = sum(limiter.allow(f"peer-{i}") for i in range(1_000))
except ValueError as error:
    print("refused:", error, flush=True)
else:
    print("admitted", admitted, flush=True)
"""


def test_a_region_truncated_under_a_running_worker_is_refused_by_new_processes_and_never_remade(
    tmp_path: Path,
) -> None:
    path = tmp_path / "region"
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "10\n"  # made and used; readline ends when the worker does
        os.truncate(path, 4096)  # keeps the header's page only
        # A process starting now refuses the file, saying why, and leaves it: remaking it would give every key
        # that spent its budget a fresh one.
        child = subprocess.run(
            [sys.executable, "-c", DECIDE, str(path), "1"], capture_output=True, text=True, timeout=60, check=False
        )
        assert child.returncode == 1
        assert "InvalidValue" in child.stderr
        assert f"refusing the shared region {path}: the file is 4096 bytes, its header says" in child.stderr
        assert "it was truncated or extended" in child.stderr
        assert path.stat().st_size == 4096, "not remade"
        shown = inspect("--path", str(path))
        assert shown.returncode == 2
        assert "it was truncated or extended" in shown.stderr
        # The running worker touches pages that are gone: it dies of SIGBUS, as with any mapped file cut short
        # (or, if it checks the file first, refuses): either way it ends, and admits nothing on lost states.
        said, errors = worker.communicate("go\n", timeout=60)
        assert worker.returncode == -signal.SIGBUS or said.startswith("refused:"), (worker.returncode, said, errors)
        assert "admitted" not in said
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


# --- python -m ratekeeper inspect on files it must refuse --------------------------------------------------------


def inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ratekeeper", "inspect", *args], capture_output=True, text=True, timeout=60, check=False
    )


def made_and_truncated(path: Path) -> str:
    decide(path, 1)
    size = path.stat().st_size
    os.truncate(path, size // 2)
    return f"the file is {size // 2} bytes, its header says {size}: it was truncated or extended"


@pytest.mark.parametrize(
    ("kind", "cause"),
    [
        ("random", "it is not a ratekeeper region"),
        ("text", "it is not a ratekeeper region"),
        ("truncated", None),
        ("corrupt", "its header is corrupt"),
        ("missing", "cannot open the shared region"),
    ],
)
def test_inspect_on_a_file_it_cannot_read_exits_2_with_one_line(tmp_path: Path, kind: str, cause: str | None) -> None:
    path = tmp_path / kind
    if kind in FOREIGN:
        owned(path, FOREIGN[kind])
    elif kind == "truncated":
        cause = made_and_truncated(path)
    elif kind == "corrupt":
        decide(path, 1)
        with path.open("r+b") as region:
            region.seek(20)
            region.write(b"\x01")
    before = path.read_bytes() if path.exists() else None
    shown = inspect("--path", str(path))
    assert shown.returncode == 2
    assert shown.stdout == ""
    lines = shown.stderr.splitlines()
    assert len(lines) == 1, shown.stderr
    assert lines[0].startswith("ratekeeper inspect: ")
    assert str(path) in lines[0]
    assert cause is not None
    assert cause in lines[0]
    assert (path.read_bytes() if path.exists() else None) == before, "inspect changed the file"
