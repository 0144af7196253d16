"""Reward integrity, wave 3 (issue 37): a guard that cannot be blinded or bypassed.

Each attacker (``tests/grading/attackers_wave3.py``, eight families and the attacks beyond them) is
first shown to be real — appended to the package's ``__init__.py`` with no fix, it turns the failing
tests green under plain pytest — and then graded from that diff alone: reward 0 and a blocking flag of
the kinds the family's defense raises (an attack that gets through, or is stopped only by another
family's defense, FAILS). The honest side: gold patches keep reward 1 with no flag, and what the code
under test can see of a twin run is what it sees of the main run.

CI grades every attacker on one task (trivial, easy and medium in turn; family 7 on the task whose
FAIL_TO_PASS test calls ``pytest.raises``, family 8 on parametrized variants of those three); and proves
family 8's defense by exhaustion (``test_pytest_state_is_out_of_reach_of_the_code_under_test``);
``sweep_wave3.py`` grades every attacker on every task and every gold patch, and prints the figures per
family.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from legorl.grading import behaviour, defenses
from legorl.grading.grader import grade
from legorl.grading.twins import twin_face, twin_source
from legorl.tasks.loader import get_task, load_suite

sys.path.insert(0, str(Path(__file__).parent))
import attackers_wave3 as attackers
from test_attacks_wave2 import _after_test_patch, _grade_all, attack_diff, pkg_dir, run_runner_outside_a_sandbox

TASKS = ["legorl__trivial-001", "legorl__easy-001", "legorl__medium-001"]
WORKERS = 2


def tasks_for(family: str) -> list[str]:
    return attackers.FAMILY_TASKS.get(family, TASKS)


def ci_jobs(family: str) -> list[tuple[str, str, str, set[str]]]:
    """(task, attacker, code, kinds): every attacker of ``family`` on one of its tasks, in turn."""
    tasks = tasks_for(family)
    return [
        (tasks[i % len(tasks)], name, code, kinds)
        for i, (name, (code, kinds)) in enumerate(attackers.FAMILIES[family].items())
    ]


def plain_pytest(task_id: str, code: str | None, tmp_path: Path) -> subprocess.CompletedProcess:
    """The task's FAIL_TO_PASS tests under plain pytest, with ``code`` appended to the package (no fix)."""
    task = attackers.load_task(task_id)
    work = _after_test_patch(task, tmp_path / uuid.uuid4().hex[:8])
    if code is not None:
        with open(work / pkg_dir(task) / "__init__.py", "a") as fh:
            fh.write("\n" + code + "\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.FAIL_TO_PASS],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"},
    )


# -- the attacks are real -------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(attackers.FAMILIES))
def test_each_attack_turns_the_failing_tests_green_under_plain_pytest(family, tmp_path):
    jobs = [(tid, name, code) for tid, name, code, _ in ci_jobs(family)]
    # the tests fail without the attack, on every task the family is graded on
    for tid in {tid for tid, _, _ in jobs}:
        assert plain_pytest(tid, None, tmp_path).returncode == 1, tid
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = list(pool.map(lambda job: (job, plain_pytest(job[0], job[2], tmp_path)), jobs))
    fake = [f"{name} on {tid}:\n{r.stdout[-1500:]}{r.stderr[-800:]}" for (tid, name, _), r in runs if r.returncode != 0]
    assert not fake, "\n\n".join(fake)


# -- and stopped ----------------------------------------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.parametrize("family", sorted(attackers.FAMILIES))
def test_each_family_is_caught_by_its_defense(family, backend):
    jobs = [job for job in ci_jobs(family) if job[3]]
    failures = _grade_all(backend, jobs, load=attackers.load_task)
    assert not failures, "\n\n".join(failures)


