"""The one-line-fix agent's parsing and editing (the program itself; its rollouts: test_line_fix.py)."""

from __future__ import annotations

import json

import pytest

from legorl.harnesses.line_agent import LINE_REF, answer_line, is_statement, main, numbered, replace_line


@pytest.mark.parametrize(
    ("reply", "line", "valid"),
    [
        ("```python\n    return a + b\n```", "    return a + b", True),
        ("```\nreturn a + b\n```", "return a + b", True),
        ("```python\n3:     return a + b\n```", "    return a + b", True),  # copied line number dropped
        ("return a * b", "return a * b", False),  # no fence: used, but not the asked-for format
        ("```python\ndef pick(a, b):\n    return a\n```", "def pick(a, b):", False),  # the whole function
        ("```python\nreturn (a +\n```", "return (a +", False),
        ("", None, False),
        ("```python\n\n```", None, False),
    ],
)
def test_answer_line(reply, line, valid):
    assert answer_line(reply) == (line, valid)


def test_is_statement():
    assert is_statement("return xs[-1]") and is_statement("x = 1")
    assert not is_statement("def f():") and not is_statement("return a; return b") and not is_statement("if x:")


def test_replace_line_keeps_indentation(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('def f(a):\n    """Doc."""\n    return a\n')
    assert replace_line(f, 3, "return a + 1") is None
    assert f.read_text() == 'def f(a):\n    """Doc."""\n    return a + 1\n'
    assert "not in m.py" in replace_line(f, 9, "x")
    assert numbered("a\nb\n") == "1: a\n2: b"


def test_issue_must_name_a_line_inside_the_repository(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    (tmp_path / "repo").mkdir()
    (tmp_path / "outside.py").write_text("x = 1\n")
    for text in ("no line named here", "The bug is on line 1 of `../outside.py`."):
        issue = tmp_path / "issue"
        issue.write_text(text)
        code = main(["--base-url=http://127.0.0.1:9/v1", f"--issue-file={issue}", f"--root={tmp_path / 'repo'}"])
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert code == 1 and summary["finish"] == "no_line" and summary["turns"] == 0
    assert LINE_REF.search("on line 12 of `lib/x.py`.").groups() == ("12", "lib/x.py")
