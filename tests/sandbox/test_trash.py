"""The trash of destroyed sandboxes is emptied before a command exits (issue 37): a short process that
discards a tree and ends at once leaves nothing behind, and what a killed process left is removed by
the next process that discards into the same trash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from legorl.sandbox.hostfs import TRASH_NAME, discard, empty_trash

FILES = 3000  # enough that deleting them takes longer than an interpreter's exit


def _tree(root: Path, name: str, files: int = FILES) -> Path:
    tree = root / name
    for i in range(files):
        d = tree / f"d{i % 30}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text("x")
    (tree / "locked").mkdir()
    (tree / "locked" / "inner").write_text("y")
    (tree / "locked").chmod(0)  # what a sandbox may leave: only force_rmtree gets in
    return tree


def _discard_and_exit(root: Path, name: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from legorl.sandbox.hostfs import discard
        discard(Path({str(root / name)!r}))
        print("discarded")
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_a_short_process_leaves_an_empty_trash(tmp_path):
    _tree(tmp_path, "sb-short")
    done = _discard_and_exit(tmp_path, "sb-short")
    assert done.returncode == 0 and "discarded" in done.stdout, done.stderr
    assert not (tmp_path / "sb-short").exists()
    assert list((tmp_path / TRASH_NAME).iterdir()) == [], "the exiting process emptied its trash"


def test_trees_a_killed_process_left_are_removed_by_the_next_discard(tmp_path):
    trash = tmp_path / TRASH_NAME
    trash.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    _tree(trash, f"sb-killed-{dead_pid}-abcdef", files=50)  # a process that died before emptying it
    _tree(trash, "sb-older-0a1b2c", files=10)  # left by a LEGO-RL that did not name the owner
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _tree(trash, f"sb-busy-{alive.pid}-fedcba", files=10)  # another live process's: not ours to remove
        _tree(tmp_path, "sb-now", files=10)
        discard(tmp_path / "sb-now")
        assert empty_trash(timeout=120) == 0
        assert [p.name for p in trash.iterdir()] == [f"sb-busy-{alive.pid}-fedcba"]
    finally:
        alive.kill()
        alive.wait()
