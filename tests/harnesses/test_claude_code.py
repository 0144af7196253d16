"""Claude Code (the real, pinned binary) inside the bwrap sandbox, against the real gateway with a
scripted model: it solves the trivial task (reward 1), a wrong fix scores 0, compaction and a
sub-agent become separate, linked segments, and it connects to nothing but the gateway."""

from __future__ import annotations

import json

import pytest
from native_helpers import RERUN_ON_RUNTIME_CRASH, foreign_connects, run_native, tool_call, tool_names

from legorl.config import TrainerConfig
from legorl.harnesses.base import Budget, Harness
from legorl.harnesses.claude_code import ClaudeCodeHarness, strip_v1
from legorl.harnesses.common import ISSUE_PLACEHOLDER, json_lines
from legorl.sandbox.base import ExecResult
from legorl.training.gspo import sample_weights
from legorl.trajectory.records import Sample

F = "/workspace/calc/arith.py"
READ = ("Read", {"file_path": F})
FIX_ADD = (
    "Edit",
    {
        "file_path": F,
        "old_string": '"""Return the sum of a and b."""\n    return a - b',
        "new_string": '"""Return the sum of a and b."""\n    return a + b',
    },
)
WRONG_FIX = (
    "Edit",
    {
        "file_path": F,
        "old_string": '"""Return a minus b."""\n    return a - b',
        "new_string": '"""Return a minus b."""\n    return a + b',
    },
)
BUDGET = Budget(max_turns=8, max_tokens_per_turn=512, wall_clock_s=240)


def harness(**kw) -> ClaudeCodeHarness:
    return ClaudeCodeHarness(**kw)  # the program comes from its npm layer at install.mount


def last_user(prompt: str) -> str:
    return prompt.rsplit("<|im_start|>user", 1)[-1]


def steps_policy(steps, final="Fixed: add now returns a + b."):
    """Main agent: the n-th tool call after n tool results, then a final answer; side calls
    (no tools) and compaction summaries get text."""

    def policy(prompt: str) -> str:
        names = tool_names(prompt)
        if "Respond with TEXT ONLY" in last_user(prompt):
            return "<summary>The user asked to fix add in calc/arith.py.</summary>"
        if not names:
            return "Fix add"
        k = prompt.count("<tool_response>")
        return tool_call(*steps[k]) if k < len(steps) else final

    return policy


# ----------------------------------------------------------------------------- fast (no binary)


def test_command_env_and_collect_classification():
    h = ClaudeCodeHarness(tools=("Bash", "Edit"), context_window=100000, autocompact_pct=3.5)
    assert isinstance(h, Harness) and h.name == "claude-code" and h.dialect == "anthropic.messages"
    assert h.install.kind == "npm" and h.install.packages == ("@anthropic-ai/claude-code@2.1.197",)
    cmd = h.command(BUDGET)
    assert cmd[:2] == [h.binary, "-p"] and cmd[-2:] == ["--", ISSUE_PLACEHOLDER]
    assert "--max-turns=8" in cmd and "--tools=Bash,Edit" in cmd
    assert {"--dangerously-skip-permissions", "--verbose"} <= set(cmd)
    env = h.environment("http://127.0.0.1:8000/v1", "tok", BUDGET)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000" and env["ANTHROPIC_AUTH_TOKEN"] == "tok"
    assert env["IS_SANDBOX"] == "1" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "100000" and env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] == "3.5"
    assert strip_v1("http://h:1/v1/") == "http://h:1"

    def res(lines, code=0, timed_out=False):
        return ExecResult(code, "\n".join(json.dumps(x) for x in lines) + "\nnot json\n", "", 1.0, timed_out)

    init = {"type": "system", "subtype": "init"}
    ok = {"type": "result", "subtype": "success", "is_error": False, "num_turns": 2}
    assert h.collect(None, res([init, ok]), BUDGET).ending == "finished"
    assert (
        h.collect(
            None, res([init, {"type": "result", "subtype": "error_max_turns", "is_error": True}], 1), BUDGET
        ).ending
        == "budget"
    )
    assert (
        h.collect(
            None, res([init, {"type": "result", "subtype": "error_during_execution", "is_error": True}], 1), BUDGET
        ).ending
        == "crashed"
    )
    assert h.collect(None, res([init], 1), BUDGET).ending == "crashed"
    assert h.collect(None, res([init], 137, True), BUDGET).ending == "timeout"
    assert json_lines('{"a": 1}\n[1]\nxx\n') == [{"a": 1}]


