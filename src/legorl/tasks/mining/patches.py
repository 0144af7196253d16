"""What a patch edits, read the same way for mined tasks and SWE-bench instances.

* :func:`edited_lines`: per file, the pre-image lines a patch removes, and for added lines the line
  they follow (a statement added at the end of a function belongs to it), and the post-image lines
  it adds;
* :func:`edited_functions`: those lines named by function, ``(file, qualified name)``, given the
  pre-image (and, when known, post-image) texts of each file;
* :func:`hunk_names`: without any text, the function names git writes in hunk headers
  (``@@ -10,7 +10,7 @@ def foo(``) and the ``def``/``class`` lines inside hunks: a coarse fallback;
* :func:`diff_key`: a key of what a patch changes (each file's removed and added lines, spaces
  ignored, not the context or line numbers), so the same change made on two snapshots, or in two
  runs, is one change (like ``git patch-id``);
* :func:`diff_size`: files and lines changed (curriculum metadata).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from legorl.diffs import split_diff
from legorl.errors import DiffError
from legorl.tasks.mining.functions import changed_functions

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")


@dataclass
class FileEdit:
    old_path: str | None
    new_path: str | None
    old_lines: list[int] = field(default_factory=list)  # removed
    anchors: list[int] = field(default_factory=list)  # the pre-image line each added line follows
    new_lines: list[int] = field(default_factory=list)  # added
    names: set[str] = field(default_factory=set)  # from hunk headers and def/class lines in hunks
    added: int = 0
    removed: int = 0

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


def edited_lines(patch: str) -> list[FileEdit]:
    """Per file section of ``patch``, what it edits (``[]`` for a diff that does not parse)."""
    try:
        sections = split_diff(patch)
    except DiffError:
        return []
    out = []
    for fp in sections:
        edit = FileEdit(fp.old_path, fp.new_path)
        old = new = 0
        for line in fp.text.splitlines()[max(fp.header_lines, 0) :]:
            m = _HUNK.match(line)
            if m:
                old, new = int(m.group(1)), int(m.group(3))
                if (name := _DEF.match(m.group(5).strip())) is not None:
                    edit.names.add(name.group(1))
                continue
            tag, body = line[:1], line[1:]
            if tag in ("-", "+") and (name := _DEF.match(body)) is not None:
                edit.names.add(name.group(1))
            if tag == " ":
                old, new = old + 1, new + 1
            elif tag == "-":
                edit.old_lines.append(old)
                edit.removed += 1
                old += 1
            elif tag == "+":
                edit.anchors.append(max(old - 1, 1))
                edit.new_lines.append(new)
                edit.added += 1
                new += 1
        out.append(edit)
    return out


def edited_functions(
    patch: str, old_text: Callable[[str], str | None], new_text: Callable[[str], str | None] | None = None
) -> set[tuple[str, str]]:
    """``(file, qualified name)`` of every function a Python file section of ``patch`` edits, from the
    pre-image texts ``old_text(path)`` (None: no such file) and, when given, the post-image texts
    (without them, an added line counts for the function of the line it follows)."""
    out: set[tuple[str, str]] = set()
    for edit in edited_lines(patch):
        if not edit.path.endswith(".py"):
            continue
        lines = edit.old_lines + (edit.anchors if new_text is None else [])
        if edit.old_path and lines and (text := old_text(edit.old_path)) is not None:
            out |= {(edit.old_path, q) for q in changed_functions(text, lines)}
        if new_text is not None and edit.new_path and edit.new_lines and (text := new_text(edit.new_path)) is not None:
            out |= {(edit.new_path, q) for q in changed_functions(text, edit.new_lines)}
    return out


def apply_section(old_text: str, section: str) -> str | None:
    """The post-image of one file section of a unified diff applied to ``old_text`` exactly (no
    fuzz, no offset); None when a hunk does not match."""
    old = old_text.splitlines(keepends=True)
    out: list[str] = []
    at = 0  # next pre-image line (0-based) not yet copied
    lines = section.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        m = _HUNK.match(lines[i].rstrip("\n"))
        i += 1
        if m is None:
            continue
        start = int(m.group(1)) - (1 if m.group(2) != "0" else 0)
        if start < at:
            return None
        out += old[at:start]
        at = start
        while i < len(lines) and lines[i][:1] in (" ", "-", "+", "\\"):
            tag, body = lines[i][:1], lines[i][1:]
            if tag in (" ", "-"):
                if at >= len(old) or old[at].rstrip("\r\n") != body.rstrip("\r\n"):
                    return None
                if tag == " ":
                    out.append(old[at])
                at += 1
            elif tag == "+":
                out.append(body)
            i += 1
    return "".join(out + old[at:])


def post_images(patch: str, old_text: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """A reader of the files as ``patch`` leaves them (applied to ``old_text``'s pre-images)."""
    texts: dict[str, str | None] = {}
    try:
        sections = split_diff(patch)
    except DiffError:
        sections = []
    for fp in sections:
        if fp.new_path is None:
            continue
        before = old_text(fp.old_path) if fp.old_path else ""
        texts[fp.new_path] = apply_section(before, fp.text) if before is not None else None
    return lambda path: texts.get(path)


def hunk_names(patch: str) -> set[tuple[str, str]]:
    """``(file, function or class name)`` from hunk headers and the def/class lines a patch touches."""
    return {(e.path, name) for e in edited_lines(patch) if e.path.endswith(".py") for name in e.names}


def diff_key(patch: str) -> str:
    """A key of the change itself: per file (sorted), its removed and added lines without spaces."""
    return hashlib.sha256("\0".join(sorted(_sections(patch))).encode()).hexdigest()[:24]


def _sections(patch: str) -> list[str]:
    try:
        sections = split_diff(patch)
    except DiffError:
        return [patch]
    out = []
    for fp in sections:
        lines = fp.text.splitlines()[max(fp.header_lines, 0) :]
        changed = ["".join(line.split()) for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        out.append("\n".join([f"{fp.old_path}>{fp.new_path}", *changed]))
    return out


def diff_size(patch: str) -> tuple[int, int]:
    """(files changed, lines changed: added + removed) of ``patch``."""
    edits = edited_lines(patch)
    return len(edits), sum(e.added + e.removed for e in edits)
