"""The one diff model reads a diff as ``git apply`` does (issue 37): every section kind git accepts,
names as git resolves them, and a refusal (``diff_rejected``, blocking; nothing applied) where git
would refuse or could read the diff another way. Each case is checked against git itself
(``git apply --numstat``, no repository, no files). No sandbox needed."""

from __future__ import annotations

import subprocess

import pytest

from legorl.diffs import DiffError, split_diff
from legorl.grading.diffcheck import git_names, read_diff
from legorl.grading.grader import classify_section, filter_diff_detailed
from legorl.rules import protected_paths

FIX = "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
PLAIN_CONFTEST = "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1,2 @@\n+import pytest\n+collect_ignore = ['tests']\n"


def _kinds(flags) -> set[tuple[str, str]]:
    return {(f.kind, f.severity) for f in flags}


def test_a_plain_section_after_a_git_one_is_a_second_file_and_the_conftest_hack_is_caught():
    """The wave-3 hole: sections started only at ``diff --git``, so the rules saw pkg/m.py alone while
    git created conftest.py too (reward 1 with no fix at all)."""
    diff = FIX + PLAIN_CONFTEST
    assert git_names(diff)[0] == ["pkg/m.py", "conftest.py"]  # git: two files
    assert [fp.paths for fp in split_diff(diff)] == [["pkg/m.py"], ["conftest.py"]]
    kept, flags = filter_diff_detailed(diff, ["tests/test_m.py"])
    assert kept == FIX
    assert ("modified_test_config", "blocking") in _kinds(flags)
    assert git_names(kept)[0] == ["pkg/m.py"]  # what is applied touches what the rules kept, nothing else


def test_hunks_hold_exactly_their_counted_lines():
    """Lines after a hunk's counted lines are not the file's (git skips them): nor are they in a rendering."""
    diff = FIX[:-1] + "\n+import os\n+os._exit(0)\n"
    (fp,) = read_diff(diff)
    assert fp.changed_lines() == (["x = 2"], ["x = 1"]) and fp.text == FIX
    with pytest.raises(DiffError, match="corrupt hunk line"):
        split_diff(FIX.replace("+x = 2\n", "garbage\n"))
    with pytest.raises(DiffError, match="without header"):
        split_diff("@@ -1 +1 @@\n-a\n+b\n")


def test_a_dropped_plain_section_cannot_change_how_git_names_the_kept_ones():
    """A plain section whose names have no ``/`` makes git read every later section with -p0: here the
    rules would see ``a/tests/test_a.py`` (not the protected test). Dropping the conftest section would
    give the kept one back its -p1 name, the protected test: the filter refuses the whole diff."""
    diff = (
        "--- conftest.py\n+++ conftest.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n"
        "@@ -1 +1 @@\n-assert f() == 2\n+assert True\n"
    )
    assert git_names(diff) == (["conftest.py", "b/tests/test_a.py"], ["conftest.py", "a/tests/test_a.py"])
    assert [fp.paths for fp in read_diff(diff)] == [["conftest.py"], ["a/tests/test_a.py", "b/tests/test_a.py"]]
    kept, flags = filter_diff_detailed(diff, ["tests/test_a.py"])
    assert kept == "" and ("diff_rejected", "blocking") in _kinds(flags)