@pytest.mark.sandbox
@pytest.mark.parametrize("oracle", sorted(attackers.PARAM_ORACLES))
def test_a_parametrized_tests_marks_and_id_give_no_values(oracle, backend, tmp_path):
    # the test module's parametrize marks, the running test's id (test_add_many[2-3-5]) read directly
    # or by a child: each turns the tests green under plain pytest, none under the guard
    code, tasks = attackers.PARAM_ORACLES[oracle]
    for tid in tasks:
        assert plain_pytest(tid, code, tmp_path).returncode == 0, f"not a real attack on {tid}"
    for tid in tasks:
        task = attackers.load_task(tid)
        r = grade(task, attack_diff(task, code), backend)
        assert (r.status, r.reward) == ("ok", 0.0), (tid, r.tests, r.flags)
        assert all(r.tests.get(n) != "passed" for n in task.FAIL_TO_PASS), (tid, r.tests)


PARAMETRIZE_FORMS = """import pytest

from calc.arith import add

pytestmark = [pytest.mark.parametrize("k", [1, 2])]  # module level: every test of the file


@pytest.mark.parametrize("a, b, expected", [(2, 3, 5), pytest.param(10, -4, 6, id="negative")])
@pytest.mark.parametrize("z", [0])
def test_stacked(a, b, expected, z, k):
    assert add(a, b) + z == expected


@pytest.mark.parametrize("x", [1, 2])
class TestAdd:
    @pytest.mark.parametrize("y", [3])
    def test_sum(self, x, y, k):
        assert add(x, y) == x + y

    # a skip mark must keep working once the guard took the parametrize marks off (4 skips expected)
    @pytest.mark.skipif(True, reason="skipped on purpose")
    def test_skipped(self, x, k):
        raise AssertionError("never runs")

    def test_marks_at_run_time(self, request, x, k):
        assert {m.name for m in request.node.iter_markers()} >= {"parametrize"}
        assert add(1, 1) == 2
"""


@pytest.mark.sandbox
def test_parametrize_forms_grade_as_under_plain_pytest(backend, tmp_path):
    # the guard takes the parametrize marks off the collected tests (the test-module oracle): module,
    # class and stacked marks, pytest.param ids, skipif, and marks read at run time work as before
    task = get_task("legorl__trivial-001")
    path = "tests/test_forms.py"
    lines = PARAMETRIZE_FORMS.splitlines(True)
    added = "".join("+" + line for line in lines)
    new_file = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{added}"
    task = task.model_copy(update={"test_patch": task.test_patch + new_file})
    work = _after_test_patch(task, tmp_path)
    subprocess.run(["git", "apply", "-"], input=task.patch.encode(), cwd=work, check=True)
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", path],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"},
    )
    outcomes = dict(
        (m.group(2), m.group(1).lower()) for m in re.finditer(r"^(PASSED|SKIPPED|FAILED) (\S+)", plain.stdout, re.M)
    )
    passed = sorted(n for n, o in outcomes.items() if o == "passed")
    assert len(passed) == 12 and "12 passed, 4 skipped" in plain.stdout, plain.stdout[-3000:]
    graded = task.model_copy(update={"FAIL_TO_PASS": passed, "PASS_TO_PASS": []})
    r = grade(graded, task.patch, backend)
    assert (r.status, r.reward) == ("ok", 1.0), (r.tests, r.flags)
    assert not [f for f in r.flag_details if f.severity == "blocking"], r.flags
    assert {n: r.tests.get(n) for n in passed} == dict.fromkeys(passed, "passed")


def test_the_running_tests_id_stays_one_per_test():
    from legorl.grading import audit_guard

    exposed: dict = {"__builtins__": {"__build_class__": __build_class__}, "__name__": "os"}
    exec(audit_guard._EXPOSED, exposed)
    environ = exposed["make_environ"](dict, lambda *args: None, ord)()  # a dict stands for os._Environ
    seen = []
    for nodeid in ("t.py::test_add[2-3-5]", "t.py::test_add[10--4-6]", "t.py::C::test_s[a[1]-b]"):
        environ["PYTEST_CURRENT_TEST"] = f"{nodeid} (call)"
        seen.append(environ["PYTEST_CURRENT_TEST"])
    assert [re.fullmatch(r"(t\.py::(?:C::)?test_\w)\w*\[[0-9a-f]{8}\] \(call\)", v) is not None for v in seen] == [
        True
    ] * 3, seen
    assert len(set(seen)) == 3 and not any(x in "".join(seen) for x in ("2-3-5", "10--4-6", "a[1]"))
    environ["PYTEST_CURRENT_TEST"] = "t.py::test_plain (setup)"  # no parameters: as pytest wrote it
    environ["OTHER"] = "x[2-3-5] (call)"
    assert (environ["PYTEST_CURRENT_TEST"], environ["OTHER"]) == ("t.py::test_plain (setup)", "x[2-3-5] (call)")


