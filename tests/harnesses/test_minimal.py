"""The minimal harness through the full rollout runner: scripted gold fix → reward 1, wrong fix →
reward 0, and the sandbox only ever connected to the gateway."""

import pytest
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def test_minimal_gold_fix_rewards_one(tmp_path, dash_tokens):
    # the session token starts with - (issue 17): still a clean run
    run = rollout("minimal", "scripted-gold", tmp_path)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert "return a + b" in r.diff
    assert_recorded(run)
    assert_gateway_only(run)


def test_minimal_wrong_fix_rewards_zero(tmp_path, underscore_tokens):
    # the session token starts with _ (issue 17): still a clean run
    run = rollout("minimal", "scripted-wrong", tmp_path)
    r = run.rollout
    assert r.status == "ok" and r.reward == 0.0, (r.status, r.cause)
    assert "# attempted fix" in r.diff
    assert_gateway_only(run)
