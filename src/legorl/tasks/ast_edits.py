"""Whether a text edit changes a module's syntax tree, parsing only the top-level statement it touches.

The mutation generators (``legorl tasks synth``, the miner) try thousands of one-point edits per
module; parsing the whole module for each costs time quadratic in its size (six minutes for the
2,182 mutants of more-itertools' 5,500-line ``more.py``). A top-level statement starts on a fresh
line with the tokenizer in its initial state, so when the edited segment parses alone the module
parses, and its dump changes iff the segment's does. An edit whose segment does not parse alone
counts as not parsing, even where a bracket or string it opens would close in a later statement:
that is no one-point edit (no generator makes one).
"""

from __future__ import annotations

import ast
import bisect
import re

from legorl import pyparse

__all__ = ["ModuleEdits", "SourceText"]

# the line ends Python's tokenizer counts; str.splitlines also splits at \f, \v, \x1c-\x1e, \x85,
# U+2028/9, which sit inside lines (a form feed between functions, one in a docstring) and would shift
# every position after them
_LINE_END = re.compile(r"\r\n|\r|\n")


class SourceText:
    """A module's text with offsets of ast positions (line, UTF-8 byte column) in it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0, *(m.end() for m in _LINE_END.finditer(text))]
        if self.starts[-1] != len(text):
            self.starts.append(len(text))  # the last line has no line end
        self.lines = [text[a:b] for a, b in zip(self.starts, self.starts[1:])]

    def offset(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + len(self.lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            raise ValueError("node without an end position")
        return self.offset(node.lineno, node.col_offset), self.offset(end_line, end_col)  # type: ignore[attr-defined]


class ModuleEdits:
    """One module's text and tree; :meth:`changes_tree` judges edits of it."""

    def __init__(self, text: str, tree: ast.Module) -> None:
        self.text = text
        line_starts = SourceText(text).starts
        firsts = {min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))]) for s in tree.body}
        # segment i is text[bounds[i]:bounds[i + 1]]: a top-level statement with the comments after it
        self.bounds = sorted({0, *(line_starts[n - 1] for n in firsts if n > 1)}) + [len(text)]
        self._dumps: dict[int, str | None] = {}
        # a future import that changes tokenizing (``<>``) would not hold for a segment parsed alone
        self._whole = "barry_as_FLUFL" in text
        self._tree = tree

    def changes_tree(self, start: int, end: int, new: str) -> bool:
        """True when replacing ``text[start:end]`` by ``new`` gives a module that parses to another
        tree; False when the tree stays the same or the result does not parse."""
        i = bisect.bisect_right(self.bounds, start) - 1
        if self._whole or end > self.bounds[i + 1]:  # an edit across segments: judge the whole module
            return _dump(self.text[:start] + new + self.text[end:]) not in (None, ast.dump(self._tree))
        lo, hi = self.bounds[i], self.bounds[i + 1]
        if i not in self._dumps:
            self._dumps[i] = _dump(self.text[lo:hi])
        mutated = _dump(self.text[lo:start] + new + self.text[end:hi])
        return mutated is not None and mutated != self._dumps[i]


def _dump(source: str) -> str | None:
    try:
        return ast.dump(pyparse.parse(source, quiet=True))
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return None
