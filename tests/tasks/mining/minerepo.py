"""A small git repository with a history worth mining, built by the tests that need one.

``shapes/geometry.py`` holds a few functions its tests cover; the history is: the first version
(``clamp`` without its upper bound), a commit that adds the upper bound together with its test
(the commit a miner should find), and a commit that only touches the README (one it should skip).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

FIRST = '''"""Small geometry helpers."""


def clamp(value, low, high):
    """Keep value within [low, high]."""
    if value < low:
        return low
    return value


def area(width, height):
    """The area of a width x height rectangle."""
    if width < 0 or height < 0:
        raise ValueError("negative size")
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


class Counter:
    def __init__(self, start=0):
        self.count = start

    def add(self, n=1):
        self.count += n
        return self.count
'''

FIXED = FIRST.replace(
    "        return low\n    return value\n",
    "        return low\n    if value > high:\n        return high\n    return value\n",
)

TESTS_FIRST = """import pytest

from shapes.geometry import Counter, area, clamp, perimeter


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_area():
    assert area(3, 4) == 12


def test_area_rejects_negative():
    with pytest.raises(ValueError):
        area(-1, 2)


def test_perimeter():
    assert perimeter(3, 4) == 14


def test_counter():
    c = Counter(2)
    assert c.add() == 3
    assert c.add(4) == 7
"""

TESTS_FIXED = (
    TESTS_FIRST
    + """

def test_clamp_high():
    assert clamp(50, 0, 10) == 10
"""
)

PYPROJECT = """[project]
name = "shapes"
version = "0.1"
requires-python = ">=3.9"

[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_AUTHOR_DATE": "2024-03-01T12:00:00Z",
        "GIT_COMMITTER_DATE": "2024-03-01T12:00:00Z",
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repo(repo: Path) -> Path:
    """The repository described above, in ``repo`` (created); returns it."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    write(
        repo,
        {
            "pyproject.toml": PYPROJECT,
            "README.md": "shapes\n",
            "shapes/__init__.py": "",
            "shapes/geometry.py": FIRST,
            "tests/test_geometry.py": TESTS_FIRST,
        },
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first version")
    write(repo, {"shapes/geometry.py": FIXED, "tests/test_geometry.py": TESTS_FIXED})
    git(repo, "commit", "-q", "-am", "clamp: respect the upper bound")
    write(repo, {"README.md": "shapes: small geometry helpers\n"})
    git(repo, "commit", "-q", "-am", "readme")
    return repo
