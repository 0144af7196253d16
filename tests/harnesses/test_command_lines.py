"""Audit of every registered adapter's command line: the session token never appears on it (it goes
through the environment or a 0600 file), and neither a token nor an issue text that starts with
``-`` or ``_`` can be read as an option. The sandbox here is a recorder (it runs nothing): the real
rollouts with such tokens are in the adapters' own end-to-end tests."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from legorl.harnesses.base import Budget
from legorl.harnesses.command import CommandHarness
from legorl.harnesses.common import (
    ISSUE_PATH,
    TOKEN_ENV,
    TOKEN_FILE,
    home_script,
    shell_word,
)
from legorl.harnesses.registry import HARNESS_NAMES, get_harness
from legorl.sandbox.base import ExecResult
from legorl.tasks.loader import get_task

TOKENS = ["-legorl" + "a1" * 20, "_legorl" + "b2" * 20, "--api-key=evil"]
BUDGET = Budget(max_turns=3, max_tokens_per_turn=64, wall_clock_s=30)


class RecordingSandbox:
    """Records the one exec an adapter's launch makes; runs nothing."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def exec(self, cmd, timeout=60.0, env=None, cwd="/workspace", max_output_bytes=200_000, stdin=None):
        self.calls.append(
            {
                "cmd": list(cmd) if not isinstance(cmd, str) else ["bash", "-c", cmd],
                "env": dict(env or {}),
                "stdin": stdin,
            }
        )
        return ExecResult(0, "", "", 0.0, False)


@pytest.mark.parametrize("name", HARNESS_NAMES)
@pytest.mark.parametrize("token", TOKENS)
def test_no_adapter_puts_the_session_token_on_a_command_line(name, token):
    task = get_task("legorl__trivial-001")
    sb = RecordingSandbox()
    get_harness(name).launch(task, sb, "http://127.0.0.1:8000/v1", token, BUDGET)
    assert len(sb.calls) == 1
    call = sb.calls[0]
    assert not any(token in word for word in call["cmd"]), call["cmd"]
    # through its environment (a variable of its own, or inside its config variable: OpenCode)
    assert any(token in value for value in call["env"].values()), name
    # the issue travels on stdin, not argv
    assert call["stdin"] == task.problem_statement
    assert not any(task.problem_statement in word for word in call["cmd"])
    # every launch script is valid bash
    script = call["cmd"][call["cmd"].index("-c") + 1]
    subprocess.run(["bash", "-n", "-c", script], check=True)


def test_issue_placeholder_attached_or_after_double_dash():
    """Where the issue text becomes an argv word, it is glued to its option or follows ``--``."""
    for name in HARNESS_NAMES:
        h = get_harness(name)
        argv = (
            h.command(BUDGET)
            if name == "claude-code"
            else h.command()
            if name.startswith("opencode") or name == "codex"
            else None
        )
        if argv is None:
            continue
        i = argv.index("{ISSUE}")
        assert argv[i - 1] == "--", (name, argv)


def test_issue_starting_with_dash_is_one_value_word(tmp_path):
    issue = tmp_path / "issue"
    issue.write_text("--help me: -x is broken\nsecond line")
    word = shell_word("--task={ISSUE}").replace(ISSUE_PATH, str(issue))
    out = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {word} | wc -l; printf '%s' {word}"], capture_output=True, text=True, check=True
    ).stdout
    assert out == "2\n--task=--help me: -x is broken\nsecond line"
    assert shell_word("a b") == shlex.quote("a b")


def test_token_file_is_private_and_the_variable_is_gone(tmp_path):
    home = tmp_path / "home"
    token = "-" + "c3" * 20
    script = home_script(home=str(home), token_file=True).replace(TOKEN_FILE, str(home / "tok"))
    script += f'\nstat -c %a {home / "tok"}; echo "${{{TOKEN_ENV}-unset}}"; cat {home / ".npmrc"}'
    out = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", TOKEN_ENV: token},
    ).stdout.splitlines()
    assert (home / "tok").read_text() == token
    assert out[0] == "600" and out[1] == "unset"
    assert "registry=http://127.0.0.1:9/" in out


def test_command_template_refuses_token_field():
    with pytest.raises(ValueError, match="token_file"):
        CommandHarness(command="agent --key {token}")
    h = CommandHarness(command="agent --key-file {token_file}")
    sb = RecordingSandbox()
    h.launch(get_task("legorl__trivial-001"), sb, "http://127.0.0.1:8000/v1", "-Zq9secret", BUDGET)
    script = sb.calls[0]["cmd"][-1]
    assert TOKEN_FILE in script and "-Zq9secret" not in script and sb.calls[0]["env"][TOKEN_ENV] == "-Zq9secret"
