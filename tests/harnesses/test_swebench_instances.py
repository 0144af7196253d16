"""Real SWE-bench instances through real harnesses, one per runner: Claude Code on a sympy instance
(sympy's own runner) and mini-swe-agent on a pytest-dev/pytest instance (the repository is the test
framework), each with the scripted gold policy (reward 1) and the scripted wrong one (reward 0), in
bwrap without network. All four harnesses on both: ``legorl bench rollout --harness H --task ID
--no-cold --rollouts 1`` (README)."""

import pytest
from rollout_helpers import assert_gateway_only, rollout

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.swebench_data]

SYMPY = "sympy__sympy-12096"
PYTEST = "pytest-dev__pytest-10051"


@pytest.mark.npm
def test_claude_code_resolves_a_real_sympy_instance(tmp_path):
    run = rollout("claude-code", "scripted-gold", tmp_path, task=SYMPY)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail[-2000:])
    assert "sympy/core/function.py" in r.diff  # the gold fix, as the harness wrote it
    assert_gateway_only(run)
    wrong = rollout("claude-code", "scripted-wrong", tmp_path / "wrong", task=SYMPY)
    assert (wrong.rollout.status, wrong.rollout.reward) == ("ok", 0.0), wrong.rollout.cause


def test_mini_swe_agent_resolves_a_real_pytest_instance(tmp_path):
    run = rollout("mini-swe-agent", "scripted-gold", tmp_path, task=PYTEST)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail[-2000:])
    assert not [f for f in r.flag_details if f.severity == "blocking"]
    assert_gateway_only(run)
    wrong = rollout("mini-swe-agent", "scripted-wrong", tmp_path / "wrong", task=PYTEST)
    assert (wrong.rollout.status, wrong.rollout.reward) == ("ok", 0.0), wrong.rollout.cause
