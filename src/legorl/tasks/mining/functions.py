"""Which function a line of Python source belongs to, by qualified name.

A function's qualified name is the one CPython gives its code object (``co_qualname``):
``Class.method``, ``outer.<locals>.inner``; a line outside every function belongs to ``<module>``.
Mutations, mined commits, the coverage probe (which reports ``(file, first line)`` of each code
object it saw run) and the SWE-bench decontamination all name functions this way, so that an edit of
``click/core.py::Command.invoke`` means the same thing to each of them.

A leaf module of the miner: only the standard library and :mod:`legorl.pyparse`.
"""

from __future__ import annotations

import ast
import bisect
from dataclasses import dataclass

from legorl import pyparse

MODULE_SCOPE = "<module>"


@dataclass(frozen=True)
class FunctionSpan:
    qualname: str
    first_line: int  # the first decorator's line, else the ``def`` line (a code object's co_firstlineno)
    def_line: int
    end_line: int


def function_spans(text: str) -> list[FunctionSpan]:
    """Every function (and method, nested or not) of a module, in source order; ``[]`` when the
    text does not parse."""
    try:
        tree = pyparse.parse(text, quiet=True)
    except (SyntaxError, ValueError):
        return []
    spans: list[FunctionSpan] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                spans.append(FunctionSpan(name, first, child.lineno, child.end_lineno or child.lineno))
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(spans, key=lambda s: (s.first_line, -s.end_line))


class FunctionIndex:
    """Line → innermost function of one module's text."""

    def __init__(self, text: str) -> None:
        self.spans = function_spans(text)
        self._starts = [s.first_line for s in self.spans]
        self.by_first_line = {s.first_line: s.qualname for s in self.spans}
        self.by_def_line = {s.def_line: s.qualname for s in self.spans}

    def at(self, line: int) -> str:
        """The qualified name of the innermost function holding ``line`` (``<module>`` if none).
        Functions nest or are disjoint, so the holder that starts last is the innermost."""
        for i in range(bisect.bisect_right(self._starts, line) - 1, -1, -1):
            span = self.spans[i]
            if span.first_line <= line <= span.end_line:
                return span.qualname
        return MODULE_SCOPE

    def code_object(self, first_line: int) -> str | None:
        """The function whose code object reports ``first_line`` as its ``co_firstlineno`` (its first
        decorator's line; the ``def`` line is accepted too)."""
        return self.by_first_line.get(first_line) or self.by_def_line.get(first_line)


def changed_functions(text: str, lines: list[int]) -> set[str]:
    """The functions of ``text`` that hold any of ``lines`` (1-based)."""
    index = FunctionIndex(text)
    return {index.at(line) for line in lines}
