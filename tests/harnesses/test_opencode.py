"""OpenCode (the real, pinned binary) inside the bwrap sandbox, against the real gateway with a
scripted model, through both providers: ``@ai-sdk/openai-compatible`` (Chat Completions) and
``@ai-sdk/openai`` (Responses). It solves the trivial task (reward 1), a wrong fix scores 0,
compaction becomes a separate, linked segment, and it connects to nothing but the gateway."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from native_helpers import (
    RERUN_ON_RUNTIME_CRASH,
    UnfinishedRun,
    foreign_connects,
    run_native,
    tool_call,
    tool_names,
    unfinished,
)

from legorl.harnesses.base import Budget, Harness
from legorl.harnesses.common import json_lines
from legorl.harnesses.opencode import OpenCodeHarness
from legorl.sandbox.base import ExecResult

F = "/workspace/calc/arith.py"
READ = ("read", {"filePath": F})
FIX_ADD = (
    "edit",
    {
        "filePath": F,
        "oldString": '"""Return the sum of a and b."""\n    return a - b',
        "newString": '"""Return the sum of a and b."""\n    return a + b',
    },
)
WRONG_FIX = (
    "edit",
    {
        "filePath": F,
        "oldString": '"""Return a minus b."""\n    return a - b',
        "newString": '"""Return a minus b."""\n    return a + b',
    },
)
BUDGET = Budget(max_turns=10, max_tokens_per_turn=512, wall_clock_s=240)
DIALECT = {"opencode": "openai.chat", "opencode-responses": "openai.responses"}


def harness(name: str, **kw) -> OpenCodeHarness:
    return OpenCodeHarness(name, **kw)  # the program comes from its npm layer at install.mount


def steps_policy(steps, final="Fixed: add now returns a + b."):
    def policy(prompt: str) -> str:
        if not tool_names(prompt):  # side calls (title, summary): text
            return "Fix add"
        k = prompt.count("<tool_response>")
        return tool_call(*steps[k]) if k < len(steps) else final

    return policy


# ----------------------------------------------------------------------------- fast (no binary)


def test_config_env_and_collect_classification():
    h = OpenCodeHarness("opencode-responses", context_limit=9000, output_limit=256, tools=("bash", "edit"))
    assert isinstance(h, Harness) and h.dialect == "openai.responses" and h.provider_npm == "@ai-sdk/openai"
    assert OpenCodeHarness().dialect == "openai.chat" and OpenCodeHarness().provider_npm == "@ai-sdk/openai-compatible"
    assert h.install.kind == "npm" and h.install.packages == ("opencode-ai@1.18.33",)
    with pytest.raises(ValueError):
        OpenCodeHarness("opencode-anthropic")
    env = h.environment("http://127.0.0.1:8000/v1", "tok", BUDGET)
    cfg = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    prov = cfg["provider"]["legorl"]
    assert prov["npm"] == "@ai-sdk/openai" and prov["options"] == {
        "baseURL": "http://127.0.0.1:8000/v1",
        "apiKey": "tok",
    }
    assert prov["models"]["legorl"]["limit"] == {"context": 9000, "output": 256}
    assert cfg["model"] == "legorl/legorl" and cfg["agent"]["build"]["steps"] == 10
    assert cfg["tools"]["bash"] and cfg["tools"]["edit"] and not cfg["tools"]["webfetch"]
    assert env["npm_config_registry"] == "http://127.0.0.1:9/" and env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    assert (
        json.loads(OpenCodeHarness().environment("http://h:1", "t", BUDGET)["OPENCODE_CONFIG_CONTENT"])["provider"][
            "legorl"
        ]["options"]["baseURL"]
        == "http://h:1/v1"
    )

    def res(lines, code=0, timed_out=False):
        return ExecResult(code, "\n".join(json.dumps(x) for x in lines) + "\nnoise\n", "", 1.0, timed_out)

    def step(reason):
        return {"type": "step_finish", "part": {"reason": reason}}

    tool = {"type": "tool_use", "part": {"tool": "bash"}}
    r = h.collect(None, res([tool, step("tool-calls"), {"type": "text", "part": {"text": "ok"}}, step("stop")]), BUDGET)
    assert r.ending == "finished" and r.summary["tool_uses"] == ["bash"] and r.summary["text"] == "ok"
    assert h.collect(None, res([step("tool-calls")] * 10), BUDGET).ending == "budget"
    assert (
        h.collect(None, res([step("stop"), {"type": "error", "error": {"name": "APIError"}}], 1), BUDGET).ending
        == "crashed"
    )
    assert h.collect(None, res([], 1), BUDGET).ending == "crashed"
    assert h.collect(None, res([step("tool-calls")], 137, True), BUDGET).ending == "timeout"
    assert json_lines('{"a": 1}\n[1]\n') == [{"a": 1}]


# ----------------------------------------------------------------------------- the real binary


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("name", ["opencode", "opencode-responses"])
@RERUN_ON_RUNTIME_CRASH
def test_opencode_solves_trivial_task_only_talking_to_gateway(tmp_path, name, dash_tokens):
    # the session token starts with - (issue 17): still a clean run
    run = run_native(harness(name), steps_policy([READ, FIX_ADD]), tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.result.summary["tool_uses"] == ["read", "edit"]
    assert "+    return a + b" in run.diff and run.reward == 1.0
    assert len(run.turns) == 3 and all(t.dialect == DIALECT[name] for t in run.turns)
    # one OpenCode session = one thread (x-session-id), one extended segment
    assert len(run.samples) == 1 and run.samples[0].segment_kind == "main"
    assert [e.kind for e in run.samples[0].alignment_events] == ["start", "extend", "extend"]
    assert run.samples[0].thread_id.startswith("ses_")
    assert any(c.endswith(":8000") for c in run.connects), run.connects
    assert foreign_connects(run.connects) == [], run.connects


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_opencode_wrong_fix_scores_zero(tmp_path, underscore_tokens):
    # the session token starts with _ (issue 17): still a clean run
    tools = ("bash", "read", "edit", "write")  # a reduced tool set (~4.8k prompt tokens instead of ~7.4k)
    run = run_native(harness("opencode", tools=tools), steps_policy([READ, WRONG_FIX]), tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert all(sorted(x["function"]["name"] for x in t.request["tools"]) == sorted(tools) for t in run.turns)
    assert "a + b" in run.diff and run.reward == 0.0


# With the Responses provider OpenCode sometimes did not finish this run (about 1 in 3 on the 2026-12-04
# machine): it hung after the compaction until the wall clock, or exited after two tool calls. Not
# reproduced since (0 in 24 runs on 2026-12-06, idle and loaded; docs/harness-bench.md). The failure
# carries the gateway's side of the wire, which says on whose side it hung.
@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
@pytest.mark.flaky(
    reason="OpenCode did not finish the compaction run now and then (about 1 in 3 with the Responses provider "
    "on 2026-12-04, 0 in 24 since): a hang after the compaction until the wall clock, or an exit after two "
    "tool calls; cause not found",
    runs=3,
    on=UnfinishedRun,
)
@pytest.mark.parametrize("name", ["opencode", "opencode-responses"])
def test_opencode_compaction_is_a_linked_segment(tmp_path, name):
    # context 10000, output 512: the first prompt (~7.4k tokens: system + tools) fits; a ~7k-token
    # command output overflows it, so OpenCode summarises (a separate call without tools) and goes
    # on from the summary; after it the agent reads and fixes add.
    def policy(prompt: str) -> str:
        if not tool_names(prompt):
            return "<summary>Fix add in calc/arith.py. STATE: LOOKED</summary>"
        if "STATE: LOOKED" not in prompt:
            k = prompt.count("<tool_response>")
            if k < 3:
                return tool_call("bash", {"command": f"echo look {k}", "description": "look"})
            if k == 3:
                return tool_call(
                    "bash", {"command": "python3 -c \"print('lorem ipsum dolor ' * 1000)\"", "description": "look"}
                )
            return "Looked."
        k = prompt.split("STATE: LOOKED", 1)[1].count("<tool_response>")
        return tool_call(*[READ, FIX_ADD][k]) if k < 2 else "Fixed."

    run = run_native(
        harness(name, context_limit=10000, output_limit=512),
        policy,
        tmp_path,
        budget=replace(BUDGET, wall_clock_s=120),  # a run takes ~20 s
    )
    if run.result.ending != "finished":
        raise unfinished(run, f"compaction run ended {run.result.ending!r}")
    assert run.reward == 1.0
    kinds = [(s.segment_kind, s.segment_index) for s in run.samples]
    assert kinds == [("main", 0), ("side", 1), ("compaction", 2)], [
        (t.alignment.kind, t.alignment.reason) for t in run.turns
    ]
    main, summary, comp = run.samples
    assert len({s.thread_id for s in run.samples}) == 1
    assert summary.parent_segment_index == 0 and summary.forked_from_turn == main.turn_indices[-1]
    assert "summar" in run.prompts[summary.turn_indices[0]].lower()
    assert comp.parent_segment_index == 0 and comp.forked_from_turn == main.turn_indices[-1]
    assert len(comp.turn_indices) == 3 and "STATE: LOOKED" in run.prompts[comp.turn_indices[0]]
    assert [e.kind for e in comp.alignment_events] == ["fork", "extend", "extend"]
    assert foreign_connects(run.connects) == [], run.connects


# OpenCode now and then hangs until the wall clock (once in ~25 fresh-clone CI runs here, with no output:
# the launch shell prints the event stream only when OpenCode ends), as in the compaction test above;
# what this test checks is the watchdog, so only a run that timed out runs again.
@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
@pytest.mark.flaky(
    reason="OpenCode hung until the wall clock now and then (once in ~25 fresh-clone CI runs), before the "
    "step budget this test checks could stop it; cause not found",
    runs=3,
    on=UnfinishedRun,
)
def test_opencode_step_budget_stops_a_model_that_never_answers(tmp_path):
    # at the last step OpenCode asks for a text-only answer, but keeps going while the model calls
    # tools: the launch watchdog ends it after max_turns + 1 steps
    def policy(prompt: str) -> str:
        if not tool_names(prompt):
            return "t"
        return tool_call("bash", {"command": f"echo {prompt.count('<tool_response>')}", "description": "x"})

    run = run_native(
        harness("opencode"),
        policy,
        tmp_path,
        grade_it=False,
        budget=Budget(max_turns=3, max_tokens_per_turn=256, wall_clock_s=90),  # a run takes ~16 s
    )
    if run.result.ending == "timeout":
        raise unfinished(run, "step-budget run timed out")
    assert run.result.ending == "budget", (run.result.summary, run.result.log_tail)
    assert run.result.summary["stopped_by_step_budget"] and 4 <= run.result.summary["steps"] <= 5
    assert "maximum steps" in run.prompts[-1]
    assert run.diff == ""


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_opencode_subagent_is_its_own_linked_thread(tmp_path):
    def policy(prompt: str) -> str:
        names = tool_names(prompt)
        if not names:
            return "t"
        k = prompt.count("<tool_response>")
        if "task" in names:  # the main agent (sub-agents are not offered the task tool) delegates
            if k == 0:
                return tool_call(
                    "task",
                    {
                        "description": "fix add",
                        "subagent_type": "general",
                        "prompt": "Fix add in /workspace/calc/arith.py so it returns a + b.",
                    },
                )
            return "The sub-agent fixed add."
        return tool_call(*[READ, FIX_ADD][k]) if k < 2 else "Fixed add."

    run = run_native(harness("opencode"), policy, tmp_path, budget=BUDGET)
    assert run.result.ending == "finished", (run.result.summary, run.result.log_tail)
    assert run.result.summary["tool_uses"] == ["task"] and run.reward == 1.0
    main, sub = run.samples  # x-session-id per OpenCode session, x-parent-session-id links the child
    assert main.segment_kind == "main" and main.parent_thread_id is None and main.turn_indices == [0, 4]
    assert sub.segment_kind == "subagent" and sub.parent_thread_id == main.thread_id != sub.thread_id
    assert sub.turn_indices == [1, 2, 3] and [e.kind for e in sub.alignment_events] == ["start", "extend", "extend"]
    assert foreign_connects(run.connects) == [], run.connects
