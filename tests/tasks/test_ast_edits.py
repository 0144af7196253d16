"""ModuleEdits judges an edit on one top-level segment exactly as a parse of the whole module would."""

from __future__ import annotations

import ast
import sysconfig
import warnings
from pathlib import Path

import pytest

from legorl.tasks.ast_edits import ModuleEdits

MODULE = '''"""doc"""
import os; import sys

# a comment between statements
@decorator(
    1,
)
def f(a, b):
    return a - b  # trailing


class C:
    def g(self):
        if self.x < 2:
            return (1 +
                    2)
        return None
x = 1; y = 2
'''


def _whole(text: str, start: int, end: int, new: str) -> bool:
    try:
        return ast.dump(ast.parse(text[:start] + new + text[end:])) != ast.dump(ast.parse(text))
    except SyntaxError:
        return False


def _at(text: str, needle: str) -> tuple[int, int]:
    start = text.index(needle)
    return start, start + len(needle)


@pytest.mark.parametrize(
    ("needle", "new", "changes"),
    [
        ("a - b", "b - a", True),  # inside a decorated function
        ("a - b", "a  -  b", False),  # whitespace: the same tree
        ("a - b", "a - (b", False),  # does not parse
        ("return a - b  # trailing", "return a - b  # other comment", False),
        ("self.x < 2", "self.x <= 2", True),  # inside a class's method
        ("(1 +\n                    2)", "(1 -\n                    2)", True),  # across lines
        ("return None", "return", True),  # ``return`` has no value node, ``return None`` has one
        ("x = 1", "x = 2", True),  # a segment of two statements on one line
        ("1,\n)", "2,\n)", True),  # in a decorator, before the ``def`` line
        (
            "import sys\n\n# a comment between statements\n@decorator",
            "import sys\n@decorator",
            False,
        ),  # across segments
    ],
)
def test_an_edit_is_judged_as_the_whole_module_would_judge_it(needle, new, changes):
    start, end = _at(MODULE, needle)
    assert ModuleEdits(MODULE, ast.parse(MODULE)).changes_tree(start, end, new) == _whole(MODULE, start, end, new)
    assert _whole(MODULE, start, end, new) == changes


def _one_point_edits(text: str, tree: ast.Module):
    """Edits of the generators' sorts: operands swapped, integers moved by one, whole lines deleted
    (which often leaves a block empty: no parse)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, col: int) -> int:  # ast columns count UTF-8 bytes
        return starts[line - 1] + len(lines[line - 1].encode()[:col].decode())

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and node.end_lineno == node.lineno:
            a0, a1 = (
                offset(node.left.lineno, node.left.col_offset),
                offset(node.left.end_lineno, node.left.end_col_offset),
            )
            b0, b1 = (
                offset(node.right.lineno, node.right.col_offset),
                offset(node.right.end_lineno, node.right.end_col_offset),
            )
            yield a0, b1, text[b0:b1] + text[a1:b0] + text[a0:a1]
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            s, e = offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)
            yield s, e, str(node.value + 1)
        elif isinstance(node, ast.stmt) and node.col_offset > 0:
            yield starts[node.lineno - 1], starts[node.end_lineno], ""


def test_one_point_edits_of_stdlib_modules_are_judged_as_the_whole_module_would():
    checked = changed = 0
    modules = [p for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")) if p.stat().st_size < 30_000]
    for path in modules[:12]:
        text = path.read_text(encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
            judge = ModuleEdits(text, tree)
            for start, end, new in list(_one_point_edits(text, tree))[::4]:
                verdict = judge.changes_tree(start, end, new)
                assert verdict == _whole(text, start, end, new), (path.name, text[start:end], new)
                checked += 1
                changed += verdict
    assert checked > 300 and 0 < changed < checked  # both verdicts were exercised


def test_positions_count_the_line_ends_python_counts_not_form_feeds(tmp_path):
    """A form feed (between functions, inside a docstring) is no line end for ast; counted as one
    (str.splitlines), every mutant after it pointed at the wrong text."""
    from legorl.tasks.mining.mutations import mutants

    (tmp_path / "m.py").write_text(
        'def f(a, b):\n    return a - b\n\x0c\ndef g(x):\n    """doc\x0cmore"""\n    return x + 1\n'
    )
    found = {(m.kind, m.line, m.before, m.after) for m in mutants(tmp_path, "m.py")}
    assert ("swap_plus_minus", 6, "+", "-") in found and ("off_by_one", 6, "1", "2") in found
    original = (tmp_path / "m.py").read_text()
    for m in mutants(tmp_path, "m.py"):  # each edit replaced a non-empty piece of the text it names
        assert m.before and m.before in original and m.mutated != original
