"""tests/serial_groups.py, run by a real pytest with two xdist workers in a subprocess: the files of a
serial group run on one worker, one after the other; the other files are handed out file by file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from serial_groups import serial_group

CONFTEST = """
import serial_groups

def pytest_configure(config):
    config.pluginmanager.register(serial_groups, "legorl-serial-groups")
    config.addinivalue_line("markers", "vllm: declared in pyproject.toml for the real suite")
"""
# each test records the worker it ran on and when, then holds its worker a moment (so that a free
# worker would take the next unit if the scheduler let it)
BODY = """import json, os, time, pathlib
{mark}
def _log(name):
    with open(os.environ["LOG"], "a") as f:
        f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], time.monotonic()]) + "\\n")
    time.sleep(0.4)

def test_a():
    _log(__name__)

def test_b():
    _log(__name__)
"""
MARKED = "import pytest\npytestmark = [pytest.mark.slow, pytest.mark.vllm]\n"


def test_serial_group_reads_the_module_level_mark_only(tmp_path):
    cases = {
        "alone.py": "import pytest\npytestmark = pytest.mark.vllm\n",
        "listed.py": MARKED,
        "other.py": "import pytest\npytestmark = [pytest.mark.slow]\n",
        "per_test.py": "import pytest\n\n@pytest.mark.vllm\ndef test_x():\n    pass\n",
        "broken.py": "pytestmark = [\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    found = {name: serial_group(tmp_path / name) for name in cases}
    assert found == {"alone.py": "vllm", "listed.py": "vllm", "other.py": None, "per_test.py": None, "broken.py": None}


def test_a_serial_groups_files_share_one_worker_one_after_the_other(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, mark in (("test_v1.py", MARKED), ("test_p1.py", ""), ("test_v2.py", MARKED), ("test_p2.py", "")):
        (tmp_path / name).write_text(BODY.format(mark=mark))
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "PYTEST_ADDOPTS": "", "LOG": str(log)}
    argv = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q", "-n", "2"]
    res = subprocess.run(
        [*argv, "--dist", "loadfile", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert "8 passed" in res.stdout, res.stdout + res.stderr
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    workers = {module: {w for m, w, _ in runs if m == module} for module, _, _ in runs}
    assert len(workers["test_v1"]) == 1 and workers["test_v1"] == workers["test_v2"]
    serial = sorted(t for m, _, t in runs if m in ("test_v1", "test_v2"))
    # one after the other: never two of the group's tests at once
    assert all(b - a >= 0.35 for a, b in zip(serial, serial[1:]))
    assert {w for ws in workers.values() for w in ws} == {"gw0", "gw1"}  # the plain files went to the other
