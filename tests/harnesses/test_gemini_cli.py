"""The Gemini CLI (the real, pinned npm package on the hosts' Node) inside the bwrap sandbox, against
the real gateway's Gemini API: the scripted gold fix resolves the trivial task (``legorl rollout``'s
path), a wrong fix scores 0 and its session-turn limit is a ``budget`` ending, its compression
becomes a ``compaction`` segment linked to the main chain, it connects to nothing but the gateway,
and one SmolLM2 rollout exports with every sampled token equal to the recorded turn outputs."""

from __future__ import annotations

import json

import pytest
from export_check import assert_export_matches_turns
from native_helpers import RERUN_ON_RUNTIME_CRASH, foreign_connects, run_native, tool_call, tool_names
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

from legorl.harnesses.base import Budget, Harness
from legorl.harnesses.common import ISSUE_PLACEHOLDER, deep_merge
from legorl.harnesses.gemini_cli import ASSUMED_TOKEN_LIMIT, GEMINI_CLI_VERSION, GeminiCliHarness
from legorl.sandbox.base import ExecResult

F = "/workspace/calc/arith.py"
READ = ("read_file", {"file_path": F})
FIX_ADD = (
    "replace",
    {
        "file_path": F,
        "old_string": '"""Return the sum of a and b."""\n    return a - b',
        "new_string": '"""Return the sum of a and b."""\n    return a + b',
        "instruction": "add must return the sum",
    },
)
BUDGET = Budget(max_turns=8, max_tokens_per_turn=512, wall_clock_s=240)
SNAPSHOT_ASK = "<state_snapshot>"  # the compression request (and its check) ask for one
NEXT_SPEAKER_ASK = "should logically speak next"  # the next-speaker check's question
# What the small model gets: three tools and a one-line system prompt (first prompt ~2.3k tokens;
# the CLI's own system prompt and 15 tools are ~11.8k, past SmolLM2's 8192 positions).
SLIM = {
    "tools": ["run_shell_command", "read_file", "replace"],
    "system_prompt": "You are a coding agent. Fix the bug the user describes, using the tools.\n",
}


# ----------------------------------------------------------------------------- fast (no binary)


def test_command_settings_env_and_collect_classification():
    h = GeminiCliHarness(context_window=20000, compact_fraction=0.5, tools=("read_file", "replace"))
    assert isinstance(h, Harness) and h.name == "gemini-cli" and h.dialect == "gemini.generate_content"
    assert h.install.kind == "npm" and h.install.packages == (f"@google/gemini-cli@{GEMINI_CLI_VERSION}",)
    cmd = h.command()
    assert cmd[0] == "/opt/legorl-harness/node_modules/.bin/gemini" and cmd[-1] == f"--prompt={ISSUE_PLACEHOLDER}"
    assert {"--approval-mode=yolo", "--output-format=stream-json", "--skip-trust", "--model=legorl"} <= set(cmd)
    env = h.environment("http://127.0.0.1:8000/v1", "tok")
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:8000" and env["GEMINI_API_KEY"] == "tok"
    assert env["GEMINI_CLI_NO_RELAUNCH"] == "true" and "GEMINI_SYSTEM_MD" not in env
    assert not any("tok" in a for a in cmd)  # the token is never on the command line
    settings = h.settings(BUDGET)
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"  # validated; the base URL routes it
    assert settings["model"]["maxSessionTurns"] == 8 and settings["tools"]["core"] == ["read_file", "replace"]
    # the CLI compresses at threshold x its own 1,048,576-token guess: i.e. at half of 20000 tokens
    assert settings["model"]["compressionThreshold"] * ASSUMED_TOKEN_LIMIT == pytest.approx(10000)
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False and settings["ide"]["enabled"] is False
    assert "compressionThreshold" not in GeminiCliHarness().settings(BUDGET)["model"]
    slim = GeminiCliHarness(**SLIM, extra_settings={"model": {"skipNextSpeakerCheck": False}})
    assert slim.home_files(BUDGET)[".gemini/legorl-system.md"] == SLIM["system_prompt"]
    assert slim.environment("http://h:1", "t")["GEMINI_SYSTEM_MD"].endswith("/.gemini/legorl-system.md")
    assert slim.settings(BUDGET)["model"] == {"name": "legorl", "maxSessionTurns": 8, "skipNextSpeakerCheck": False}
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"b": 3}, "e": 4}) == {
        "a": {"b": 3, "c": 2},
        "d": 1,
        "e": 4,
    }
    with pytest.raises(ValueError, match="compact_fraction"):
        GeminiCliHarness(compact_fraction=1.5)

    def res(lines, code=0, timed_out=False):
        return ExecResult(code, "\n".join(json.dumps(x) for x in lines) + "\nnot json\n", "", 1.0, timed_out)

    # event lines as the pinned CLI writes them (stream-json), shortened
    init = {"type": "init", "session_id": "c3e2", "model": "legorl"}
    call = {"type": "tool_use", "tool_name": "replace", "tool_id": "replace__call_1", "parameters": {}}
    ok = {"type": "result", "status": "success", "stats": {"tool_calls": 1}}
    r = h.collect(None, res([init, call, ok]), BUDGET)
    assert r.ending == "finished" and r.summary["tool_uses"] == ["replace"] and r.summary["stats"] == {"tool_calls": 1}
    assert h.collect(None, res([init, call], 53), BUDGET).ending == "budget"  # model.maxSessionTurns reached
    failed = {"type": "result", "status": "error", "error": {"type": "FatalToolExecutionError"}}
    assert h.collect(None, res([init, failed], 1), BUDGET).ending == "crashed"
    assert h.collect(None, res([init], 41), BUDGET).ending == "crashed"  # e.g. an auth error
    assert "SIGILL" in h.collect(None, res([init], 128 + 4), BUDGET).summary["cause"]  # its runtime faulted
    assert h.collect(None, res([init], 137, True), BUDGET).ending == "timeout"


