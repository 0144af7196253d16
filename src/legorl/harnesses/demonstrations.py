"""Expert demonstrations for a warm start: a scripted policy that solves a one-line bug the way a
person at a shell would, through any harness that runs shell commands.

``explore_policy(harness, task)`` answers the gateway, turn by turn, with the harness's own way of
running a command (``harness.scripted_replies``): find the function the issue names and read it with
its line numbers (``grep -n -A3``), rewrite the wrong line with ``sed``, run the tests, finish. Unlike the gold
policy (the patch as one base64 blob: right for tests, meaningless to imitate) every step is
something a small model can learn to write, so ``legorl eval --engine scripted-explore`` on a
*training* suite records trajectories that ``legorl sft`` fine-tunes on (same gateway, same
harness, exact tokens) before RL starts where the base model's solve rate is zero.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from legorl.diffs import split_diff
from legorl.engines.scripted import Policy, replies_in_order

__all__ = ["OneLineFix", "explore_commands", "explore_policy", "one_line_fix"]

_CALLED = re.compile(r"`([A-Za-z_]\w*)\(")


class OneLineFix:
    """The gold patch of a one-line bug: file, line number (from 1), the line before and after."""

    def __init__(self, path: str, line: int, old: str, new: str) -> None:
        self.path, self.line, self.old, self.new = path, line, old, new


def one_line_fix(patch: str) -> OneLineFix:
    """The one changed line of ``patch``; ValueError when the patch is anything else."""
    sections = split_diff(patch)
    if len(sections) != 1 or sections[0].new_path is None:
        raise ValueError("a one-line demonstration needs a patch that changes one file")
    added, removed = sections[0].changed_lines()
    numbers = sections[0].added_line_numbers()
    if len(added) != 1 or len(removed) != 1 or len(numbers) != 1:
        raise ValueError("a one-line demonstration needs a patch that replaces exactly one line")
    return OneLineFix(sections[0].new_path, numbers[0], removed[0], added[0])


def _sed_replacement(text: str) -> str:
    """``text`` as the replacement of a sed ``s/.*/…/`` command (``\\``, ``&`` and ``/`` escaped)."""
    return text.replace("\\", "\\\\").replace("&", "\\&").replace("/", "\\/")


def explore_commands(task: Any) -> list[str]:
    """The shell commands of the demonstration: look (the function with line numbers), edit, test."""
    fix = one_line_fix(task.patch)
    called = _CALLED.search(task.problem_statement or "")
    # grep -A3 shows the file, the line numbers and the function's body: enough to write the sed
    look = f"grep -rn -A3 {shlex.quote('def ' + called.group(1))} ." if called else f"cat -n {shlex.quote(fix.path)}"
    edit = f"sed -i {shlex.quote(f'{fix.line}s/.*/{_sed_replacement(fix.new)}/')} {shlex.quote(fix.path)}"
    tests = sorted({t.split("::", 1)[0] for t in task.FAIL_TO_PASS}) if task.FAIL_TO_PASS else []
    check = "python -m pytest -q " + " ".join(shlex.quote(t) for t in tests) if tests else "python -m pytest -q"
    return [look, edit, check]


def explore_policy(harness: Any, task: Any) -> Policy:
    """A policy that makes ``harness`` run :func:`explore_commands` one per turn, then finish."""
    if not hasattr(harness, "scripted_replies"):
        raise ValueError(
            f"harness {getattr(harness, 'name', harness)!r} runs no shell commands (no scripted_replies): "
            "use the gold policy for its demonstrations"
        )
    commands = explore_commands(task)
    steps = [harness.scripted_replies(cmd)[0] for cmd in commands]
    finish = harness.scripted_replies(commands[-1])[-1]
    scripted = replies_in_order(*steps, finish, fallback=finish)
    if not getattr(harness, "side_requests", False):
        return scripted

    def policy(prompt: str) -> str:
        # side requests without tools (titles, summaries) get a short answer and do not advance the script
        return scripted(prompt) if "<tools>" in prompt else "Fix the failing test"

    return policy
