"""The ``flaky`` marker (tests/flaky_marker.py), run by a real pytest in a subprocess on tests written
for it: a rerun only for the named cause and within its budget, each run set up afresh, and every
rerun listed with its reason at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = """
import flaky_marker

def pytest_configure(config):
    config.pluginmanager.register(flaky_marker, "legorl-flaky")
    config.addinivalue_line("markers", "flaky: declared in pyproject.toml for the real suite")
"""

TESTS = """
import pytest

RUNS = {}
DIRS = []


def count(name):
    RUNS[name] = RUNS.get(name, 0) + 1
    return RUNS[name]


@pytest.mark.flaky(reason="fails on its first run", runs=3)
def test_passes_on_the_second_run(tmp_path):
    DIRS.append(tmp_path)
    (tmp_path / "left-by-this-run").touch()
    if count("second") == 1:
        raise ValueError("first run")
    assert DIRS[0] != DIRS[1] and list(tmp_path.iterdir()) == [tmp_path / "left-by-this-run"]


@pytest.mark.flaky(reason="never passes", runs=3)
def test_fails_on_every_run():
    raise ValueError(f"run {count('every')}")


@pytest.mark.flaky(reason="only a KeyError is the known cause", runs=3, on=KeyError)
def test_another_failure_is_not_rerun():
    raise ValueError(f"run {count('other')}")


@pytest.mark.flaky(reason="cause A", runs=2, on=KeyError)
@pytest.mark.flaky(reason="cause B", runs=2, on=ValueError)
def test_each_cause_has_its_own_budget():
    n = count("two")
    if n == 1:
        raise KeyError("A")
    if n == 2:
        raise ValueError("B")
    if n == 3:
        raise KeyError("A again: its one rerun is spent")


@pytest.fixture
def broken():
    raise ValueError(f"setup {count('setup')}")


@pytest.mark.flaky(reason="a broken fixture is no flake", runs=3)
def test_a_failed_setup_is_not_rerun(broken):
    pass


def test_runs_made():
    assert RUNS == {"second": 2, "every": 3, "other": 1, "two": 3, "setup": 1}
"""


def _pytest(tmp_path: Path, tests: str, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(tests)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "PYTEST_ADDOPTS": ""}
    argv = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q", *options]
    return subprocess.run([*argv, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.parametrize(
    "options",
    [(), ("-n", "2", "--dist", "loadfile")],
    ids=["one-process", "xdist"],  # under pytest-xdist (`make test`) the workers' reruns reach the summary
)
def test_reruns_within_budget_and_summary(tmp_path, options):
    res = _pytest(tmp_path, TESTS, *options)
    out = res.stdout
    assert "3 failed, 2 passed, 1 error in" in out, out
    summary = out[out.index("flaky reruns: 5 in 3 test(s)") : out.index("short test summary info")]
    lines = [line.strip() for line in summary.splitlines()]
    node = "test_inner.py::"
    assert f"{node}test_passes_on_the_second_run: 1 rerun(s), passed on run 2" in lines
    assert "run 1 failed: ValueError: first run" in lines
    assert f"{node}test_fails_on_every_run: 2 rerun(s), failed on all 3 runs" in lines
    assert "reason: never passes" in lines and "run 2 failed: ValueError: run 2" in lines
    assert f"{node}test_each_cause_has_its_own_budget: 2 rerun(s), failed on all 3 runs" in lines
    assert "reason: cause A" in lines and "reason: cause B" in lines
    assert "test_another_failure_is_not_rerun" not in summary and "test_a_failed_setup" not in summary
    # the last run's failure is the one reported
    assert "FAILED test_inner.py::test_fails_on_every_run - ValueError: run 3" in out


def test_a_malformed_marker_stops_the_run(tmp_path):
    res = _pytest(tmp_path, "import pytest\n\n@pytest.mark.flaky(runs=3)\ndef test_x():\n    pass\n")
    assert res.returncode == 4 and "write flaky(reason='why', runs=N, on=Error)" in res.stderr, res.stderr


def test_a_timeout_is_not_rerun(tmp_path):
    """pytest-timeout's limit covers every run of a test together; a run that reached it is not rerun."""
    hangs = "import time\nimport pytest\n\n@pytest.mark.flaky(reason='r', runs=3)\ndef test_x():\n    time.sleep(30)\n"
    res = _pytest(tmp_path, hangs, "--timeout=2")
    assert "1 failed" in res.stdout and "Timeout" in res.stdout and "flaky reruns" not in res.stdout, res.stdout
