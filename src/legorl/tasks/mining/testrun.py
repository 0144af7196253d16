"""One test run of a mined repository in a sandbox, recorded by a small pytest plugin, and cached.

A run is a snapshot (the miner's repository at a commit: its instance layer, built once and keyed
by the git tree) plus *edits* (files written or deleted before the run), a selection of test files
(all of them when empty) and the environment. It runs in a fresh sandbox of the given backend
(bwrap: no network), as the grader runs tests: ``-p no:cacheprovider`` and the grader's other
blocked plugins, plugin autoload off, ``--rootdir``/``--confcutdir`` at the workspace,
``PYTHONHASHSEED=0``.

The plugin (:data:`PROBE`, written into the sandbox's ``/tmp`` by the run's own command) records,
by pytest node id, the worst outcome of each test's phases (``passed``, ``failed``, ``error``,
``skipped``), its duration, and for each failure the crash message and the traceback's
``file:line: function`` entries (what a problem statement quotes). Collection errors are recorded
by the collector's node id. With ``coverage``, it also records which functions of the repository
ran for each test file — or, with ``coverage_tests``, for each test (node id), the import of a test
module still counting for its file — (``sys.settrace`` on call events only: the function, never the
line), and for everything else (conftest, plugins, session fixtures) under ``<global>``; reported
as ``(file, co_firstlineno)`` and named by :mod:`legorl.tasks.mining.functions`.

Runs are cached by a key of everything that decides their result (:func:`run_key`) under
``$LEGORL_HOME/tasks/mining/runs``: mining again, or resuming an interrupted run, reads finished
runs back (a *cache hit*) instead of running them.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import threading
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from legorl.errors import LegoRLError
from legorl.rules import BLOCKED_PLUGINS
from legorl.sandbox.base import WORKSPACE, SandboxBackend, SandboxSpec
from legorl.tasks.environment import env_recipe
from legorl.tasks.mining.sources import mining_root
from legorl.tasks.model import TaskEnvironment

RUN_FORMAT = 4  # bump when what a run records (or how) changes: old cache entries no longer match
GLOBAL = "<global>"
_MARK = "LEGORL-MINING-PROBE-"
_ERR = "LEGORL-MINING-STDERR"
_MESSAGE_LIMIT = 800
_FRAMES = 8

PROBE = r"""
import json, os, sys, threading
import pytest

_out = {"tests": {}, "durations": {}, "messages": {}, "frames": {}, "collect_errors": {}, "coverage": None}
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_COVER = os.environ.get("LEGORL_PROBE_COVERAGE") in ("1", "tests")
_PER_TEST = os.environ.get("LEGORL_PROBE_COVERAGE") == "tests"
_ROOT = os.environ.get("LEGORL_PROBE_ROOT", "/workspace") + "/"
_codes = {}
_current = ["<global>"]


def _tracer(frame, event, arg):
    if event == "call":
        _codes.setdefault(_current[0], set()).add(frame.f_code)
    return None


# Python 3.12+: sys.monitoring reports a function's first start (and resume) in each context and is
# then silent for it until the context changes (restart_events), where settrace calls back on every
# call: on a suite that computes (more-itertools' primes) the traced run took minutes, not seconds.
_TOOL = None
if _COVER and hasattr(sys, "monitoring"):
    for _tool in range(1, 6):
        try:
            sys.monitoring.use_tool_id(_tool, "legorl-mining-probe")
        except ValueError:  # taken (coverage.py, a profiler)
            continue
        _TOOL = _tool
        break


def _first_start(code, offset):
    _codes.setdefault(_current[0], set()).add(code)
    return sys.monitoring.DISABLE


def _enter(context):  # record the functions run from now on under `context`
    _current[0] = context
    if _TOOL is not None:
        sys.monitoring.restart_events()


if _TOOL is not None:
    _events = sys.monitoring.events.PY_START | sys.monitoring.events.PY_RESUME
    sys.monitoring.register_callback(_TOOL, sys.monitoring.events.PY_START, _first_start)
    sys.monitoring.register_callback(_TOOL, sys.monitoring.events.PY_RESUME, _first_start)
    sys.monitoring.set_events(_TOOL, _events)