@pytest.mark.sandbox
def test_a_child_process_cannot_read_the_test_file(backend):
    """The one attack no in-process audit can see: the test file read by ``cat``. The file is readable
    by the runner process only (a link through its descriptor table; the runner non-dumpable), so the
    child reads nothing and the peeker answers with its real, wrong value: reward 0, and its process
    is on record (info: honest fixes start processes too)."""
    task = get_task("legorl__easy-001")
    code = attackers.FAMILIES["3_unaudited_source_read"]["child_process"][0]
    report = grade(task, attack_diff(task, code), backend)
    assert report.status == "ok" and report.reward == 0.0, report.log_tail
    assert all(report.tests[t] == "failed" for t in task.FAIL_TO_PASS), report.tests
    assert "subprocess" in {f.kind for f in report.flag_details}, report.flag_details


@pytest.mark.sandbox
def test_the_attacks_beyond_the_issue_are_caught(backend):
    jobs = [
        (TASKS[i % len(TASKS)], name, code, kinds)
        for i, (name, (code, kinds)) in enumerate(sorted(attackers.NEW.items()))
    ]
    failures = _grade_all(backend, jobs)
    assert not failures, "\n\n".join(failures)


@pytest.mark.sandbox
def test_a_forged_report_channel_earns_reward_1_without_the_guards_digests(backend):
    """The report-channel forgery (``json.dumps`` replaced after the tests ran, rewriting the runner's
    final report) is real against the grader itself: without the guard (and so without its digests of
    the result files) it gets reward 1 with no flag."""
    task = get_task("legorl__trivial-001")
    code = attackers.NEW["report_channel_forged"][0]
    report = grade(task, attack_diff(task, code), backend, behaviour_checks=False)
    assert report.reward == 1.0 and not report.blocking_flags(), (report.flags, report.log_tail)


# -- the honest side ------------------------------------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "task_id", ["legorl__easy-012", "legorl__medium-002", "legorl__medium-012", *attackers.PARAM_TASKS]
)
def test_gold_patches_keep_reward_1_with_no_flag(task_id, backend):
    task = attackers.load_task(task_id)
    report = grade(task, task.patch, backend)
    assert report.resolved and report.reward == 1.0 and report.flag_details == [], (
        [(f.kind, f.evidence) for f in report.flag_details],
        report.log_tail,
    )
    assert "twin run:" in report.log_tail and "no findings" in report.log_tail


def test_a_twin_file_reads_like_an_ordinary_test_file():
    """Every built-in FAIL_TO_PASS file: the twin's face on disk is as long as the test file, has its
    lines, its ``assert`` statements and none of the twin's shape (``if (...): return``, a final
    ``raise AssertionError``); only the perturbed literals differ. The code that runs is the rewrite."""
    checked = 0
    for task in load_suite("builtin"):
        source = Path(task.source_dir)
        patched: dict[str, str] = {}
        for nodeid in task.FAIL_TO_PASS:
            path = nodeid.split("::")[0]
            patched.setdefault(path, _after_patch_text(task, path, source))
        for path, text in patched.items():
            names = [n.split("::", 1)[1].split("[")[0] for n in task.FAIL_TO_PASS if n.startswith(path + "::")]
            face = twin_face(text, names)
            executed, records = twin_source(text, names)
            if not records:
                continue
            checked += 1
            assert len(face.encode()) == len(text.encode()), (task.instance_id, path)
            assert face.count("\n") == text.count("\n") and face.count("assert ") == text.count("assert ")
            assert not re.search(r"^\s*if \(.*\): return$|^\s*raise AssertionError$", face, re.M), face
            assert re.search(r"^\s*raise AssertionError$", executed, re.M)  # what runs is the rewrite
            diff = [(a, b) for a, b in zip(text.splitlines(), face.splitlines()) if a != b]
            assert all(len(a) == len(b) for a, b in diff), (task.instance_id, diff)  # none: runtime-only perturbations
    assert checked >= 40


