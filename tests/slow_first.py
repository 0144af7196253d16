"""The longest test files run first, each file's tests in the order the run drew (pytest-randomly's
shuffle is kept among files of equal weight). ``make test`` runs two files at a time (pytest-xdist,
``--dist loadfile --no-loadscope-reorder``), handing out files in collection order: the long end-to-end files start early and
the many quick ones fill in around them, instead of one worker finishing a long file alone at the end.

A file's weight is its seconds in ``tests/file_seconds.json`` (a full run's, written by
``pytest --write-file-seconds``), else 30 s per ``slow`` test in it. Registered by ``tests/conftest.py``."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from serial_groups import work_unit

SECONDS_FILE = Path(__file__).with_name("file_seconds.json")
_SLOW_TEST_S = 30.0  # a file missing from SECONDS_FILE: its slow tests' guessed cost
_seconds: defaultdict[str, float] = defaultdict(float)


def add_options(parser: pytest.Parser) -> None:
    """The plugin's options: conftest's ``pytest_addoption`` calls this (the plugin itself is registered
    in ``pytest_configure``, after the command line was parsed)."""
    parser.addoption(
        "--file-seconds", type=Path, default=SECONDS_FILE, help="the test files' weights (JSON: file → seconds)"
    )
    parser.addoption(
        "--write-file-seconds",
        action="store_true",
        help="after the run, write each test file's seconds (setup, call, teardown) to --file-seconds",
    )


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle: the sort below is stable
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path: Path = config.getoption("--file-seconds")
    known = json.loads(path.read_text()) if path.is_file() else {}
    slow = Counter(_file(item.nodeid) for item in items if item.get_closest_marker("slow") is not None)
    files = {_file(item.nodeid) for item in items}
    # a serial group is handed out as one unit (tests/serial_groups.py): it weighs what its files do
    unit = {f: work_unit(config.rootpath, f) for f in files}
    weight: defaultdict[str, float] = defaultdict(float)
    for f in files:
        weight[unit[f]] += known.get(f, _SLOW_TEST_S * slow[f])
    first: dict[str, int] = {}  # among equal weights, the order the run drew; a unit's files together
    for i, item in enumerate(items):
        first.setdefault(unit[_file(item.nodeid)], i)
    items.sort(key=lambda item: (-weight[unit[_file(item.nodeid)]], first[unit[_file(item.nodeid)]]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[_file(report.nodeid)] += report.duration  # under pytest-xdist: the controller's copy of it


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.getoption("--write-file-seconds") and not hasattr(session.config, "workerinput"):
        table = {name: round(s, 1) for name, s in sorted(_seconds.items(), key=lambda kv: -kv[1])}
        session.config.getoption("--file-seconds").write_text(json.dumps(table, indent=1) + "\n")