elif _COVER:
    sys.settrace(_tracer)
    threading.settrace(_tracer)


def _set(outcome, nodeid):
    old = _out["tests"].get(nodeid)
    if old is None or _RANK[outcome] > _RANK[old]:
        _out["tests"][nodeid] = outcome


def _detail(report):
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    message = getattr(crash, "message", None) or (str(report.longrepr).strip().splitlines() or [""])[-1]
    frames = []
    entries = getattr(getattr(getattr(report, "longrepr", None), "reprtraceback", None), "reprentries", None) or []
    for entry in entries:
        loc = getattr(entry, "reprfileloc", None)
        if loc is not None:
            frames.append("%s:%s: %s" % (loc.path, loc.lineno, loc.message))
    return message[:__LIMIT__], frames[-__FRAMES__:]


@pytest.hookimpl(hookwrapper=True)
def pytest_collectstart(collector):
    if _COVER and isinstance(collector, pytest.Module):
        _enter(collector.nodeid)
    yield


def pytest_collectreport(report):
    if _COVER:
        _enter("<global>")
    if report.failed:
        message, frames = _detail(report)
        _out["collect_errors"][report.nodeid or "<session>"] = message


def pytest_collection_modifyitems(session, config, items):
    select = os.environ.get("LEGORL_PROBE_SELECT")
    if not select:
        return
    with open(select) as fh:
        want = set(fh.read().splitlines())
    keep = [i for i in items if i.nodeid in want or i.nodeid.split("::", 1)[0] in want]
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in want and i.nodeid.split("::", 1)[0] not in want])
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _enter(item.nodeid if _PER_TEST else item.nodeid.split("::", 1)[0])
    yield
    _enter("<global>")


def pytest_runtest_logreport(report):
    nid = report.nodeid
    _out["durations"][nid] = _out["durations"].get(nid, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)
    if report.failed:
        _set("failed" if report.when == "call" else "error", nid)
        if nid not in _out["messages"]:
            _out["messages"][nid], _out["frames"][nid] = _detail(report)
    elif report.skipped:
        _set("skipped", nid)
    elif report.when == "call":
        _set("passed", nid)


def pytest_sessionfinish(session):
    if _COVER:
        if _TOOL is not None:
            sys.monitoring.set_events(_TOOL, 0)
            sys.monitoring.free_tool_id(_TOOL)
        else:
            sys.settrace(None)
            threading.settrace(None)
        cov = {}
        for bucket, codes in _codes.items():
            seen = set()
            for code in codes:
                fn = code.co_filename
                if fn.startswith(_ROOT) and "site-packages" not in fn:
                    seen.add((fn[len(_ROOT):], code.co_firstlineno))
            cov[bucket] = sorted(seen)
        _out["coverage"] = cov
    with open(os.environ["LEGORL_PROBE_OUT"], "w") as fh:
        json.dump(_out, fh)
