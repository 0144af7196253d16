"""The one-line-fix harness through the full rollout runner on a generated task: scripted gold
line → reward 1, the buggy line again → reward 0, and the sandbox only ever connected to the gateway."""

import pytest
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

from legorl.harnesses.line_fix import LineFixHarness
from legorl.tasks.loader import get_task

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
TASK = "legorl__oneline-train-001"


def test_line_fix_gold_line_rewards_one(tmp_path):
    run = rollout("line-fix", "scripted-gold", tmp_path, task=TASK)
    r = run.rollout
    assert (r.status, r.reward) == ("ok", 1.0), (r.status, r.cause, r.harness_log_tail)
    assert "+    return a + b" in r.diff
    assert_recorded(run)
    assert_gateway_only(run)


def test_line_fix_buggy_line_rewards_zero(tmp_path):
    run = rollout("line-fix", "scripted-wrong", tmp_path, task=TASK)
    r = run.rollout
    assert (r.status, r.reward, r.diff) == ("ok", 0.0, ""), (r.status, r.cause)


def test_gold_replies_need_a_one_line_patch():
    with pytest.raises(ValueError, match="not a one-line fix"):
        LineFixHarness.gold_replies(get_task("legorl__medium-001"))
