"""The step-by-step demonstrations (look, read, edit with sed, test, finish): the commands do what the
gold patch does when a real shell runs them, and through a real harness they solve the task."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from legorl.harnesses.demonstrations import explore_commands, explore_policy, one_line_fix
from legorl.tasks.author import git_diff

TRICKY = "    return a / b if a & b else \"x\\\\y\" + 'q'"  # slash, ampersand, backslashes, quotes


def _task(tmp_path, new_line: str):
    before = {
        "lib/__init__.py": (0o644, b""),
        "lib/ops.py": (0o644, b'def solve(a, b):\n    """Doc."""\n    return a\n'),
    }
    after = {**before, "lib/ops.py": (0o644, f'def solve(a, b):\n    """Doc."""\n{new_line}\n'.encode())}
    repo = tmp_path / "repo"
    for rel, (_, data) in before.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    task = SimpleNamespace(
        patch=git_diff(before, after),
        problem_statement="`solve(2, 3)` returns 2, expected 5.",
        FAIL_TO_PASS=["tests/test_ops.py::test_solve"],
    )
    return task, repo, after["lib/ops.py"][1]


@pytest.mark.parametrize("new_line", ["    return a + b", TRICKY])
def test_the_commands_make_the_gold_fix_in_a_real_shell(tmp_path, new_line):
    task, repo, fixed = _task(tmp_path, new_line)
    fix = one_line_fix(task.patch)
    assert (fix.path, fix.line, fix.old, fix.new) == ("lib/ops.py", 3, "    return a", new_line)
    look, edit, check = explore_commands(task)
    assert look == "grep -rn -A3 'def solve' ."
    assert check == "python -m pytest -q tests/test_ops.py"
    found = subprocess.run(["bash", "-c", look], cwd=repo, capture_output=True, text=True, check=True).stdout
    assert found.startswith("./lib/ops.py:1:def solve") and "./lib/ops.py-3-    return a" in found
    subprocess.run(["bash", "-c", edit], cwd=repo, check=True)
    assert (repo / "lib/ops.py").read_bytes() == fixed


def test_only_one_line_patches_make_demonstrations(tmp_path):
    task, _, _ = _task(tmp_path, "    x = 1\n    return a + b")
    with pytest.raises(ValueError, match="exactly one line"):
        explore_commands(task)


def test_a_harness_without_commands_is_refused(tmp_path):
    task, _, _ = _task(tmp_path, "    return a + b")
    with pytest.raises(ValueError, match="runs no shell commands"):
        explore_policy(SimpleNamespace(name="minimal"), task)


def test_the_policy_runs_each_command_then_finishes(tmp_path):
    from legorl.harnesses.mini_swe_agent import SUBMIT, MiniSweAgentHarness

    task, _, _ = _task(tmp_path, "    return a + b")
    policy = explore_policy(MiniSweAgentHarness(tool_calling=False), task)
    replies = [policy("prompt") for _ in range(6)]
    for cmd, reply in zip(explore_commands(task), replies):
        assert f"```mswea_bash_command\n{cmd}\n```" in reply
    assert SUBMIT in replies[3] and replies[5] == replies[4] == replies[3]


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_demonstration_solves_a_multiturn_task_through_mini_swe_agent(tmp_path):
    from rollout_helpers import rollout

    run = rollout(
        "mini-swe-agent", "scripted-explore", tmp_path, task="legorl__multiturn-train-003", tool_calling=False
    )
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert sum(len(s.turn_indices) for s in r.samples) == 4 and len(r.samples) == 1  # one sample, 4 turns
    assert "lib/pairs.py-3-    return a * b" in run.prompts[1]  # grep's output came back with the line number
