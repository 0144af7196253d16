"""What a test needs is said by its markers (registered in pyproject.toml), checked here once.

``sandbox`` needs bubblewrap and strace, ``podman`` needs podman, ``npm`` needs npm, ``root`` needs
uid 0; ``slow`` needs nothing (it only lets ``make test-fast`` leave the test out). A test whose
requirement is missing is skipped with the reason — except under CI (``CI`` set), where the
project's own setup installs everything, so a missing tool is an error: a skip there would turn a
broken install step into a green run. ``swebench_data`` needs SWE-bench's records and repository
bundles (``LEGORL_SWEBENCH_DIR``): data that no install step can fetch here, so it is skipped when absent,
under CI too.
"""

from __future__ import annotations

import os
import shutil

import pytest
from needs import unavailable

_REQUIREMENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "sandbox": (("bwrap", "strace"), "apt-get install -y bubblewrap strace"),
    "podman": (("podman",), "apt-get install -y podman runc uidmap"),
    "npm": (("npm", "node"), "apt-get install -y nodejs npm"),
    "browser": (("chromium",), "apt-get install -y chromium"),
}


def missing_requirements(item: pytest.Item) -> list[str]:
    """Why ``item`` cannot run here (empty: it can)."""
    why = []
    for marker, (tools, hint) in _REQUIREMENTS.items():
        if item.get_closest_marker(marker) is None:
            continue
        absent = [t for t in tools if shutil.which(t) is None]
        if absent:
            why.append(f"{', '.join(absent)} not installed ({hint})")
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        why.append("needs root")
    return why


def missing_data(item: pytest.Item) -> str | None:
    """Data no setup script can fetch here (no dataset hub): its absence is a skip, under CI too."""
    if item.get_closest_marker("swebench_data") is None:
        return None
    from legorl.settings import settings

    data = settings().swebench_dir
    if not (data / "SWE-bench_Verified-test.parquet").is_file() or not (data / "repos").is_dir():
        return f"no SWE-bench data in {data} (set LEGORL_SWEBENCH_DIR)"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    why = missing_requirements(item)
    if why:
        unavailable("; ".join(why))
    data = missing_data(item)
    if data:
        pytest.skip(data)
