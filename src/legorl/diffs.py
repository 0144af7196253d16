"""Unified diffs as per-file sections: the one diff parser of the project.

The grader (the agent's diff), the monitor and the task tools (a task's ``test_patch``), the task
checker and the scripted policies (a task's gold ``patch``) all read diffs through
:func:`split_diff`. A leaf module: it imports nothing from ``legorl``, so a harness can use it
without depending on the grader.

Paths come out as the diff spells them minus the ``a/``/``b/`` prefix (git's C quoting undone);
they are *not* normalised here: what a path means to the grader (``..``, test files) is
:mod:`legorl.grading.rules`' business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass(frozen=True)
class FilePatch:
    """One file's section of a diff: ``old_path`` is None for a new file, ``new_path`` for a deleted one."""

    old_path: str | None
    new_path: str | None
    text: str

    @property
    def paths(self) -> list[str]:
        """The paths the section touches (old and new, once each)."""
        return [p for p in dict.fromkeys([self.old_path, self.new_path]) if p]

    @property
    def header(self) -> str:
        """Everything before the first hunk (git's extended headers: modes, renames, binary markers)."""
        return self.text.split("@@", 1)[0]

    def changed_lines(self) -> tuple[list[str], list[str]]:
        """(added, removed) lines of the hunks, without their ``+``/``-``."""
        added: list[str] = []
        removed: list[str] = []
        in_hunk = False
        for line in self.text.splitlines():
            if line.startswith("@@"):
                in_hunk = True
            elif in_hunk and line.startswith("+") and not line.startswith("+++"):
                added.append(line[1:])
            elif in_hunk and line.startswith("-") and not line.startswith("---"):
                removed.append(line[1:])
        return added, removed

    def added_line_numbers(self) -> list[int]:
        """The new file's numbers (from 1) of the lines the hunks add."""
        out: list[int] = []
        line_no = 0
        in_hunk = False
        for line in self.text.splitlines():
            if m := _HUNK.match(line):
                in_hunk, line_no = True, int(m.group(1))
            elif not in_hunk or line.startswith("\\"):
                continue
            elif line.startswith("+"):
                out.append(line_no)
                line_no += 1
            elif not line.startswith("-"):
                line_no += 1
        return out


def _unquote(path: str) -> str:
    """Undo git's C-style quoting of unusual paths (``"a/t\\303\\251st.py"``)."""
    path = path.strip()
    if path.startswith('"') and path.endswith('"'):
        raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        path = raw.encode("latin-1").decode("utf-8", "replace")
    return path


def _strip_prefix(path: str) -> str | None:
    path = _unquote(path.split("\t")[0])
    if path == "/dev/null":
        return None
    if path[:2] in ("a/", "b/"):
        return path[2:]
    return path


_GIT_HEADER = re.compile(r'^diff --git ("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')


def split_diff(diff: str) -> list[FilePatch]:
    """Split a unified diff (git or plain) into per-file sections."""
    lines = diff.splitlines(keepends=True)
    starts: list[int] = []
    git_style = any(line.startswith("diff --git ") for line in lines)
    for i, line in enumerate(lines):
        if git_style:
            if line.startswith("diff --git "):
                starts.append(i)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            starts.append(i)
    patches = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        block = lines[start:end]
        old: str | None = None
        new: str | None = None
        if git_style:
            m = _GIT_HEADER.match(block[0].rstrip("\n"))
            if m:
                old, new = _strip_prefix(m.group(1)), _strip_prefix(m.group(2))
        for line in block[1:]:
            if line.startswith("--- "):
                old = _strip_prefix(line[4:].rstrip("\n"))
            elif line.startswith("+++ "):
                new = _strip_prefix(line[4:].rstrip("\n"))
                break
            elif line.startswith("rename from "):
                old = _unquote(line[len("rename from ") :].rstrip("\n"))
            elif line.startswith("rename to "):
                new = _unquote(line[len("rename to ") :].rstrip("\n"))
            elif line.startswith("new file mode"):
                old = None
            elif line.startswith("deleted file mode"):
                new = None
            elif line.startswith("@@"):
                break
        patches.append(FilePatch(old, new, "".join(block)))
    return patches


def touched_paths(diff: str) -> list[str]:
    """Every path a diff touches (old and new names), in order, once each."""
    return list(dict.fromkeys(p for fp in split_diff(diff) for p in fp.paths))
