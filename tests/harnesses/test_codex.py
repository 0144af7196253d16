"""The Codex CLI (the real, pinned npm package: a Node launcher and a static Rust binary) inside the
bwrap sandbox, against the real gateway's Responses API with a scripted model: it solves the trivial
task through ``legorl rollout``'s code path (reward 1), a wrong fix scores 0, its compaction becomes
a linked ``compaction`` segment, the step budget stops a model that never stops, and it connects to
nothing but the gateway. The fast tests check the config, the watchdog and the classification on
event lines Codex 0.171.0 wrote."""

from __future__ import annotations

import json
import subprocess
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from export_check import assert_export_matches_turns
from native_helpers import RERUN_ON_RUNTIME_CRASH, foreign_connects, run_native, tool_call, tool_names
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

from legorl.harnesses.base import Budget, Harness
from legorl.harnesses.codex import (
    BUDGET_EVENT,
    CODEX_VERSION,
    CONFIG_PATH,
    TOKEN_ENV,
    UNREACHABLE_EVENT,
    WATCHDOG,
    CodexHarness,
    toml_document,
)
from legorl.sandbox.base import ExecResult

BUDGET = Budget(max_turns=6, max_tokens_per_turn=1024, wall_clock_s=240)
# lines of a real `codex exec --json` stream (0.171.0), shortened where they carry long text
STARTED = '{"type":"thread.started","thread_id":"01a24973-31cc-7fe2-b6bf-dc2d45537600"}'
WARNING = '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `legorl` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}'
TURN = '{"type":"turn.started"}'
RUN = '{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \'echo fixed\'","aggregated_output":"","exit_code":null,"status":"in_progress"}}'
RAN = '{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \'echo fixed\'","aggregated_output":"fixed\\n","exit_code":0,"status":"completed"}}'
SAID = '{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"The fix is in place."}}'
DONE = '{"type":"turn.completed","usage":{"input_tokens":10823,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":309,"reasoning_output_tokens":0}}'
CUT = '{"type":"turn.failed","error":{"message":"Incomplete response returned, reason: max_output_tokens"}}'
NO_NET = '{"type":"error","message":"Reconnecting... waiting for network (Connection failed: error sending request)"}'