@pytest.mark.parametrize(
    ("name", "diff", "why"),
    [
        (
            "malformed C quoting",
            'diff --git "a/t\\q.py" "b/t\\q.py"\n--- "a/t\\q.py"\n+++ "b/t\\q.py"\n@@ -1 +1 @@\n-a\n+b\n',
            "malformed C-quoted path",
        ),
        (
            "NUL in a quoted path",
            'diff --git "a/t\\000x.py" "b/t\\000x.py"\n--- "a/t\\000x.py"\n+++ "b/t\\000x.py"\n@@ -1 +1 @@\n-a\n+b\n',
            "NUL",
        ),
        (
            "non-UTF-8 bytes in a quoted path",
            'diff --git "a/t\\377.py" "b/t\\377.py"\n--- "a/t\\377.py"\n+++ "b/t\\377.py"\n@@ -1 +1 @@\n-a\n+b\n',
            "not UTF-8",
        ),
        ("non-UTF-8 text (a lone surrogate)", FIX.replace("x = 2", "x = '\udcff'"), "not UTF-8"),
        ("a raw NUL byte", FIX.replace("x = 2", "x = '\0'"), "NUL"),
        ("no file name", "diff --git a/x b/y\nold mode 100644\nnew mode 100755\n", "lacks filename"),
    ],
)
def test_diffs_git_would_misread_or_refuse_are_refused_whole(name, diff, why):
    with pytest.raises(DiffError, match=why):
        read_diff(diff)
    kept, flags = filter_diff_detailed(FIX + diff, [])
    assert kept == "" and _kinds(flags) == {("diff_rejected", "blocking")}, name
    assert why.split()[0] in flags[0].evidence["detail"]


def test_quoted_and_odd_names_are_git_s():
    diff = (
        'diff --git "a/t\\303\\251st \\"q\\".py" "b/t\\303\\251st \\"q\\".py"\n'
        'new file mode 100644\n--- /dev/null\n+++ "b/t\\303\\251st \\"q\\".py"\n@@ -0,0 +1 @@\n+x\n'
        "diff --git a/with space.py b/with space.py\n--- a/with space.py\n+++ b/with space.py\t\n"
        "@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/old name.py b/new name.py\nsimilarity index 90%\nrename from old name.py\n"
        "rename to new name.py\n--- a/old name.py\n+++ b/new name.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
        "--- x/y/plain.py 2020-01-01 00:00:00.000000000 +0000\n+++ q/y/plain.py 2021-01-01 00:00:00 +0000\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    sections = read_diff(diff)  # raises if git names any of them otherwise
    assert [(fp.old_path, fp.new_path) for fp in sections] == [
        (None, 'tést "q".py'),
        ("with space.py", "with space.py"),
        ("old name.py", "new name.py"),
        ("gone.py", None),
        ("y/plain.py", "y/plain.py"),
    ]


def test_every_section_kind_git_diff_writes_reads_back_as_git_reads_it(tmp_path):
    """Diffs written by git itself (what a rollout's diff is): names with spaces, tabs, quotes, non-ASCII
    and ``@@``; renames, copies, modes, deletions, symlinks, binaries, a file without a final newline."""
    repo = tmp_path / "r"
    repo.mkdir()

    def git(*args: str) -> str:
        env = {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "HOME": str(tmp_path),
            "PATH": "/usr/bin:/bin",
        }
        cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
        return subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True).stdout.decode("utf-8")

    git("init", "-q")
    for name in ["a.py", "rename me.py", "mode.sh", "gone.py", "bin.dat", "x@@y.py"]:
        (repo / name).write_text("".join(f"{name} {i}\n" for i in range(20)))  # unlike each other: no false renames
    git("add", "-A")
    git("commit", "-qm", "base")
    (repo / "a.py").write_text("".join(f"a.py {i}\n" for i in range(19)) + "changed")  # no final newline
    (repo / "rename me.py").rename(repo / "renamed.py")
    (repo / "mode.sh").chmod(0o755)
    (repo / "gone.py").unlink()
    (repo / "bin.dat").write_bytes(bytes(range(256)))
    (repo / "x@@y.py").write_text("".join(f"x@@y.py {i}\n" for i in range(19)) + "more\n")
    (repo / "tab\there.py").write_text("new\n")
    (repo / "ünï cödé.py").write_text("new\n")
    (repo / 'quo"te.py').write_text("new\n")
    (repo / "link").symlink_to("a.py")
    git("add", "-A")
    diff = git("diff", "--cached", "--binary", "-M", "HEAD")
    sections = read_diff(diff)
    got = {(fp.old_path, fp.new_path) for fp in sections}
    assert got == {
        ("a.py", "a.py"),
        ("rename me.py", "renamed.py"),
        ("mode.sh", "mode.sh"),
        ("gone.py", None),
        ("bin.dat", "bin.dat"),
        ("x@@y.py", "x@@y.py"),
        (None, "tab\there.py"),
        (None, "ünï cödé.py"),
        (None, 'quo"te.py'),
        (None, "link"),
    }
    by_new = {fp.new_path or fp.old_path: fp for fp in sections}
    assert by_new["bin.dat"].binary and by_new["link"].is_symlink and by_new["mode.sh"].modes == ["100644", "100755"]
    assert by_new["x@@y.py"].changed_lines() == (["more"], ["x@@y.py 19"])
    assert by_new["a.py"].text.endswith("\\ No newline at end of file\n")
    # the rendering of every section is the diff git reads, file for file
    assert git_names("".join(fp.text for fp in sections)) == git_names(diff)