# ----------------------------------------------------------------------------- the real program


@pytest.mark.slow
@pytest.mark.sandbox
def test_gemini_cli_gold_fix_resolves_only_talking_to_gateway(tmp_path, dash_tokens):
    # legorl rollout --harness gemini-cli --engine scripted-gold; the session token starts with -
    run = rollout("gemini-cli", "scripted-gold", tmp_path)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert_recorded(run)
    assert {"run_shell_command", "replace", "write_file", "read_file"} <= set(tool_names(run.prompts[0]))
    [sample] = r.samples  # one chain: the fix, then the answer extends it
    assert [e.kind for e in sample.alignment_events] == ["start", "extend"]
    assert "fixed" in run.prompts[-1]  # the command's output came back as the tool's response
    assert_gateway_only(run)


@pytest.mark.slow
@pytest.mark.sandbox
def test_gemini_cli_wrong_fix_scores_zero_and_turn_limit_is_budget(tmp_path, underscore_tokens):
    # legorl rollout --engine scripted-wrong with one turn: the wrong fix is written (its command,
    # the file base64-encoded, needs more than 512 tokens), then the CLI stops at
    # model.maxSessionTurns (exit code 53) before it asks the model again
    run = rollout(
        "gemini-cli", "scripted-wrong", tmp_path, budget=Budget(max_turns=1, max_tokens_per_turn=2048, wall_clock_s=240)
    )
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 0.0), (r.status, r.cause, r.harness_log_tail)
    assert "attempted fix" in r.diff
    assert r.harness_exit_code == 53, r.harness_log_tail
    # the harness ended with "budget": the rollout is marked truncated by the harness's own limit
    assert [f.evidence for f in r.flag_details if f.kind == "truncated"] == [
        {"by": "budget", "turns": 1, "source": "harness"}
    ]
    assert len(run.prompts) == 1
    assert_gateway_only(run)


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_gemini_cli_compaction_is_a_linked_segment(tmp_path):
    # The CLI compresses at the start of a request once the last prompt passed its threshold (here
    # half of 8000 tokens), but only history that ends with a text answer: in headless mode, when
    # its next-speaker check (switched on here) says "model" and it sends "Please continue.".
    # The slim first prompt (~2.3k tokens) fits; a ~5k-token command output pushes the next one
    # over; the model says what it does next, the check answers "model", and the CLI asks for a
    # <state_snapshot>, checks it in a second call, and goes on from it, where the agent fixes add.
    def policy(prompt: str) -> str:
        last = prompt.rsplit("<|im_start|>user", 1)[-1]
        if SNAPSHOT_ASK in last:
            return "<state_snapshot>Fix add in calc/arith.py. STATE: LOOKED</state_snapshot>"
        if NEXT_SPEAKER_ASK in last:
            speaker = "user" if "STATE: LOOKED" in prompt else "model"
            return json.dumps({"reasoning": "my last turn said what comes next", "next_speaker": speaker})
        if "STATE: LOOKED" not in prompt:
            if prompt.count("<tool_response>") == 0:
                return tool_call(
                    "run_shell_command",
                    {"command": "python3 -c \"print('lorem ipsum dolor ' * 1000)\"", "description": "look"},
                )
            return "Looked. Next, I will fix add."
        k = prompt.split("STATE: LOOKED", 1)[1].count("<tool_response>")
        return tool_call(*[READ, FIX_ADD][k]) if k < 2 else "Fixed."

    harness = GeminiCliHarness(**SLIM, context_window=8000, extra_settings={"model": {"skipNextSpeakerCheck": False}})
    run = run_native(harness, policy, tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.reward == 1.0 and run.result.summary["tool_uses"] == ["run_shell_command", "read_file", "replace"]
    layout = [(t.alignment.kind, t.alignment.segment_kind, t.alignment.reason) for t in run.turns]
    main = run.samples[0]
    assert main.segment_kind == "main" and len(main.turn_indices) == 2, layout
    [comp] = [s for s in run.samples if s.segment_kind == "compaction"]
    assert comp.parent_segment_index == 0 and comp.forked_from_turn == main.turn_indices[-1], layout
    assert len(comp.turn_indices) == 3 and "STATE: LOOKED" in run.prompts[comp.turn_indices[0]], layout
    asks = [t for t in run.turns if SNAPSHOT_ASK in json.dumps(t.request["contents"][-1])]
    assert len(asks) == 2 and all(t.alignment.segment_kind == "side" for t in asks), layout  # summary, check
    assert asks[-1].turn_index < comp.turn_indices[0]
    assert foreign_connects(run.connects) == [], run.connects


@pytest.mark.slow
@pytest.mark.sandbox
def test_gemini_cli_smollm2_rollout_exports_the_sampled_tokens(tmp_path):
    """One rollout of the embedded SmolLM2 through the Gemini CLI: `legorl export` gives samples
    whose loss-masked tokens are exactly the recorded turns' output tokens."""
    run = rollout(
        "gemini-cli",
        "embedded",
        tmp_path,
        budget=Budget(max_turns=1, max_tokens_per_turn=64, wall_clock_s=300, turn_slack=0),
        **SLIM,
    )
    assert run.rollout.status == "ok", (run.rollout.cause, run.rollout.harness_log_tail)
    assert_export_matches_turns(run.run_dir, tmp_path / "export")
    assert_gateway_only(run)
