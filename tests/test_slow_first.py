"""tests/slow_first.py, run by a real pytest in a subprocess: the heaviest files are collected first
(recorded seconds, else their slow tests), and a run can record the seconds it took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CONFTEST = """
import slow_first

def pytest_addoption(parser):
    slow_first.add_options(parser)

def pytest_configure(config):
    config.pluginmanager.register(slow_first, "legorl-slow-first")
    config.addinivalue_line("markers", "slow: declared in pyproject.toml for the real suite")
"""
QUICK = "def test_a():\n    pass\n\ndef test_b():\n    pass\n"
SLOW = "import pytest\n\n@pytest.mark.slow\ndef test_c():\n    pass\n\ndef test_d():\n    pass\n"


def _pytest(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, body in (("test_1_quick.py", QUICK), ("test_2_slow.py", SLOW), ("test_3_quick.py", QUICK)):
        (tmp_path / name).write_text(body)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "PYTEST_ADDOPTS": ""}
    argv = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q", *options]
    return subprocess.run([*argv, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def _files(out: str) -> list[str]:
    return list(dict.fromkeys(line.split("::")[0] for line in out.splitlines() if "::" in line))


def test_files_with_slow_tests_come_first_and_recorded_seconds_win(tmp_path):
    seconds = tmp_path / "seconds.json"
    res = _pytest(tmp_path, "--collect-only", f"--file-seconds={seconds}")
    assert _files(res.stdout) == ["test_2_slow.py", "test_1_quick.py", "test_3_quick.py"], res.stdout
    seconds.write_text(json.dumps({"test_3_quick.py": 500.0, "test_1_quick.py": 1.0}))
    res = _pytest(tmp_path, "--collect-only", f"--file-seconds={seconds}")
    assert _files(res.stdout) == ["test_3_quick.py", "test_2_slow.py", "test_1_quick.py"], res.stdout


def test_a_run_writes_each_files_seconds(tmp_path):
    seconds = tmp_path / "seconds.json"
    res = _pytest(tmp_path, "--write-file-seconds", f"--file-seconds={seconds}", "-n", "2")
    assert "6 passed" in res.stdout, res.stdout
    table = json.loads(seconds.read_text())
    assert set(table) == {"test_1_quick.py", "test_2_slow.py", "test_3_quick.py"}
    assert all(s >= 0 for s in table.values())
