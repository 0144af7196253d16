"""The ``flaky`` marker: a test known to fail now and then for a cause it does not check runs again,
and every rerun is printed at the end of the pytest run with its reason.

    @pytest.mark.flaky(reason="what fails at random, how often, since when", runs=3, on=SomeError)

``runs``: at most this many runs in all (default 2). ``on``: the exception class (or tuple) that the
cause raises; a failure of any other kind fails the test at once (default: ``Exception``, so neither
``pytest.fail`` nor pytest-timeout's timeout, which is one, is run again). Only a failed call is run
again, never a failed setup or teardown (a broken fixture is no flake), and each run is set up
afresh: its own ``tmp_path``, function-scoped fixtures made anew. A test with several flaky markers
(several causes) gives each its own budget: the first marker whose ``on`` matches the failure pays
for the rerun, so retries never nest. The per-test timeout covers all runs of a test together.
Registered by ``tests/conftest.py``; the marker is declared in ``pyproject.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from _pytest.runner import runtestprotocol  # what a rerunning plugin calls (pytest-rerunfailures does too)

_EXCINFO = pytest.StashKey[pytest.ExceptionInfo[BaseException] | None]()
_FIELDS = {"reason", "runs", "on"}
_FAILURE_CHARS = 2000  # one failed run's message in the summary (a harness run's evidence is long)
_PROPERTY = "flaky_reruns"  # the user property of a rerun test's last report
_IN_WORKER = False


@dataclass(frozen=True)
class Flaky:
    reason: str
    runs: int
    on: tuple[type[BaseException], ...]


@dataclass(frozen=True)
class Retry:
    """One failed run that was run again."""

    nodeid: str
    run: int  # 1-based number of the failed run
    reason: str
    failure: str  # the failed run's exception, on one line


@dataclass(frozen=True)
class Outcome:
    nodeid: str
    runs: int  # runs made in all
    passed: bool


RETRIES: list[Retry] = []
OUTCOMES: list[Outcome] = []


def flaky_markers(item: pytest.Item) -> list[Flaky]:
    """The item's flaky markers, checked: a malformed one is a usage error at collection."""
    out = []
    for m in item.iter_markers("flaky"):
        unknown = set(m.kwargs) - _FIELDS
        reason, runs, on = m.kwargs.get("reason"), m.kwargs.get("runs", 2), m.kwargs.get("on", Exception)
        on = on if isinstance(on, tuple) else (on,)
        if m.args or unknown or not isinstance(reason, str) or not reason.strip():
            raise pytest.UsageError(f"{item.nodeid}: write flaky(reason='why', runs=N, on=Error): got {m}")
        if not isinstance(runs, int) or runs < 2:
            raise pytest.UsageError(f"{item.nodeid}: flaky runs={runs!r}: at least 2 runs (one retry)")
        if not all(isinstance(e, type) and issubclass(e, BaseException) for e in on):
            raise pytest.UsageError(f"{item.nodeid}: flaky on={on!r}: exception classes only")
        out.append(Flaky(reason.strip(), runs, on))
    return out


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        flaky_markers(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """Keep the body's exception: the report carries only its text, ``on`` matches its class."""
    if call.when == "call":
        item.stash[_EXCINFO] = call.excinfo


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    markers = flaky_markers(item)
    if not markers:
        return None  # pytest's own protocol
    left = [m.runs - 1 for m in markers]
    retries: list[dict[str, object]] = []
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    run = 1
    while True:
        item.stash[_EXCINFO] = None
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        cause = _cause(reports, item.stash[_EXCINFO], markers, left)
        if cause is None:
            break
        left[cause] -= 1
        retries.append({"run": run, "reason": markers[cause].reason, "failure": _one_line(item.stash[_EXCINFO])})
        run += 1
    if retries:  # on the last report: pytest-xdist carries it from its worker to the summary's process
        passed = all(not r.failed for r in reports)
        reports[-1].user_properties.append((_PROPERTY, {"runs": run, "passed": passed, "retries": retries}))
    for report in reports:  # only the last run is reported: the earlier ones are in the summary
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Gather the reruns for the summary (where it is printed: not in a pytest-xdist worker)."""
    if _IN_WORKER:
        return
    for name, value in report.user_properties:
        if name == _PROPERTY:
            RETRIES.extend(Retry(report.nodeid, r["run"], r["reason"], r["failure"]) for r in value["retries"])
            OUTCOMES.append(Outcome(report.nodeid, value["runs"], value["passed"]))


def pytest_configure(config: pytest.Config) -> None:
    global _IN_WORKER
    _IN_WORKER = hasattr(config, "workerinput")  # pytest-xdist's worker: its controller prints the summary


def _cause(
    reports: list[pytest.TestReport],
    excinfo: pytest.ExceptionInfo[BaseException] | None,
    markers: list[Flaky],
    left: list[int],
) -> int | None:
    """The index of the marker that reruns this run, or None: the run stands."""
    failed = [r for r in reports if r.failed]
    if excinfo is None or [r.when for r in failed] != ["call"]:  # passed, skipped, or setup/teardown broke
        return None
    for i, m in enumerate(markers):
        if left[i] > 0 and excinfo.errisinstance(m.on):
            return i
    return None


def _one_line(excinfo: pytest.ExceptionInfo[BaseException] | None) -> str:
    text = " ".join(excinfo.exconly().split()) if excinfo is not None else "?"
    return text if len(text) <= _FAILURE_CHARS else text[:_FAILURE_CHARS] + " ..."


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Per rerun test: how many reruns, why, and how it ended; then each failed run's exception."""
    if not RETRIES:
        return
    tests = {r.nodeid for r in RETRIES}
    terminalreporter.write_sep("-", f"flaky reruns: {len(RETRIES)} in {len(tests)} test(s)")
    for outcome in OUTCOMES:
        mine = [r for r in RETRIES if r.nodeid == outcome.nodeid]
        end = f"passed on run {outcome.runs}" if outcome.passed else f"failed on all {outcome.runs} runs"
        terminalreporter.write_line(f"{outcome.nodeid}: {len(mine)} rerun(s), {end}")
        for reason in dict.fromkeys(r.reason for r in mine):
            terminalreporter.write_line(f"  reason: {reason}")
        for r in mine:
            terminalreporter.write_line(f"  run {r.run} failed: {r.failure}")