def stream(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- fast (no binary)


def test_config_command_and_environment():
    h = CodexHarness(auto_compact_tokens=9000, extra_config={"model_providers": {"legorl": {"name": "gw"}}})
    assert isinstance(h, Harness) and (h.name, h.dialect) == ("codex", "openai.responses")
    assert h.install.kind == "npm" and h.install.packages == (f"@openai/codex@{CODEX_VERSION}",)
    cfg = tomllib.loads(toml_document(h.config("http://127.0.0.1:8000")))
    assert cfg == h.config("http://127.0.0.1:8000")  # the TOML reads back as the table it was written from
    provider = cfg["model_providers"]["legorl"]
    assert provider == {
        "name": "gw",  # extra_config merges into nested tables
        "base_url": "http://127.0.0.1:8000/v1",
        "env_key": TOKEN_ENV,
        "wire_api": "responses",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    assert (cfg["model_provider"], cfg["approval_policy"], cfg["sandbox_mode"]) == (
        "legorl",
        "never",
        "danger-full-access",
    )
    assert cfg["model_auto_compact_token_limit"] == 9000 and cfg["web_search"] == "disabled"
    assert (
        not cfg["analytics"]["enabled"] and not cfg["features"]["plugins"] and not cfg["skills"]["bundled"]["enabled"]
    )
    assert "skills" not in CodexHarness(skills=True).config("http://h:1/v1")
    assert h.environment("-tok")[TOKEN_ENV] == "-tok"
    argv = h.command()
    assert argv[1:3] == ["exec", "--json"] and argv[-2:] == ["--", "{ISSUE}"]
    assert "--dangerously-bypass-approvals-and-sandbox" in argv
    assert CONFIG_PATH == ".codex/config.toml"


WATCHDOG_OUT = "/dev/shm/legorl-codex-watchdog-test.jsonl"


def run_watchdog(lines: list[str], max_steps: int, tail: str = "sleep 30") -> subprocess.CompletedProcess:
    """The launch watchdog around a stand-in program that prints ``lines`` then runs ``tail``; its
    stream file is ``WATCHDOG_OUT``, kept between calls as in a reused sandbox."""
    program = "".join(f"printf '%s\\n' {json.dumps(line)}; sleep 0.1; " for line in lines) + tail
    script = WATCHDOG.replace("MAX_STEPS", str(max_steps)).replace("/tmp/.legorl-codex.jsonl", "$OUT")
    return subprocess.run(
        ["bash", "-c", script, "codex", "bash", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "OUT": WATCHDOG_OUT},
    )


def test_watchdog_stops_codex_after_the_step_budget_and_an_unreachable_gateway():
    h = CodexHarness()
    # two commands done, budget 2: stopped (the stand-in would sleep 30 s), the event appended
    out = run_watchdog([STARTED, TURN, RUN, RAN, RUN, RAN.replace("item_1", "item_3")], 2)
    r = h.collect(None, ExecResult(out.returncode, out.stdout, out.stderr, 1.0, False), BUDGET)
    assert json.loads(out.stdout.splitlines()[-1]) == {"type": BUDGET_EVENT, "max_steps": 2}
    assert (r.ending, r.summary["steps"], r.summary["stopped_by_step_budget"]) == ("budget", 2, True)
    # a program that finishes under its budget is left alone, its exit status passed on
    out = run_watchdog([STARTED, TURN, RUN, RAN, SAID, DONE], 2, tail="exit 0")
    r = h.collect(None, ExecResult(out.returncode, out.stdout, out.stderr, 1.0, False), BUDGET)
    assert (r.ending, r.summary["commands"], r.summary["text"]) == (
        "finished",
        ["/bin/bash -lc 'echo fixed'"],
        "The fix is in place.",
    )
    # Codex retries a gateway it cannot reach for ever: stopped after three tries, an env failure
    out = run_watchdog([STARTED, TURN, NO_NET, NO_NET, NO_NET], 2)
    assert UNREACHABLE_EVENT in out.stdout.splitlines()[-1]
    r = h.collect(None, ExecResult(out.returncode, out.stdout, out.stderr, 1.0, False), BUDGET)
    assert r.ending == "crashed" and "could not connect to the gateway" in r.summary["cause"]


def test_a_previous_runs_stream_left_in_the_sandbox_does_not_stop_the_next_run():
    # the stream file was emptied by the background job's redirection, racing the watchdog's first
    # count: a previous run's steps (over budget) stopped 2 runs in 20 at once (CI saw one)
    stale = "".join(f"{line}\n" for line in (STARTED, TURN, RUN, RAN, RUN, RAN)) + f'{{"type":"{BUDGET_EVENT}"}}\n'
    endings = []
    for _ in range(25):
        Path(WATCHDOG_OUT).write_text(stale)
        out = run_watchdog([STARTED, TURN, SAID, DONE], 1, tail="exit 0")
        endings.append(
            CodexHarness().collect(None, ExecResult(out.returncode, out.stdout, out.stderr, 1.0, False), BUDGET).ending
        )
    assert endings == ["finished"] * 25


def test_collect_turns_the_exit_into_an_agent_or_environment_outcome():
    h = CodexHarness()

    def collect(text: str, code: int = 0, timed_out: bool = False):
        return h.collect(None, ExecResult(code, text, "", 1.0, timed_out), BUDGET)

    ok = collect(stream(STARTED, WARNING, TURN, RUN, RAN, SAID, DONE))
    assert ok.ending == "finished" and ok.summary["usage"]["output_tokens"] == 309
    assert ok.summary["warnings"] == [json.loads(WARNING)["item"]["message"]]
    # an answer cut at the gateway's per-call token budget ends the run: the policy's outcome
    assert collect(stream(STARTED, TURN, CUT), 1).ending == "budget"
    # anything else Codex gives up on is the harness's failure, with its own words as the cause
    refused = '{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}'
    crashed = collect(stream(STARTED, TURN, refused), 1)
    assert crashed.ending == "crashed" and crashed.summary["cause"] == "unexpected status 401 Unauthorized"
    assert collect("", 1).summary["cause"] == "exit code 1 without a finished turn"
    assert collect(stream(STARTED, TURN, RUN), 137, timed_out=True).ending == "timeout"


# ----------------------------------------------------------------------------- the real binary


@pytest.mark.slow
@pytest.mark.sandbox
def test_codex_solves_trivial_task_through_the_gateway_only(tmp_path, dash_tokens):
    # `legorl rollout --harness codex --engine scripted-gold`; the session token starts with - (issue 17)
    run = rollout("codex", "scripted-gold", tmp_path, budget=BUDGET)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert_recorded(run)
    [sample] = r.samples
    assert sample.segment_kind == "main" and [e.kind for e in sample.alignment_events] == ["start", "extend"]
    assert "fixed" in run.prompts[-1]  # the command's output came back as exec_command's result
    assert "exec_command" in tool_names(run.prompts[0]) and "<tools>" in run.prompts[0]
    assert_gateway_only(run)


@pytest.mark.slow
@pytest.mark.sandbox
def test_codex_wrong_fix_scores_zero(tmp_path, underscore_tokens):
    run = rollout("codex", "scripted-wrong", tmp_path, budget=BUDGET)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 0.0), (r.status, r.cause, r.harness_log_tail)
    assert "attempted fix" in r.diff
    assert_gateway_only(run)


@pytest.mark.slow
@pytest.mark.sandbox
@RERUN_ON_RUNTIME_CRASH
def test_codex_compaction_is_a_linked_segment_and_the_step_budget_stops_it(tmp_path):
    # the first prompt is ~5.2k tokens; a ~1.2k-token command output passes the 6000-token limit, so
    # Codex summarises (a request without tools) and goes on from the opening messages plus the
    # summary; there the model never stops calling tools, and the watchdog ends the run at max_turns
    def policy(prompt: str) -> str:
        if not tool_names(prompt):
            return "Fix add in calc/arith.py. STATE: LOOKED"
        k = prompt.count("<tool_response>")
        if "STATE: LOOKED" not in prompt:
            return tool_call("exec_command", {"cmd": "python3 -c \"print('lorem ipsum dolor ' * 300)\""})
        return tool_call("exec_command", {"cmd": f"echo step {k}"})

    h = CodexHarness(auto_compact_tokens=6000)
    run = run_native(h, policy, tmp_path, budget=replace(BUDGET, max_turns=4, wall_clock_s=150))
    assert run.result.ending == "budget", (run.result.summary, run.result.log_tail)
    # the watchdog polls Codex's stream every 0.2 s: on a loaded machine a quick next command (the
    # scripted policy answers at once) can complete before the stop lands
    assert run.result.summary["stopped_by_step_budget"] and 4 <= run.result.summary["steps"] <= 6
    assert run.diff == ""
    main, summary, comp = run.samples
    assert [(s.segment_kind, s.segment_index) for s in run.samples] == [("main", 0), ("side", 1), ("compaction", 2)]
    assert len({s.thread_id for s in run.samples}) == 1
    assert summary.parent_segment_index == 0 and summary.forked_from_turn == main.turn_indices[-1]
    assert "CONTEXT CHECKPOINT COMPACTION" in run.prompts[summary.turn_indices[0]]
    assert comp.parent_segment_index == 0 and comp.forked_from_turn == main.turn_indices[-1]
    assert "STATE: LOOKED" in run.prompts[comp.turn_indices[0]] and len(comp.turn_indices) >= 3
    assert [e.kind for e in comp.alignment_events][:3] == ["fork", "extend", "extend"]
    assert foreign_connects(run.connects) == [], run.connects


@pytest.mark.slow
@pytest.mark.sandbox
def test_codex_smollm2_rollout_exports_the_sampled_tokens(tmp_path):
    """One rollout of the embedded SmolLM2 through Codex (a ~5.2k-token first prompt): `legorl
    export` gives samples whose loss-masked tokens are exactly the recorded turns' output tokens."""
    run = rollout("codex", "embedded", tmp_path, budget=Budget(max_turns=2, max_tokens_per_turn=64, wall_clock_s=300))
    r = run.rollout
    assert r.status == "ok", (r.status, r.cause, r.harness_log_tail)
    samples = assert_export_matches_turns(run.run_dir, tmp_path / "export")
    assert samples[0]["segment_kind"] == "main"
    assert_gateway_only(run)