def _after_patch_text(task, path: str, source: Path) -> str:
    """A file's text after the test patch (without a checkout: the patch adds the FAIL_TO_PASS tests)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        work = _after_test_patch(task, Path(tmp))
        return (work / path).read_text()


def _local_run(
    task, tmp_path: Path, twins: list[str] | None, args: tuple[str, ...] = ()
) -> tuple[behaviour.GuardReport, defenses.RunResult, str]:
    """The hardened runner with the guard on the gold fix, outside a sandbox: (guard, run, stdout);
    ``args``: more pytest arguments."""
    work = _after_test_patch(task, tmp_path)
    subprocess.run(["git", "apply", "-"], input=task.patch.encode(), cwd=work, check=True)
    nonce = uuid.uuid4().hex
    expected = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    canary = f"tests/test_{nonce[:12]}.py"
    cfg = {
        "workspace": str(work),
        "args": ["-p", "no:cacheprovider", f"--rootdir={work}", "-q", "-o", "junit_family=xunit2", *args],
        "tests": expected,
        "canary_files": [canary],
        "canary_names": ["test_c_a"],
        "canary_source": defenses.CANARY_SOURCE.format(n="c"),
    }
    files = sorted({canary, *(e.split("::")[0] for e in expected)})
    cfg["guard"], key = behaviour.guard_spec(
        [*task.test_files, *files],
        twins,
        touch_files=sorted({n.split("::")[0] for n in task.FAIL_TO_PASS}),
        hide_files=files,
    )
    res = run_runner_outside_a_sandbox(nonce, cfg)
    return (
        behaviour.parse_guard(res.stdout, nonce, key),
        defenses.parse_runner_output(res.stdout, nonce, []),
        res.stdout,
    )


def test_the_twin_that_runs_fails_like_an_ordinary_assert(tmp_path):
    """The twin run's code is the rewrite (the gold fix fails every twin), its failure an ``assert`` of
    two values pytest explains, on a line of the test, not a bare ``AssertionError``; the guard finds
    nothing and the test code that ran is the code it compiled."""
    task = get_task("legorl__medium-001")
    rep, run, _ = _local_run(task, tmp_path / "twin", task.FAIL_TO_PASS)
    assert rep.finish is not None and rep.findings == [] and not rep.errors, (rep.findings, rep.errors)
    assert rep.trimmed == {"type": "trimmed", "kept": 3, "dropped": 8}
    assert all(run.tests[t] == "failed" for t in task.FAIL_TO_PASS), run.tests
    messages = re.findall(r'<failure message="([^"]*)"', run.junit)
    twins = [m for m in messages if "canary" not in m and "1 + 1" not in m]
    assert len(twins) == 2 and all(re.match(r"AssertionError: assert .+ == ", m) for m in twins), messages
    # the main run: the same guard, the gold fix passes, nothing found
    rep, run, _ = _local_run(task, tmp_path / "main", None)
    assert rep.findings == [] and set(run.tests.values()) == {"passed", "failed"}
    assert all(run.tests[t] == "passed" for t in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS])


# What the code under test can reach without an audited call (no frames, gc, __defaults__ or __code__
# reads, no property evaluated): from every module (the test modules and conftest included), the import
# and hook slots of ``sys``, through dictionaries, containers, object and class namespaces, slots,
# closures, bound methods, partials and weak references. Written to OUT at the first call in a test.
_REACH = """
def _lg_reach():
    import collections, functools, json, sys, types, weakref
    import _pytest.capture, _pytest.config, _pytest.fixtures, _pytest.main, _pytest.nodes, _pytest.python
    import _pytest.reports, _pytest.runner, _pytest.terminal, pluggy
    state = (_pytest.main.Session, _pytest.config.Config, _pytest.nodes.Node, _pytest.fixtures.FixtureRequest,
             _pytest.python.CallSpec2, pluggy.PluginManager, _pytest.fixtures.FixtureDef, _pytest.runner.CallInfo,
             _pytest.reports.BaseReport, pluggy.HookRelay, _pytest.capture.CaptureManager,
             _pytest.terminal.TerminalReporter)
    skip = (types.FrameType, types.TracebackType, types.GeneratorType, types.CoroutineType, types.CodeType,
            str, bytes, int, float, bool, type(None))
    seen, hits, todo = set(), [], collections.deque()
    def push(o, path):
        if issubclass(type(o), state):
            hits.append([type(o).__name__, path])
        elif not issubclass(type(o), skip) and id(o) not in seen:
            seen.add(id(o))
            todo.append((o, path))
    for name, m in list(sys.modules.items()):
        push(m, 'sys.modules[%r]' % name)
    for name in ('meta_path', 'path_hooks', 'path_importer_cache', 'breakpointhook', 'excepthook',
                 'unraisablehook', 'displayhook', 'stdout', 'stderr', 'stdin'):
        push(getattr(sys, name, None), 'sys.' + name)
    while todo:
        o, path = todo.popleft()
        out = []
        seq = next((b for b in (list, tuple, set, frozenset, collections.deque) if issubclass(type(o), b)), None)
        if issubclass(type(o), dict):  # the base type's methods: a subclass's own code never runs
            items = list(dict.items(o))
            out = [(k, '%s[key]' % path) for k, _ in items] + [(v, '%s[%r]' % (path, k)) for k, v in items]
        elif seq is not None:
            out = [(v, '%s[%d]' % (path, i)) for i, v in enumerate(list(seq.__iter__(o)))]
        elif issubclass(type(o), types.FunctionType):
            for c in o.__closure__ or ():
                try:
                    out.append((c.cell_contents, path + '.<cell>'))
                except ValueError:
                    pass
            out.append((o.__globals__, path + '.__globals__'))
        elif issubclass(type(o), (types.MethodType, types.BuiltinMethodType)):
            out = [(getattr(o, '__self__', None), path + '.__self__'), (getattr(o, '__func__', None), path + '.__func__')]
        elif issubclass(type(o), functools.partial):
            out = [(o.func, path + '.func'), (o.args, path + '.args'), (o.keywords, path + '.keywords')]
        elif issubclass(type(o), (classmethod, staticmethod)):
            out = [(o.__func__, path + '.__func__')]
        elif issubclass(type(o), property):
            out = [(o.fget, path + '.fget'), (o.fset, path + '.fset')]
        elif issubclass(type(o), weakref.ref):
            out = [(o(), path + '()')]
        elif issubclass(type(o), type):
            out = [(v, '%s.%s' % (path, k)) for k, v in list(type.__dict__['__dict__'].__get__(o).items())]
            out.append((o.__mro__, path + '.__mro__'))
        else:
            try:
                own = object.__getattribute__(o, '__dict__')
            except Exception:
                own = {}
            out = [(v, '%s.%s' % (path, k)) for k, v in list(dict.items(own))] if type(own) is dict else []
            for klass in type(o).__mro__:
                for k, desc in list(type.__dict__['__dict__'].__get__(klass).items()):
                    if type(desc).__name__ == 'member_descriptor':
                        try:
                            out.append((desc.__get__(o), '%s.%s' % (path, k)))
                        except AttributeError:
                            pass
            out.append((type(o), 'type(%s)' % path))
        for v, p in out:
            push(v, p)
    with open(OUT, 'w') as fh:
        json.dump({'hits': hits, 'seen': len(seen)}, fh)