""".replace("__LIMIT__", str(_MESSAGE_LIMIT)).replace("__FRAMES__", str(_FRAMES))


@dataclass
class RunResult:
    """What one run saw (also a cache entry: :meth:`as_dict`)."""

    tests: dict[str, str] = field(default_factory=dict)  # nodeid -> passed | failed | error | skipped
    durations: dict[str, float] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)  # nodeid -> crash message of its failure
    frames: dict[str, list[str]] = field(default_factory=dict)  # nodeid -> "file:line: function" entries
    collect_errors: dict[str, str] = field(default_factory=dict)  # collector nodeid -> message
    coverage: dict[str, list[tuple[str, int]]] | None = None  # test file | <global> -> [(file, first line)]
    exit_code: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    problem: str = ""  # why the run gave no report (an environment failure), "" when it did
    cached: bool = False  # read back from the cache (not written there)

    @property
    def passed(self) -> set[str]:
        return {t for t, o in self.tests.items() if o == "passed"}

    @property
    def ok(self) -> bool:
        return not self.problem and not self.timed_out

    def as_dict(self) -> dict:
        out = asdict(self)
        out.pop("cached")
        return out

    @classmethod
    def from_dict(cls, data: dict) -> RunResult:
        cov = data.get("coverage")
        if cov is not None:
            data = {**data, "coverage": {k: [tuple(x) for x in v] for k, v in cov.items()}}
        return cls(**data)


@dataclass(frozen=True)
class RunSpec:
    """A snapshot, edits and a selection: everything a run's result depends on."""

    git_dir: Path
    commit: str
    tree_id: str  # the commit's git tree: the content the instance layer holds
    environment: TaskEnvironment | None
    edits: tuple[tuple[str, str | None], ...] = ()  # (path, new text | None: deleted)
    tests: tuple[str, ...] = ()  # test files (empty: the whole suite)
    coverage: bool = False
    coverage_tests: bool = False  # coverage by test (node id) rather than by test file
    timeout: float = 300.0
    max_fail: int = 0  # stop after this many failures (0: never): a verdict needs no more