# ----------------------------------------------------------------------------- the real binary


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_claude_code_solves_trivial_task_only_talking_to_gateway(tmp_path, dash_tokens):
    # the session token starts with - (issue 17): still a clean run
    run = run_native(harness(), steps_policy([READ, FIX_ADD]), tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.result.summary["tool_uses"] == ["Read", "Edit"]
    assert all(sorted(x["name"] for x in t.request["tools"]) == ["Bash", "Edit", "Read", "Write"] for t in run.turns)
    assert "+    return a + b" in run.diff and run.reward == 1.0
    # every call went through the gateway as a Turn; Samples build without alignment errors
    assert len(run.turns) == 3 and all(t.dialect == "anthropic.messages" for t in run.turns)
    assert run.samples and run.samples[0].segment_kind == "main" and sum(run.samples[0].loss_mask) > 0
    # no host but the gateway: every connect is 127.0.0.1:<gateway port> or a Unix socket
    assert any(c.endswith(":8000") for c in run.connects), run.connects
    assert foreign_connects(run.connects) == [], run.connects


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_claude_code_wrong_fix_scores_zero_and_max_turns_is_budget(tmp_path, underscore_tokens):
    # the session token starts with _ (issue 17): still a clean run
    run = run_native(
        harness(),
        steps_policy([READ, WRONG_FIX, READ, READ, READ]),
        tmp_path,
        budget=Budget(max_turns=3, max_tokens_per_turn=512, wall_clock_s=240),
    )
    assert "a + b" in run.diff and run.reward == 0.0
    assert run.result.ending == "budget", run.result.summary


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_claude_code_compaction_is_a_linked_segment(tmp_path):
    # window 100k (its minimum) x 3.6% = compact once the context passes 3600 tokens: right after
    # the Read result. After the summary it fixes add with sed and answers.
    def policy(prompt: str) -> str:
        if "Respond with TEXT ONLY" in last_user(prompt):
            done = "EDIT-2DONE" in prompt
            return f"<summary>Fix add in calc/arith.py. STATE: {'FIXED' if done else 'READ'}</summary>"
        if not tool_names(prompt):
            return "Fix add"
        if "STATE: FIXED" in prompt or "EDIT-2DONE" in prompt:
            return "Fixed: add now returns a + b."
        if "STATE: READ" in prompt:
            return tool_call(
                "Bash",
                {
                    "command": "sed -i '6s/a - b/a + b/' calc/arith.py && echo EDIT-$((1+1))DONE",
                    "description": "fix add",
                },
            )
        return tool_call(*READ)

    run = run_native(harness(context_window=100000, autocompact_pct=3.6), policy, tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.result.summary["compactions"] >= 1 and run.reward == 1.0
    summary_turns = [t for t in run.turns if "Respond with TEXT ONLY" in json.dumps(t.request)]
    assert summary_turns
    kinds = [s.segment_kind for s in run.samples]
    assert kinds[0] == "main" and "compaction" in kinds, [(t.alignment.kind, t.alignment.reason) for t in run.turns]
    comp = next(s for s in run.samples if s.segment_kind == "compaction")
    assert comp.parent_segment_index is not None and comp.forked_from_turn is not None
    assert comp.parent_thread_id == comp.thread_id == "main"
    assert "This session is being continued" in run.prompts[comp.turn_indices[0]]
    assert foreign_connects(run.connects) == [], run.connects
    _assert_rollout_is_the_unit(run.samples)


def _assert_rollout_is_the_unit(split: list[Sample]) -> None:
    """The step's weights (the trainer's own function and config) of this split rollout beside a
    rollout that did not split: equal under ``rollout`` weighting, k to 1 under ``sample``."""
    assert len({s.rollout_id for s in split}) == 1 and len(split) >= 2
    plain = split[0].model_copy(update={"rollout_id": "r-unsplit"})
    batch = [*split, plain]
    for aggregation in ("sample_mean", "token_mean"):
        cfg = TrainerConfig(loss_aggregation=aggregation)
        assert cfg.rollout_weighting == "rollout"  # the default
        w = sample_weights([s.rollout_id for s in batch], [s.num_sampled for s in batch], aggregation, "rollout")
        assert sum(w[:-1]) == pytest.approx(w[-1]) == pytest.approx(1.0)
    w = sample_weights([s.rollout_id for s in batch], [s.num_sampled for s in batch], "sample_mean", "sample")
    assert sum(w[:-1]) == len(split) * w[-1]


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_claude_code_subagent_is_its_own_linked_thread(tmp_path):
    def policy(prompt: str) -> str:
        names = tool_names(prompt)
        if not names:
            return "Fix add"
        k = prompt.count("<tool_response>")
        # the main agent (its own system prompt) delegates, then answers; a general-purpose sub-agent
        # is offered the Agent tool too, so tell them apart by the system prompt, not the tools
        if "You are an interactive agent" in prompt:
            if k == 0:
                return tool_call(
                    "Agent",
                    {
                        "description": "fix add",
                        "subagent_type": "general-purpose",
                        "prompt": "Fix add in /workspace/calc/arith.py (it must return a + b).",
                    },
                )
            return "The sub-agent fixed add."
        steps = [READ, FIX_ADD]  # the sub-agent (no Agent tool) does the work
        return tool_call(*steps[k]) if k < len(steps) else "Fixed add."

    run = run_native(harness(tools=("Read", "Edit", "Agent")), policy, tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.result.summary["tool_uses"][0] == "Agent" and run.reward == 1.0
    threads = {t.thread_id for t in run.turns}
    assert len(threads) == 2 and "main" in threads, [(t.thread_id, t.alignment.kind) for t in run.turns]
    (sub_id,) = threads - {"main"}  # the x-claude-code-agent-id header
    sub_turns = [t for t in run.turns if t.thread_id == sub_id]
    assert len(sub_turns) == 3  # Read, Edit, answer
    main_turns = [t for t in run.turns if t.thread_id == "main"]
    assert [t.turn_index for t in main_turns] == [0, 4]  # delegate ... answer after the sub-agent
    first_sub = next(s for s in run.samples if s.thread_id == sub_id and s.segment_index == 0)
    assert first_sub.segment_kind == "subagent" and first_sub.parent_thread_id == "main"
    assert first_sub.turn_indices[0] == 1 and "You are an interactive agent" not in run.prompts[1]
    main = [s for s in run.samples if s.thread_id == "main"]
    assert len(main) == 1 and main[0].segment_kind == "main" and main[0].turn_indices == [0, 4]
    assert foreign_connects(run.connects) == [], run.connects
