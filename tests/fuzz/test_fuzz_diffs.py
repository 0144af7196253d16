"""Fuzzing the diff model and the grader with hostile diffs (issue 37).

Diffs are built from sections git accepts (``diff --git`` ones with modes, renames, binary markers;
plain ``---``/``+++`` ones), odd paths (spaces, ``@@``, quotes, backslashes, tabs, non-ASCII, ``..``,
test files, ``conftest.py``), C-quoted names (well formed or not), wrong hunk counts, garbage lines,
NUL bytes, lone surrogates and CRLF. Properties:

* **the model is git's** (many examples, no sandbox): whenever git accepts a diff that holds none of
  the inputs the model refuses on purpose, :func:`legorl.diffs.split_diff` names exactly git's files;
  it never raises anything but :class:`DiffError`;
* **what is applied is what the rules kept**: every file git would touch when applying the filter's
  output is a file the rules judged and kept (never a test file, ``conftest.py`` or a path outside);
* **the grader holds** (a few examples, real grader in bubblewrap): a hostile prediction graded beside
  the gold one through ``legorl grade``: the run writes its report, the gold one resolves, the hostile
  one gets a verdict of its own, and the process's peak memory grows by less than :data:`MEMORY_CAP`.
"""

from __future__ import annotations

import json
import os
import resource

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from legorl.diffs import DiffError, split_diff
from legorl.grading.diffcheck import git_names
from legorl.grading.grader import filter_diff_detailed
from legorl.rules import PathKind, classify_path, protected_paths
from legorl.tasks.loader import get_task

