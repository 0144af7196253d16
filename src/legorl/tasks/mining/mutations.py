"""Injected bugs: single-point mutations of a repository's functions, as minimal text edits.

Kinds (SWE-smith's procedural families, ``swesmith.bug_gen.procedural``, re-done on the standard
library's :mod:`ast`: their package imports tree-sitter grammars for seven languages at import and
rewrites whole functions through libcst with random draws, where the miner wants an enumerable,
deterministic list of one-point edits it can key, order by seed and deduplicate):

==================  ============================================================  ===================
kind                what changes                                                   SWE-smith's family
==================  ============================================================  ===================
flip_comparison     ``<`` ↔ ``<=``, ``==`` ↔ ``!=``, ``is`` ↔ ``is not``, ``in``…   func_pm_flip_operators
swap_plus_minus     ``+`` ↔ ``-`` (and ``+=`` ↔ ``-=``)                           func_pm_op_change
swap_and_or         ``and`` ↔ ``or``                                               func_pm_flip_operators
negate_if           ``if c`` → ``if not (c)`` and back                             func_pm_ctrl_invert_if
drop_return_value   ``return x`` → ``return``                                      (remove)
off_by_one          an integer constant ± 1 (bounds, indices, counts)              func_pm_op_change_const
swap_operands       ``a - b`` → ``b - a`` (non-commutative operators), ``a < b`` → ``b < a``   func_pm_op_swap
swap_arguments      ``f(a, b, …)`` → ``f(b, a, …)``                                 (argument order)
flip_boolean        ``True`` ↔ ``False``                                           func_pm_op_change_const
remove_statement    a call or assignment statement deleted                         func_pm_remove_assign
remove_conditional  an ``if`` without ``else`` deleted                             func_pm_remove_cond
remove_loop         a ``for``/``while`` loop deleted                               func_pm_remove_loop
==================  ============================================================  ===================

The first six come from :func:`legorl.tasks.synth.find_mutations` (``legorl tasks synth``). Only
code inside function bodies is mutated (never a docstring, never module or class level), and an
edit that leaves the module's AST unchanged, or does not parse, is no mutation. Every mutation is
named by the function it edits (:mod:`legorl.tasks.mining.functions`) and keyed by (file, function,
kind, before → after), the key deduplication uses.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from legorl import pyparse
from legorl.tasks.ast_edits import ModuleEdits, SourceText
from legorl.tasks.mining.functions import MODULE_SCOPE, FunctionIndex
from legorl.tasks.synth import find_mutations

_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift)
_ORDERED = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_REMOVABLE = {
    ast.Expr: "remove_statement",
    ast.Assign: "remove_statement",
    ast.AugAssign: "remove_statement",
    ast.AnnAssign: "remove_statement",
    ast.If: "remove_conditional",
    ast.For: "remove_loop",
    ast.While: "remove_loop",
}


@dataclass(frozen=True)
class Mutant:
    path: str  # repository-relative
    function: str  # qualified name of the function it edits
    kind: str
    line: int
    before: str  # the replaced text
    after: str
    mutated: str  # the whole mutated module

    @property
    def key(self) -> str:
        """What makes two mutants the same bug (dedup across sources and runs): the function, the kind
        and a hash of the edit."""
        edit = hashlib.sha256(f"{self.before}\0{self.after}".encode()).hexdigest()[:16]
        return f"{self.path}::{self.function}::{self.kind}::{edit}"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()[:12]


class _Text(SourceText):
    """A module's text, and the whole lines a statement stands on."""

    def whole_lines(self, node: ast.stmt) -> tuple[int, int] | None:
        """The span of ``node``'s lines when it has them to itself (else None)."""
        start, end = self.span(node)
        line_start = self.starts[node.lineno - 1]
        end_line = node.end_lineno or node.lineno
        line_end = self.starts[end_line]
        if self.text[line_start:start].strip() or self.text[end:line_end].split("#", 1)[0].strip(" \t\r\n;"):
            return None
        return line_start, line_end


def _blocks(fn: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(fn):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block
        for handler in getattr(node, "handlers", []) or []:
            yield handler.body


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _edits(tree: ast.Module, src: _Text) -> Iterator[tuple[str, int, int, int, str]]:
    """(kind, line, start, end, new text) of the miner's own kinds."""
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen: set[int] = set()
    for fn in functions:
        for block in _blocks(fn):
            for i, stmt in enumerate(block):
                kind = _REMOVABLE.get(type(stmt))
                if kind is None or len(block) < 2 or _is_docstring(stmt) or id(stmt) in seen:
                    continue
                if isinstance(stmt, ast.If) and stmt.orelse:
                    continue
                if isinstance(stmt, ast.Expr) and not isinstance(stmt.value, ast.Call):
                    continue
                if i == 0 and _is_docstring(block[0]):
                    continue
                seen.add(id(stmt))
                lines = src.whole_lines(stmt)
                if lines is not None:
                    yield kind, stmt.lineno, lines[0], lines[1], ""
        for node in (n for stmt in fn.body for n in ast.walk(stmt)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, ast.BinOp) and isinstance(node.op, _NON_COMMUTATIVE):
                (a0, a1), (b0, b1) = src.span(node.left), src.span(node.right)
                yield "swap_operands", node.lineno, a0, b1, src.text[b0:b1] + src.text[a1:b0] + src.text[a0:a1]
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], _ORDERED):
                (a0, a1), (b0, b1) = src.span(node.left), src.span(node.comparators[0])
                yield "swap_operands", node.lineno, a0, b1, src.text[b0:b1] + src.text[a1:b0] + src.text[a0:a1]
            elif isinstance(node, ast.Call) and len(node.args) >= 2:
                first, second = node.args[0], node.args[1]
                if isinstance(first, ast.Starred) or isinstance(second, ast.Starred):
                    continue
                (a0, a1), (b0, b1) = src.span(first), src.span(second)
                if src.text[a0:a1] != src.text[b0:b1]:
                    yield "swap_arguments", node.lineno, a0, b1, src.text[b0:b1] + src.text[a1:b0] + src.text[a0:a1]
            elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
                start, end = src.span(node)
                yield "flip_boolean", node.lineno, start, end, str(not node.value)


def mutants(repo: Path, rel: str) -> list[Mutant]:
    """Every mutant of the functions of module ``rel`` in ``repo``, in source order."""
    try:
        text = (repo / rel).read_text(encoding="utf-8")
        tree = pyparse.parse(text, quiet=True)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    index = FunctionIndex(text)
    out = [
        Mutant(rel, index.at(m.lineno), m.kind, m.lineno, m.before, m.after, m.mutated)
        for m in find_mutations(repo, rel)
    ]
    edits = ModuleEdits(text, tree)
    for kind, line, start, end, new in _edits(tree, _Text(text)):
        if edits.changes_tree(start, end, new):
            out.append(Mutant(rel, index.at(line), kind, line, text[start:end], new, text[:start] + new + text[end:]))
    unique = {m.key: m for m in out if m.function != MODULE_SCOPE}
    return sorted(unique.values(), key=lambda m: (m.line, m.kind, m.before, m.after))
