"""SymPy's own test runner (``bin/test``, :func:`sympy.testing.runtests._test`), hardened as far as a
runner that is itself part of the code under test allows.

SWE-bench runs ``bin/test -C --verbose <test files>`` and reads the verbose log ("``test_x ok``").
Printed lines are forgeable by any code the patch changes, so here nothing printed is read. The
runner (:data:`RUNNER`, run as ``python -I -S -B -c``) calls sympy's own ``_test`` on the same files,
cache off as ``-C`` sets it, with a reporter subclass that records each test's outcome, as sympy's
runner reports it, into a nonce-named file opened before any sympy code runs; the outcomes
come back in a nonce-delimited blob on a duplicate of the original stdout.

What is guaranteed (with the grader's diff filter and restore of the protected files):

* the runner's own files (:data:`legorl.rules.SYMPY_RUNNER_FILES`: ``bin/test``, ``runtests.py``,
  the ``raises``/``XFAIL``/``skip`` helpers) are test infrastructure: a diff that changes them is dropped, flagged
  and they are restored before the run;
* **runner integrity**: every function and method of those modules, as loaded, is compared (byte
  code, constants, names) with the same code compiled from the restored files, before and after the
  run; a module loaded from elsewhere, or a function replaced at import or at run time (``sympy/
  __init__.py`` patching ``SymPyTests.test_file``, say) is a forged result;
* **canaries**: a nonce-named test file with two failing tests joins the run; a run that does not
  report them failed is forged;
* a test counts only when the recorded outcome says so: a forged "``test_x ok``" line changes nothing.

* the in-process guard of :mod:`legorl.grading.audit_guard` (``cfg["guard"]``), installed before
  sympy is importable, as under pytest: frame and test-source peeking, ``/proc/self/*`` (the result
  file's descriptor) and ``gc`` are reported; the runner's files are the test side.

Not guaranteed: the runner runs in one process with the code under test, as sympy's does, so code
that changes what equality means inside sympy's own classes (``Basic.__eq__`` returning True) is not
caught here (the twin tests of :mod:`legorl.grading.behaviour` rewrite pytest tests only).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from legorl.grading.behaviour import INSTALL_GUARD
from legorl.grading.defenses import END_OF_RUN

__all__ = ["RUNNER", "SympyRun", "canary_source", "parse_output", "test_files"]

_OUTCOME_RANK = {"passed": 0, "xfail": 0, "skipped": 1, "xpass": 2, "missing": 3, "failed": 4, "error": 5}


def test_files(test_patch: str) -> list[str]:
    """The test modules a SWE-bench sympy instance runs: those its test patch touches."""
    paths = re.findall(r"^diff --git a/(\S+) b/", test_patch, re.M)
    return [p for p in dict.fromkeys(paths) if p.endswith(".py") and p.rsplit("/", 1)[-1].startswith("test_")]


def canary_source(tag: str) -> str:
    return f"def test_{tag}_a():\n    assert 1 == 2\n\n\ndef test_{tag}_b():\n    raise AssertionError('{tag}')\n"


@dataclass
class SympyRun:
    complete: bool = False
    rc: int | None = None
    tests: dict[str, str] = field(default_factory=dict)  # test function name → worst outcome
    canary: dict[str, str] = field(default_factory=dict)
    tamper: list[str] = field(default_factory=list)
    import_errors: list[str] = field(default_factory=list)


def parse_output(stdout: str, nonce: str, canary_names: list[str]) -> SympyRun:
    """The runner's blob (the last one) in ``stdout``; incomplete when there is none."""
    blobs = re.findall(r"<<LEGORL:" + re.escape(nonce) + r">>(.*?)<<END:" + re.escape(nonce) + ">>", stdout, re.S)
    if not blobs:
        return SympyRun()
    try:
        blob = json.loads(blobs[-1])
    except (json.JSONDecodeError, RecursionError):
        return SympyRun()
    if not isinstance(blob, dict):  # written inside the sandbox: anything but the runner's object is no report
        return SympyRun()
    run = SympyRun(complete=True, rc=blob.get("rc"), tamper=list(blob.get("tamper", [])))
    for line in str(blob.get("stream", "")).splitlines():
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(rec, dict):
            continue
        if "import_error" in rec:
            run.import_errors.append(str(rec["import_error"]))
            continue
        name, outcome = str(rec.get("name", "")), str(rec.get("outcome", "error"))
        target = run.canary if name in canary_names else run.tests
        prev = target.get(name)
        if prev is None or _OUTCOME_RANK.get(outcome, 5) > _OUTCOME_RANK.get(prev, 5):
            target[name] = outcome
    for name in canary_names:
        run.canary.setdefault(name, "missing")
    return run


