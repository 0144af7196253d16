"""mini-swe-agent (PyPI, pinned, from a cached venv layer) end to end: the real ``mini`` program in a
bubblewrap sandbox without network solves a trivial task through the gateway (native bash tool calls,
and the text-based config), a wrong fix gets reward 0, and it connected to nothing but the gateway.
The first run builds the venv layer (PyPI access needed once, ~2 min); later runs reuse it."""

import pytest
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def test_mini_swe_agent_tool_calls_gold_fix(tmp_path, dash_tokens):
    # the session token starts with - (issue 17): still a clean run
    run = rollout("mini-swe-agent", "scripted-gold", tmp_path)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert_recorded(run)
    # bash call, its output comes back as a tool message, then the submit command ends the run
    assert sum(len(s.turn_indices) for s in r.samples) == 2
    assert '\\"returncode\\": 0' in run.prompts[1] or '"returncode": 0' in run.prompts[1]
    assert_gateway_only(run)


def test_mini_swe_agent_wrong_fix_rewards_zero(tmp_path, underscore_tokens):
    # the session token starts with _ (issue 17): still a clean run
    run = rollout("mini-swe-agent", "scripted-wrong", tmp_path)
    assert (run.rollout.status, run.rollout.reward) == ("ok", 0.0), (run.rollout.status, run.rollout.cause)
    assert "# attempted fix" in run.rollout.diff
    assert_gateway_only(run)


def test_mini_swe_agent_text_based_config(tmp_path):
    run = rollout("mini-swe-agent", "scripted-gold", tmp_path, tool_calling=False)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert "mswea_bash_command" in run.prompts[0] and "<tools>" not in run.prompts[0]
    assert_gateway_only(run)


def test_mini_swe_agent_step_budget_ends_run(tmp_path):
    from legorl.harnesses.base import Budget

    # the scripted model never submits within one step: mini stops at its step limit
    run = rollout(
        "mini-swe-agent",
        "scripted-gold",
        tmp_path,
        budget=Budget(max_turns=1, max_tokens_per_turn=4096, wall_clock_s=300),
    )
    r = run.rollout
    assert sum(len(s.turn_indices) for s in r.samples) == 1
    assert r.status == "ok" and r.reward == 1.0, (r.status, r.cause)  # the fix landed before the limit


def test_warm_rollout_runs_no_package_manager(tmp_path, monkeypatch):
    """Once its layer exists, a rollout mounts it: pip/npm (any layer build step) never runs."""
    import legorl.harnesses.install as install_mod
    from legorl.harnesses.registry import get_harness

    install_mod.harness_layer(get_harness("mini-swe-agent").install)  # cold build if this host lacks it

    def boom(*a, **k):
        raise AssertionError(f"package manager ran on the warm path: {a[:2]}")

    monkeypatch.setattr(install_mod, "run_step", boom)
    before = dict(install_mod.BUILD_COUNTER)
    run = rollout("mini-swe-agent", "scripted-gold", tmp_path)
    assert (run.rollout.status, run.rollout.reward) == ("ok", 1.0), (run.rollout.status, run.rollout.cause)
    assert install_mod.BUILD_COUNTER == before


@pytest.mark.parametrize(
    ("status", "ending"),
    [("Submitted", "finished"), ("RepeatedFormatError", "finished"), ("LimitsExceeded", "budget"), ("Boom", "crashed")],
)
def test_collect_tells_the_models_endings_from_harness_failures(status, ending):
    """RepeatedFormatError ends mini because of what the *model* wrote (prose with no command, three
    times): an agent outcome that is graded and trained on, never a harness_error out of the gradient."""
    import json

    from legorl.harnesses.common import TRANSCRIPT_MARKER
    from legorl.harnesses.mini_swe_agent import MiniSweAgentHarness
    from legorl.sandbox.base import ExecResult

    traj = json.dumps({"info": {"exit_status": status, "model_stats": {"api_calls": 3}}})
    res = ExecResult(exit_code=0, stdout=f"log\n{TRANSCRIPT_MARKER}\n{traj}", stderr="", duration_s=1.0)
    r = MiniSweAgentHarness().collect(None, res, None)  # type: ignore[arg-type]
    assert r.ending == ending, r.summary
    if status == "RepeatedFormatError":
        assert r.summary["model_ending"] == status and "cause" not in r.summary
