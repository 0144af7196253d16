"""Which files a diff touches, asked of git itself: the check that :mod:`legorl.diffs` reads a diff as
``git apply`` does (docs/reward-integrity.md, wave 3).

:func:`read_diff` parses a diff with :func:`legorl.diffs.split_diff` and runs ``git apply --numstat -z``
(forward, and reversed for the old names) on the host: git parses and prints, it neither reads nor
writes a file (it runs in an empty temporary directory, outside any repository, with the project's
git configuration). When git names other files, in another order, or refuses the diff, the diff is
refused (:class:`~legorl.diffs.DiffError`): the rules never judge a diff git would read differently.
"""

from __future__ import annotations

import subprocess
import tempfile

from legorl.diffs import DiffError, FilePatch, split_diff
from legorl.sandbox.git import DIFF_LIMIT, git_argv, host_git_env

GIT_TIMEOUT_S = 60


def _numstat(diff: bytes, reverse: bool) -> list[str] | str:
    """The name git gives each section (the new one; reversed: the old one), or git's error."""
    with tempfile.TemporaryDirectory(prefix="legorl-diffcheck-") as cwd:
        args = git_argv("apply", "--numstat", "-z", *(["-R"] if reverse else []), "-")
        try:
            res = subprocess.run(
                args,
                input=diff,
                capture_output=True,
                cwd=cwd,
                env=host_git_env(cwd),
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"git apply --numstat ran past {GIT_TIMEOUT_S}s"
    if res.returncode != 0:
        err = res.stderr.decode("utf-8", "replace").strip()
        if err.startswith("error: No valid patches in input") and "\n" not in err:
            return ""  # no section at all (and no other complaint): nothing to apply
        return err[-500:] or f"exit {res.returncode}"
    names = []
    for record in res.stdout.split(b"\0")[:-1]:
        name = record.split(b"\t", 2)[-1]
        names.append(name.decode("utf-8", "surrogateescape"))
    return names


def git_names(diff: str) -> tuple[list[str], list[str] | None]:
    """(new name of each section, old name of each section) as git reads ``diff``; the old names are
    None when git cannot reverse the diff (a binary patch without reverse data).
    :class:`DiffError` when git refuses the diff."""
    data = diff.encode("utf-8")
    forward = _numstat(data, reverse=False)
    if isinstance(forward, str):
        if forward:
            raise DiffError(f"git apply refuses the diff: {forward}")
        return [], []
    backward = _numstat(data, reverse=True)
    # git lists a reversed diff's sections last to first (it applies them in that order)
    return forward, backward[::-1] if isinstance(backward, list) else None


def read_diff(diff: str) -> list[FilePatch]:
    """The sections of ``diff`` (:func:`~legorl.diffs.split_diff`), checked against git's own reading;
    :class:`DiffError` when they differ, when either refuses the diff, or when it exceeds
    :data:`~legorl.sandbox.git.DIFF_LIMIT`."""
    if len(diff) > DIFF_LIMIT:
        raise DiffError(f"the diff exceeds {DIFF_LIMIT} bytes")
    sections = split_diff(diff)
    if diff and not diff.endswith("\n"):
        diff += "\n"  # as split_diff reads it, and as the rendered sections are applied
    new, old = git_names(diff)
    ours_new = [fp.new_path or fp.old_path for fp in sections]
    if new != ours_new:
        raise DiffError(f"git reads other files in this diff: {_show(new)} (this model: {_show(ours_new)})")
    if old is None:
        if any(fp.old_path and fp.new_path and fp.old_path != fp.new_path for fp in sections):
            raise DiffError("a rename in a diff git cannot reverse: its old name is not checked")
    elif old != [fp.old_path or fp.new_path for fp in sections]:
        raise DiffError(f"git reads other old names in this diff: {_show(old)}")
    return sections


def _show(names: list) -> str:
    text = ", ".join(repr(n) for n in names[:6])
    return f"[{text}{', ...' if len(names) > 6 else ''}] ({len(names)} file(s))"
