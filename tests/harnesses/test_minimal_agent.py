from pathlib import Path

from legorl.harnesses.minimal_agent import parse_edits, relevant_files, source_files

KNOWN = [Path("calc/ops.py"), Path("calc/util.py")]


def test_path_on_line_before_fence():
    reply = "Here is the fix.\ncalc/ops.py\n```python\ndef add(a, b):\n    return a + b\n```\n"
    edits, problems = parse_edits(reply, KNOWN)
    assert edits == {"calc/ops.py": "def add(a, b):\n    return a + b\n"} and problems == []


def test_path_in_info_string_or_leading_comment_and_bare_name():
    e1, _ = parse_edits("```python calc/util.py\nx = 1\n```", KNOWN)
    e2, _ = parse_edits("```python\n# ops.py\nx = 2\n```", KNOWN)
    assert e1 == {"calc/util.py": "x = 1\n"}
    assert e2 == {"calc/ops.py": "# ops.py\nx = 2\n"}


def test_single_file_repo_needs_no_path_and_unterminated_fence_is_tolerated():
    edits, problems = parse_edits("```python\nx = 3\n", [Path("m.py")])
    assert edits == {"m.py": "x = 3\n"} and problems == []


def test_junk_and_escapes_are_reported_not_written():
    assert parse_edits("I think the bug is in add.", KNOWN) == ({}, ["no fenced code block found"])
    edits, problems = parse_edits("../../etc/passwd.py\n```python\nx\n```", KNOWN)
    assert edits == {} and "outside the repository" in problems[0]
    edits, problems = parse_edits("```\nx\n```", KNOWN)
    assert edits == {} and problems == ["a code block without a file path"]


def test_source_files_skip_tests(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text("def test(): pass\n")
    (tmp_path / "conftest.py").write_text("")
    assert source_files(tmp_path) == [Path("pkg/mod.py")]


def test_relevant_files_named_by_issue_or_traceback():
    files = [Path("calc/arith.py"), Path("calc/stats.py")]
    assert relevant_files(files, "`calc.arith.add(2, 3)` returns -1", "") == [Path("calc/arith.py")]
    assert relevant_files(files, "adding is broken", "calc/stats.py:4: in mean") == [Path("calc/stats.py")]
    assert relevant_files(files, "something is wrong", "") == files


def test_invented_path_with_one_shown_file_rewrites_that_file():
    edits, _ = parse_edits("mathx/ops.py\n```python\nx = 1\n```", [Path("calc/arith.py")])
    assert edits == {"calc/arith.py": "x = 1\n"}