def run_key_of(parts: object) -> str:
    """The cache key of anything JSON can write (sorted keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def run_key(spec: RunSpec) -> str:
    env = spec.environment.model_dump(mode="json") if spec.environment is not None else None
    return run_key_of(
        [
            RUN_FORMAT,
            spec.tree_id,
            env,
            sorted(spec.edits, key=lambda e: e[0]),
            sorted(spec.tests),
            spec.coverage,
            spec.max_fail,
            *(["by-test"] if spec.coverage_tests else []),  # absent: the keys of earlier runs stay what they were
        ]
    )


class RunCache:
    """Finished runs by :func:`run_key`; counts hits and misses (``legorl bench mine``)."""

    def __init__(self, root: Path | None = None, enabled: bool = True) -> None:
        self.root = root or mining_root() / "runs"
        self.enabled = enabled
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> RunResult | None:
        path = self._path(key)
        if self.enabled and path.is_file():
            try:
                result = RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, TypeError):
                result = None
            if result is not None:
                with self._lock:
                    self.hits += 1
                result.cached = True
                return result
        with self._lock:
            self.misses += 1
        return None

    def get_note(self, key: str) -> str | None:
        """A cached verdict text (``""``: fine), None when there is none."""
        path = self.root.parent / "confirmed" / key[:2] / f"{key}.json"
        if self.enabled and path.is_file():
            try:
                note = json.loads(path.read_text(encoding="utf-8"))["note"]
            except (json.JSONDecodeError, KeyError, TypeError):
                note = None
            if isinstance(note, str):
                with self._lock:
                    self.hits += 1
                return note
        with self._lock:
            self.misses += 1
        return None

    def put_note(self, key: str, note: str) -> None:
        _write_json(self.root.parent / "confirmed" / key[:2] / f"{key}.json", {"note": note})

    def put(self, key: str, result: RunResult) -> None:
        if result.ok:  # an environment failure is not a verdict: try again next time
            _write_json(self._path(key), result.as_dict())


def _write_json(path: Path, data: object) -> None:
    """``path`` written whole (a temporary file renamed into place: readers never see half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def _command(spec: RunSpec, python: str) -> str:
    out = f"/tmp/legorl-probe-{uuid.uuid4().hex[:8]}.json"
    argv = [python, "-B", "-m", "pytest", "-p", "legorl_mining_probe"]
    for plugin in BLOCKED_PLUGINS:
        argv += ["-p", f"no:{plugin}"]
    argv += [f"--rootdir={WORKSPACE}", f"--confcutdir={WORKSPACE}", "-q", "-rN", "--tb=short"]
    argv += ["-o", "cache_dir=/tmp/.pytest_cache", *([f"--maxfail={spec.max_fail}"] if spec.max_fail else [])]
    argv += ["--", *_files(spec.tests)] if spec.tests else []
    return (
        "mkdir -p /tmp/legorl-probe && cat > /tmp/legorl-probe/legorl_mining_probe.py && "
        f"export LEGORL_PROBE_OUT={out} PYTHONPATH=/tmp/legorl-probe${{PYTHONPATH:+:$PYTHONPATH}} && "
        f"cd {WORKSPACE} && {shlex.join(argv)} >/dev/null 2>/tmp/legorl-probe/err; rc=$?; "
        f"echo {_MARK}$rc; cat {out} 2>/dev/null || tail -c 3000 /tmp/legorl-probe/err; "
        f"echo; echo {_ERR}; tail -c 1500 /tmp/legorl-probe/err"
    )


_SELECT_FILE = ".legorl-mining-select"  # in the workspace: a test id list can outgrow one argument


def _files(tests: tuple[str, ...]) -> list[str]:
    """The test files a selection of files and test ids runs (the ids are picked by the probe)."""
    return list(dict.fromkeys(t.split("::", 1)[0] for t in tests))


def run_tests(spec: RunSpec, backend: SandboxBackend, cache: RunCache | None = None) -> RunResult:
    """Run ``spec`` in a fresh sandbox of ``backend`` (or read it from ``cache``)."""
    key = run_key(spec)
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    env = spec.environment
    sandbox_spec = SandboxSpec(
        source_dir=spec.git_dir,
        base_commit=spec.commit,
        env_recipe=env_recipe(env) if env is not None else None,
        setup_commands=tuple(env.setup) if env is not None else (),
        memory_mb=4096,
        max_pids=512,
    )
    python = (env.interpreter if env is not None else None) or getattr(backend, "python", None) or "python3"
    try:
        sandbox = backend.create(sandbox_spec)
    except LegoRLError as exc:
        return RunResult(problem=f"sandbox: {exc}")
    try:
        for path, text in spec.edits:
            if text is None:
                sandbox.exec(["rm", "-f", "--", path], timeout=30)
            else:
                sandbox.write_file(path, text)
        by_id = any("::" in t for t in spec.tests)
        if by_id:
            sandbox.write_file(_SELECT_FILE, "\n".join(spec.tests) + "\n")
        res = sandbox.exec(
            _command(spec, python),
            timeout=spec.timeout,
            env={
                "PYTHONHASHSEED": "0",
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                "PYTEST_ADDOPTS": "",
                "LEGORL_PROBE_COVERAGE": ("tests" if spec.coverage_tests else "1") if spec.coverage else "0",
                "LEGORL_PROBE_ROOT": WORKSPACE,
                "LEGORL_PROBE_SELECT": f"{WORKSPACE}/{_SELECT_FILE}" if by_id else "",
            },
            stdin=PROBE,
            max_output_bytes=64_000_000,
        )
    except LegoRLError as exc:
        return RunResult(problem=f"sandbox: {exc}")
    finally:
        try:
            sandbox.destroy()
        except LegoRLError:
            pass
    result = parse_output(res.stdout, res.duration_s)
    if res.timed_out:
        result = RunResult(seconds=res.duration_s, timed_out=True, problem=f"tests ran past {spec.timeout:g}s")
    if cache is not None:
        cache.put(key, result)
    return result


def parse_output(stdout: str, seconds: float) -> RunResult:
    stdout, _, err = stdout.partition(_ERR)
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    last = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    head, sep, body = stdout.rpartition(_MARK)
    if not sep:
        return RunResult(seconds=seconds, problem="no report from the test run: " + stdout[-500:])
    code, _, payload = body.partition("\n")
    try:
        data = json.loads(payload)
    except json.JSONDecodeError:
        return RunResult(seconds=seconds, exit_code=_int(code), problem="pytest gave no report: " + payload[-1500:])
    result = RunResult.from_dict({**data, "exit_code": _int(code), "seconds": round(seconds, 3)})
    if not result.tests and not result.collect_errors and result.exit_code not in (0, 5):
        result.problem = f"pytest exited {result.exit_code} without running a test: {last[-300:]}"
    return result


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None