RUNNER = (
    r"""
import os, sys
nonce = sys.stdin.readline().strip()
cfg = __import__("json").loads(sys.stdin.readline())
import json, types, importlib, traceback
work = cfg["workspace"]
extra = [p for p in os.environ.get("LEGORL_PYTHONPATH", "").split(":") if p and p != work]
out_fd = os.dup(1)
os.dup2(2, 1)
os.environ["SYMPY_USE_CACHE"] = "no"  # bin/test -C, as SWE-bench runs it
base = "/tmp/" + nonce
os.makedirs(base, exist_ok=True)
stream_path = base + "/" + nonce + ".stream"
sfd = os.open(stream_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
def emit(rec):
    os.write(sfd, (json.dumps(rec) + "\n").encode())
CO_NEWLOCALS = 0x2
def _fp(co):
    consts = tuple(repr(c) for c in co.co_consts if not isinstance(c, types.CodeType))
    return (co.co_code, consts, co.co_names)
import contextlib
WRAPPERS = set()  # code a decorator may wrap a watched function in: contextlib's, the watched files' own
def _nested(co):
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            WRAPPERS.add(_fp(c))
            _nested(c)
_nested(contextlib.contextmanager.__code__)
def _pristine(path):
    # every module-level function and class method, compiled from the restored file
    with open(path, "rb") as fh:
        top = compile(fh.read(), path, "exec", dont_inherit=True)
    _nested(top)
    out = {}
    for co in top.co_consts:
        if not isinstance(co, types.CodeType):
            continue
        if co.co_flags & CO_NEWLOCALS:
            out.setdefault(co.co_name, set()).add(_fp(co))  # a name defined in both branches of an if
        else:  # a class body
            for m in co.co_consts:
                if isinstance(m, types.CodeType) and m.co_flags & CO_NEWLOCALS:
                    out.setdefault(co.co_name + "." + m.co_name, set()).add(_fp(m))
    return out
def _live(module, qual):
    obj = module
    for i, part in enumerate(qual.split(".")):
        d = vars(obj) if isinstance(obj, (type, types.ModuleType)) else {}
        if part not in d:
            return None
        obj = d[part]
    for _ in range(5):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, property):
            obj = obj.fget
        elif isinstance(obj, types.FunctionType) and "__wrapped__" in vars(obj):
            if _fp(obj.__code__) not in WRAPPERS:  # a wrapper of unknown code hides whatever it wraps
                return None
            obj = obj.__wrapped__
    return obj
def _check(watched, when):
    bad = []
    for name, path, pristine in watched:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        if os.path.realpath(getattr(mod, "__file__", "") or "") != os.path.realpath(path):
            bad.append(f"{when}: {name} loaded from {getattr(mod, '__file__', None)}")
            continue
        for qual, fps in pristine.items():
            f = _live(mod, qual)
            code = getattr(f, "__code__", None)
            if code is None or _fp(code) not in fps:
                bad.append(f"{when}: {name}.{qual} replaced")
    return bad
watched = []  # compiled before the guard starts: it charges code compiled under a workspace name to the diff
for name, rel in cfg["watch"]:
    path = os.path.join(work, rel)
    if os.path.isfile(path):
        watched.append((name, path, _pristine(path)))
"""
    + INSTALL_GUARD
    + r"""
sys.path[:] = [work] + extra + [p for p in sys.path if p]
sys.dont_write_bytecode = True
canaries = []
for rel in cfg["canary_files"]:
    with open(os.path.join(work, rel), "w") as fh:
        fh.write(cfg["canary_source"])
    canaries.append(rel)
os.chdir(work)
tamper = []
rc = 99
try:
    rt = importlib.import_module(cfg["runtests"])
    tamper += _check(watched, "before the run")
    Base = rt.PyTestReporter
    class Recorder(Base):
        def entering_filename(self, filename, n):
            self._legorl_file = os.path.relpath(filename, work)
            return Base.entering_filename(self, filename, n)
        def entering_test(self, f):
            self._legorl_name = getattr(f, "__name__", "?")
            return Base.entering_test(self, f)
        def _legorl(self, outcome):
            emit({"file": getattr(self, "_legorl_file", ""), "name": getattr(self, "_legorl_name", "?"), "outcome": outcome})
        def test_pass(self, *a, **k):
            self._legorl("passed")
            return Base.test_pass(self, *a, **k)
        def test_fail(self, *a, **k):
            self._legorl("failed")
            return Base.test_fail(self, *a, **k)
        def test_exception(self, *a, **k):
            self._legorl("error")
            return Base.test_exception(self, *a, **k)
        def test_skip(self, *a, **k):
            self._legorl("skipped")
            return Base.test_skip(self, *a, **k)
        def test_xfail(self, *a, **k):
            self._legorl("xfail")
            return Base.test_xfail(self, *a, **k)
        def test_xpass(self, *a, **k):
            self._legorl("xpass")
            return Base.test_xpass(self, *a, **k)
        def import_error(self, filename, *a, **k):
            emit({"import_error": os.path.relpath(filename, work)})
            return Base.import_error(self, filename, *a, **k)
    rt.PyTestReporter = Recorder
    rc = int(rt._test(*cfg["files"], *canaries, verbose=True, tb="short", colors=False, seed=cfg["seed"]))
    rt.PyTestReporter = Base
except BaseException:
    traceback.print_exc()
tamper += _check(watched, "after the run")
"""
    + END_OF_RUN
    + r"""with open(stream_path, encoding="utf-8", errors="replace") as fh:
    stream = fh.read()
blob = json.dumps({"rc": rc, "stream": stream, "tamper": tamper})
os.write(out_fd, ("<<LEGORL:" + nonce + ">>" + blob + "<<END:" + nonce + ">>\n").encode())
os._exit(0)
"""
)