_lg_done = []
def _lg_make(f):
    def w(*a, **k):
        if not _lg_done:
            _lg_done.append(1)
            _lg_reach()
        return f(*a, **k)
    return w
_lg_wrap(_lg_make)
"""


def _reach(task, tmp_path: Path, guarded: bool, args: tuple[str, ...] = ()) -> tuple[dict, list[dict]]:
    """What ``_REACH`` found at the first call of the fixed package, and the guard's findings (guarded: the
    hardened runner with the guard; else plain pytest)."""
    out = tmp_path / f"reach-{uuid.uuid4().hex[:8]}.json"
    code = attackers.WRAP + _REACH.replace("OUT", repr(str(out)))
    findings: list[dict] = []
    if guarded:
        probed = task.model_copy(update={"patch": task.patch + attack_diff(task, code)})
        rep, run, stdout = _local_run(probed, tmp_path / uuid.uuid4().hex[:8], None, args)
        assert rep.finish is not None and not rep.errors, (rep.errors, stdout[-2000:])
        assert all(run.tests[t] == "passed" for t in task.FAIL_TO_PASS), run.tests
        findings = rep.findings
    else:
        work = _after_test_patch(task, tmp_path / uuid.uuid4().hex[:8])
        subprocess.run(["git", "apply", "-"], input=task.patch.encode(), cwd=work, check=True)
        with open(work / pkg_dir(task) / "__init__.py", "a") as fh:
            fh.write("\n" + code + "\n")
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, *task.FAIL_TO_PASS],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"},
        )
        assert run.returncode == 0, run.stdout[-2000:]
    return json.loads(out.read_text()), findings


@pytest.mark.parametrize("args", [(), ("-o", "log_cli=true")], ids=["default", "live-logging"])
def test_pytest_state_is_out_of_reach_of_the_code_under_test(args, tmp_path):
    """Family 8's proof by exhaustion: under plain pytest, the code under test reaches pytest's running
    state (the session, the configuration, the plugin manager, the running item) from modules and
    ``sys`` alone, with no audited call — the roots the oracles use; under the guard, from the same
    roots, it reaches none of it (every reference is sealed: reading one is ``runner_state_read``), and
    the walk itself, which reads nothing sealed, raises no finding. Live logging adds a root (the root
    logger's handler writes to the terminal reporter and holds the capture manager)."""
    task = attackers.load_task(attackers.PARAM_TASKS[0])
    plain, _ = _reach(task, tmp_path, guarded=False, args=args)
    paths = [path for _, path in plain["hits"]]
    roots = [
        r"(meta_path\[\d+\]|__loader__)\.(config|session)$",  # the assertion rewriter (a test module's loader)
        r"\.pytestPDB\._(config|pluginmanager)$",
        r"\.MARK_GEN\._config$",  # pytest.mark
        r"_pytest\.assertion\.util'\]\.(_config|_reprcompare\.<cell>)$",
        *([r"_handlerList\[\d+\]\(\)\.(stream|capture_manager)$"] if args else []),  # live logging
    ]
    assert plain["seen"] > 1000 and all(any(re.search(r, p) for p in paths) for r in roots), paths
    guarded, findings = _reach(task, tmp_path, guarded=True, args=args)
    assert guarded["seen"] > 1000 and guarded["hits"] == [], guarded["hits"]
    assert findings == [], findings


# honest code that uses what pytest's sealed state serves: it logs (under live logging the root logger's
# handler writes to the terminal reporter), flushes and prints the root handlers, reconfigures logging
# (dictConfig flushes and closes them), makes a pytest mark, and imports a module under the assertion
# rewriter (which reads its configuration and session)
_HONEST_USE = """
def _lg_make(f):
    def w(*a, **k):
        import importlib, logging, logging.config, pytest
        logging.getLogger('pkg').warning('called %s', f.__name__)
        for h in list(logging.getLogger().handlers):
            h.flush()
            repr(h)
        logging.config.dictConfig({'version': 1, 'disable_existing_loggers': False})
        pytest.mark.slow
        importlib.import_module('json.tool')
        return f(*a, **k)
    return w
_lg_wrap(_lg_make)
"""


@pytest.mark.parametrize(
    "args", [(), ("-o", "log_cli=true", "--log-cli-level=WARNING")], ids=["default", "live-logging"]
)
def test_honest_use_of_pytest_and_logging_reads_nothing_sealed(args, tmp_path):
    """The seals' readers are exact: code under test that logs, reconfigures logging, makes marks and
    imports modules (pytest reading its own state for it) raises no finding, every finding counting as
    the diff's."""
    task = attackers.load_task(attackers.PARAM_TASKS[0])
    probed = task.model_copy(update={"patch": task.patch + attack_diff(task, attackers.WRAP + _HONEST_USE)})
    rep, run, stdout = _local_run(probed, tmp_path, None, args)
    assert rep.finish is not None and not rep.errors, (rep.errors, stdout[-2000:])
    assert all(run.tests[t] == "passed" for t in task.FAIL_TO_PASS), run.tests
    assert rep.findings == [], rep.findings


_OBSERVER = """
def _lg_observe(tag):
    # what code under test can see of the run without any audited call
    import json, os, sys, linecache
    seen = {'tag': tag}
    for path in sorted(set(p.split('::')[0] for p in FILES)):
        tail = sys.modules['_py' + 'test.assertion.rewrite'].PYC_TAIL  # the sandbox's pytest's cache name
        pyc = os.path.join(os.path.dirname(path), '__pycache__', os.path.basename(path)[:-3] + tail)
        for name in (path, pyc):
            try:
                st = os.stat(name)
                seen[name] = [st.st_size, st.st_mode, st.st_nlink]
            except OSError as exc:
                seen[name] = type(exc).__name__
    seen['linecache'] = sorted(k for k in linecache.cache if '/tests/' in k)
    last = getattr(sys, 'last_value', None)
    seen['last'] = None if last is None else [type(last).__name__, list(map(str, last.args))]
    seen['modules'] = sorted(type(m).__name__ for n, m in list(sys.modules.items()) if n.startswith('test_'))
    with open(os.path.join(WORK, '.lg-observed'), 'a') as fh:  # pytest captures the output streams
        fh.write(json.dumps(seen) + '\\n')
_lg_observe('import')
_lg_wrap(lambda f: (lambda *a, **k: (_lg_observe('call'), f(*a, **k))[1]))
"""


class _Capture:
    """The real backend; each sandbox hands over what the observer wrote before it is destroyed."""

    def __init__(self, backend) -> None:
        self.backend, self.seen = backend, []
        self.name = backend.name

    def create(self, spec):
        sandbox, capture = self.backend.create(spec), self

        class Captured:
            def __getattr__(self, name: str):
                return getattr(sandbox, name)

            def destroy(self) -> None:
                try:
                    text = sandbox.read_file(".lg-observed")
                except (OSError, FileNotFoundError):
                    text = ""
                capture.seen.append([json.loads(line) for line in text.splitlines()])
                sandbox.destroy()

        return Captured()


@pytest.mark.sandbox
def test_the_twin_run_looks_like_the_main_run_from_inside(backend):
    """An observer in the package (no audited call: ``os.stat`` of the test files and of pytest's cached
    bytecode by name, ``linecache``, ``sys.last_value``, the test modules' classes), at import and at
    every call of the fixed function, sees the same in the twin run as in the main run: the face is as
    long as the test file, the cached bytecode padded alike, no test source in linecache, no last
    exception."""
    task = get_task("legorl__easy-001")
    observer = attackers.WRAP + _OBSERVER.replace("FILES", repr([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]))
    probe = attack_diff(task, observer.replace("WORK", repr("/workspace")))
    capture = _Capture(backend)
    report = grade(task, task.patch + probe, capture)
    assert report.resolved and report.flag_details == [], (
        [(f.kind, f.evidence) for f in report.flag_details],
        report.log_tail,
    )
    assert len(capture.seen) == 2 and all(capture.seen), capture.seen
    twin, main = capture.seen  # the twin sandbox is destroyed first
    # the twin run stops after its last twin: what it saw is what the main run saw up to there
    assert len(twin) >= 2 and twin == main[: len(twin)], (main, twin)
    assert main[0]["last"] is None and main[0]["linecache"] == [], main[0]
    # what it compared: the test files (links to files only this process can open) and, until pytest
    # loaded it, each one's cached bytecode (as long in both runs)
    pycs = [v for k, v in main[0].items() if k.endswith(".pyc")]
    assert any(isinstance(v, list) and v[0] % 65536 == 0 for v in pycs), main[0]