# Deterministic under CI: the same examples every run (the "ci" Hypothesis profile of tests/conftest.py
# is derandomized; "explore" is not, and a test may not pin another value than its profile's).
DERANDOMIZE = os.environ.get("HYPOTHESIS_PROFILE", "ci") != "explore"
MANY = settings(max_examples=300, deadline=None, derandomize=DERANDOMIZE)
FEW = settings(
    max_examples=5, deadline=None, derandomize=DERANDOMIZE, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
MEMORY_CAP = 512 * 1024 * 1024  # bytes of peak-RSS growth a hostile grading may cost the host process

PROTECTED = ["tests/test_arith.py", "tests/test_stats.py"]
name_parts = st.sampled_from(
    ["calc", "tests", "test_arith.py", "conftest.py", "m.py", "a b.py", "x@@y", "@@ -1 +1 @@", "..", ".", "",
     "tést.py", 'q"t.py', "back\\slash", "tab\tname", "a", "b", "pytest.ini", "setup.cfg", "dev", "null"]
)  # fmt: skip
paths = st.lists(name_parts, min_size=1, max_size=4).map("/".join)


def _c_quote(path: str) -> str:
    """git's quoting of a name that needs it (octal bytes for non-ASCII)."""
    out = []
    for b in path.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\t":
            out.append("\\t")
        elif b < 32 or b >= 127:
            out.append(f"\\{b:03o}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


@st.composite
def names(draw, prefix: str) -> str:
    path = draw(paths)
    style = draw(st.sampled_from(["plain", "plain", "quoted", "bad-quote", "no-prefix", "abs"]))
    if style == "quoted":
        return _c_quote(prefix + path)
    if style == "bad-quote":
        return '"' + prefix + path.replace("/", "\\q/", 1) + '"'
    if style == "no-prefix":
        return path
    if style == "abs":
        return "/" + path
    return prefix + path


@st.composite
def hunks(draw) -> str:
    minus = draw(st.lists(st.sampled_from(["x = 1", "", "def f(): pass", "--- a/m.py"]), max_size=3))
    plus = draw(
        st.lists(st.sampled_from(["x = 2", "import os", "+++ b/conftest.py", "diff --git a/q b/q"]), max_size=3)
    )
    old, new = len(minus), len(plus)
    if draw(st.booleans()):  # a header that lies about its counts
        old, new = old + draw(st.integers(-1, 2)), new + draw(st.integers(-1, 2))
    body = "".join(f"-{line}\n" for line in minus) + "".join(f"+{line}\n" for line in plus)
    if draw(st.booleans()):
        body += "\\ No newline at end of file\n"
    return f"@@ -{1 if old else 0},{max(old, 0)} +{1 if new else 0},{max(new, 0)} @@\n{body}"


@st.composite
def sections(draw) -> str:
    kind = draw(st.sampled_from(["git", "git", "plain", "rename", "binary", "mode", "garbage"]))
    a, b = draw(names("a/")), draw(names("b/"))
    if kind == "garbage":
        return draw(
            st.sampled_from(["hello\n", "@@ -1 +1 @@\n", "--- a\n", "+++ b\n", "diff --git\n", "\n", "index 1..2\n"])
        )
    if kind == "plain":
        first = draw(st.sampled_from([a, "/dev/null"]))
        date = draw(st.sampled_from(["", "\t2020-01-01", " 2020-01-01 00:00:00.000000000 +0000"]))
        return f"--- {first}{date}\n+++ {b}{date}\n" + draw(hunks())
    if kind == "rename":
        return f"diff --git {a} {b}\nsimilarity index 90%\nrename from {a[2:]}\nrename to {b[2:]}\n"
    mode = draw(st.sampled_from(["100644", "100755", "120000", "160000"]))
    header = f"diff --git {a} {a}\n"
    if kind == "mode":
        return header + f"old mode 100644\nnew mode {mode}\n"
    extra = draw(
        st.sampled_from(["", f"new file mode {mode}\n", f"deleted file mode {mode}\n", f"index 1..2 {mode}\n"])
    )
    if kind == "binary":
        return (
            header
            + extra
            + draw(
                st.sampled_from(["Binary files a/x and b/x differ\n", "GIT binary patch\nliteral 0\nHcmV?d00001\n\n"])
            )
        )
    old = "/dev/null" if "new file" in extra else a
    new = "/dev/null" if "deleted" in extra else a.replace("a/", "b/", 1)
    return header + extra + f"--- {old}\n+++ {new}\n" + draw(hunks())


@st.composite
def hostile_diffs(draw) -> str:
    diff = "".join(draw(st.lists(sections(), min_size=1, max_size=5)))
    damage = draw(st.sampled_from(["none", "none", "none", "nul", "surrogate", "crlf", "cut"]))
    if damage == "nul":
        diff = diff.replace("x", "\0", 1)
    elif damage == "surrogate":
        diff = diff.replace("x", "\udcff", 1)
    elif damage == "crlf":
        diff = diff.replace("\n", "\r\n")
    elif damage == "cut":
        diff = diff[: draw(st.integers(0, len(diff)))]
    return diff


def _refused_on_purpose(diff: str) -> bool:
    """Inputs the model refuses although git may read them (git would take them literally or cut them)."""
    return any(c in diff for c in ("\0", "\udcff", "\r", "\\q", "\\000", "\t2020", "\\t")) or "tab\t" in diff


@MANY
@given(hostile_diffs())
def test_the_model_names_the_files_git_names(diff):
    try:
        ours = split_diff(diff)
    except DiffError:
        ours = None
    try:
        theirs = git_names(diff if diff.endswith("\n") or not diff else diff + "\n")
    except DiffError:
        theirs = None
    except UnicodeEncodeError:  # a lone surrogate: not text git could be given either
        assert ours is None
        return
    if theirs is None or _refused_on_purpose(diff):
        return  # git refuses it (so must the grader, which asks git) or we refuse it on purpose
    assert ours is not None, f"git reads {theirs} but the model refuses the diff"
    new, old = theirs
    assert [fp.new_path or fp.old_path for fp in ours] == new
    if old is not None:
        assert [fp.old_path or fp.new_path for fp in ours] == old


@MANY
@given(hostile_diffs())
def test_git_applies_only_files_the_rules_kept(diff):
    protected = protected_paths(PROTECTED)
    kept, flags = filter_diff_detailed(diff, PROTECTED)
    if not kept:
        return
    new, old = git_names(kept)
    for name in {*new, *(old or [])}:
        kind = classify_path(name, protected)
        assert kind in (PathKind.SOURCE, PathKind.PYPROJECT, PathKind.TEST_MODULE), (name, kind, flags)
        assert not name.startswith("/"), name
    assert all(fp.paths for fp in split_diff(kept))


# --------------------------------------------------------------- the real grader, a few examples

TASK = get_task("legorl__trivial-001")


@st.composite
def hostile_predictions(draw) -> str:
    """A hostile diff, maybe with the fix, maybe with a big or deeply nested new module."""
    diff = draw(hostile_diffs())
    if draw(st.booleans()):
        diff = TASK.patch + diff
    extra = draw(st.sampled_from(["", "nested", "big"]))
    return diff + (_generated(extra) if extra else "")


def _generated(extra: str) -> str:
    """A new module the host cannot parse (nesting), or one whose tree would take ~0.8 GB (size)."""
    body = "x = 1" + "+1" * 150_000 if extra == "nested" else "y = [" + ", ".join(["f(a, 1)"] * 400_000) + "]"
    return f"diff --git a/calc/gen.py b/calc/gen.py\nnew file mode 100644\n--- /dev/null\n+++ b/calc/gen.py\n@@ -0,0 +1 @@\n+{body}\n"


@pytest.mark.sandbox
@FEW
@given(hostile_predictions())
# always: the wave-3 cases that ended the run or the host's memory, whatever Hypothesis draws
@example(diff=TASK.patch + _generated("nested"))
@example(diff=TASK.patch + _generated("big"))
@example(diff=TASK.patch + "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+collect_ignore = ['tests']\n")
def test_a_hostile_prediction_beside_the_gold_one(tmp_path_factory, backend, monkeypatch, diff):
    from legorl.cli import app

    work = tmp_path_factory.mktemp("grade")
    monkeypatch.setattr("legorl.sandbox.bwrap.BwrapBackend", lambda **_: backend)
    preds = [
        {"instance_id": TASK.instance_id, "model_patch": TASK.patch, "model_name_or_path": "gold"},
        {"instance_id": TASK.instance_id, "model_patch": diff, "model_name_or_path": "hostile"},
    ]
    path, out = work / "preds.jsonl", work / "report.json"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res = CliRunner().invoke(app, ["grade", str(path), "--tasks", "trivial", "--out", str(out)])
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    gold, hostile = (report["instances"][f"{TASK.instance_id}@{m}"] for m in ("gold", "hostile"))
    assert gold["status"] == "ok" and gold["resolved"] and gold["reward"] == 1.0, gold
    assert hostile["status"] in ("ok", "env_failure", "grader_error"), hostile
    assert hostile["status"] != "grader_error", hostile["cause"]  # no hostile input reaches a bug of ours
    if hostile["blocking_flags"]:
        assert not hostile["resolved"] and hostile["reward"] == 0.0
    assert grown < MEMORY_CAP, f"peak RSS grew by {grown / 2**20:.0f} MiB"
