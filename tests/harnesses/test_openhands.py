"""OpenHands SDK (PyPI, pinned, Python 3.12 venv layer) end to end: our driver builds the SDK's LLM,
Agent (terminal tool only) and Conversation inside a bubblewrap sandbox without network; a scripted
model's terminal + finish tool calls solve a trivial task (reward 1), a wrong fix gets reward 0, and
nothing but the gateway was contacted. The first run builds the venv layer (PyPI, ~3 min)."""

import json

import pytest
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def test_openhands_gold_fix_rewards_one(tmp_path, dash_tokens):
    # the session token starts with - (issue 17): still a clean run
    run = rollout("openhands", "scripted-gold", tmp_path)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert_recorded(run)
    assert sum(len(s.turn_indices) for s in r.samples) == 2  # terminal call, then finish
    tools = [
        json.loads(line)["function"]["name"]
        for line in run.prompts[0].split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    ]
    assert "terminal" in tools and "file_editor" not in tools and "browser_navigate" not in tools, tools
    assert "fixed" in run.prompts[1]  # the terminal output came back to the model
    assert_gateway_only(run)


def test_openhands_wrong_fix_rewards_zero(tmp_path, underscore_tokens):
    # the session token starts with _ (issue 17): still a clean run
    run = rollout("openhands", "scripted-wrong", tmp_path)
    assert (run.rollout.status, run.rollout.reward) == ("ok", 0.0), (run.rollout.status, run.rollout.cause)
    assert "# attempted fix" in run.rollout.diff
    assert_gateway_only(run)
