"""A mutant whose tests never end costs a multiple of the unmutated suite's time, not the miner's
whole ``timeout`` (10 minutes a mutant on more-itertools, whose whole suite runs in 29 s): it is
rejected as an environment problem that names the shorter limit, and the other mutants are kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from minerepo import PYPROJECT, git, write

from legorl.tasks.mining import pipeline
from legorl.tasks.mining.pipeline import MineOptions, mine

pytestmark = pytest.mark.sandbox

STEPS = """def steps(n):
    count = 0
    while n > 0:
        n -= 1
        count += 1
    return count
"""
TESTS = "from loops.count import steps\n\n\ndef test_steps():\n    assert steps(3) == 3\n"


def test_a_mutant_that_never_ends_is_cut_at_a_multiple_of_the_suite_time(tmp_path: Path, monkeypatch) -> None:
    repo = tmp_path / "loops"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(
        repo,
        {"pyproject.toml": PYPROJECT, "loops/__init__.py": "", "loops/count.py": STEPS, "tests/test_count.py": TESTS},
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "steps")
    monkeypatch.setattr(pipeline, "MUTANT_TIME_MARGIN_S", 20.0)  # the test's patience (60 s by default)
    options = MineOptions(
        python="host", methods=["mutations"], max_mutations=20, per_function=20, workers=2, seed=0,
        dedup_mined=False, use_cache=False,
    )  # fmt: skip
    report = mine([str(repo)], tmp_path / "out", options)
    [source] = report.sources
    mutations = source.methods["mutations"]
    limit = 20.0 + pipeline.MUTANT_TIME_FACTOR * source.baseline["seconds"]
    assert limit < options.timeout / 10  # not the 600 s every mutant had
    # `n -= 1` → `n += 1`, and `n -= 1` removed: the loop never ends
    assert mutations.rejected == {f"environment: tests ran past {limit:g}s": 2}, mutations.rejected
    assert mutations.kept >= 1  # `count += 1` → `count -= 1`, `n > 0` → `n >= 0`, ...