def test_at_at_in_a_path_and_mode_120000_are_caught_by_the_symlink_and_binary_rules():
    """The header used to be cut at the first ``@@``: a path holding one hid the symlink and binary markers."""
    link = (
        "diff --git a/x@@y b/x@@y\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/x@@y\n"
        "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    )
    binary = (  # git diff --binary of a new 3-byte file
        "diff --git a/p@@q.py b/p@@q.py\nnew file mode 100644\nindex 0000000..8352675\nGIT binary patch\n"
        "literal 3\nKcmZQzWC8#H2LJ>B\n\nliteral 0\nHcmV?d00001\n\n"
    )
    by_index = (
        "diff --git a/sneaky b/sneaky\nindex 0000000..1111111 120000\n--- a/sneaky\n+++ b/sneaky\n"
        "@@ -1 +1 @@\n-a\n+/etc/passwd\n"
    )
    gitlink = "diff --git a/sub b/sub\nnew file mode 160000\nindex 0000000..1111111\n--- /dev/null\n+++ b/sub\n@@ -0,0 +1 @@\n+Subproject commit 1111111111111111111111111111111111111111\n"
    protected = protected_paths(["tests/test_a.py"])
    for diff, kind in [
        (link, "symlink_in_diff"),
        (binary, "binary_in_diff"),
        (by_index, "symlink_in_diff"),
        (gitlink, "symlink_in_diff"),
    ]:
        (fp,) = read_diff(diff)
        assert (kind, "blocking") in _kinds(classify_section(fp, protected)), diff
        kept, flags = filter_diff_detailed(FIX + diff, ["tests/test_a.py"])
        assert kept == FIX and (kind, "blocking") in _kinds(flags)


def test_a_test_file_replaced_by_a_directory_collides_with_the_protected_test():
    """Deleting a protected test and writing files under its name (or a file where a test's directory
    must be) is tampering with the test, whatever the new file is called."""
    diff = (
        "diff --git a/tests/test_a.py b/tests/test_a.py\ndeleted file mode 100644\n--- a/tests/test_a.py\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-def test_a(): assert False\n"
        "diff --git a/tests/test_a.py/data.txt b/tests/test_a.py/data.txt\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_a.py/data.txt\n@@ -0,0 +1 @@\n+x\n"
        "diff --git a/tests/unit b/tests/unit\nnew file mode 100644\n--- /dev/null\n+++ b/tests/unit\n@@ -0,0 +1 @@\n+x\n"
    )
    kept, flags = filter_diff_detailed(FIX + diff, ["tests/test_a.py", "tests/unit/test_b.py"])
    assert kept == FIX
    details = {f.evidence["path"]: f for f in flags if f.kind == "modified_test_file"}
    assert set(details) == {"tests/test_a.py", "tests/test_a.py/data.txt", "tests/unit"}
    assert all(f.severity == "blocking" for f in details.values())
    assert details["tests/unit"].evidence["detail"] == "collides with tests/unit"


def test_a_missing_final_newline_is_supplied():
    (fp,) = read_diff(FIX[:-1])
    assert fp.text == FIX
