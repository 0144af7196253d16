"""Acceptance: the rollout's budget holds at the gateway whatever runs in the sandbox. A program in a
real bubblewrap sandbox (the ``command`` harness) calls the gateway itself 25 times with the session
token from its environment; the gateway serves ``max_turns`` + the side-call slack, refuses the rest
(recorded, never trained on), and the rollout ends as ``budget``: status ok, graded as usual."""

import json
from pathlib import Path

import pytest
from rollout_helpers import assert_gateway_only, rollout

from legorl.gateway.sessions import default_turn_slack
from legorl.harnesses.base import Budget
from legorl.trajectory.store import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

CALLS = 25


def test_program_calling_the_gateway_directly_is_stopped_at_the_budget(tmp_path):
    client = Path(__file__).with_name("budget_flood_client.py")
    budget = Budget(max_turns=2, max_tokens_per_turn=64, wall_clock_s=120)
    served = budget.max_turns + default_turn_slack(budget.max_turns)  # 4
    run = rollout("command", "scripted-gold", tmp_path, command=f"python3 {client} {CALLS}", budget=budget)
    r = run.rollout

    # the program saw its first calls answered, every later one refused with 403 (its exit code 1
    # says so; its stdout may be crowded out of the log tail by the sandbox's stderr)
    assert r.harness_exit_code == 1, (r.harness_exit_code, r.harness_log_tail)
    lines = [line for line in r.harness_log_tail.splitlines() if line.startswith('{"statuses"')]
    if lines:
        assert json.loads(lines[0])["statuses"] == [200] * served + [403] * (CALLS - served), lines[0]
    assert len(run.prompts) == served  # the engine never saw a refused call

    # the rollout ends as budget (the exit code 1 of a refused client is no harness crash) and is graded
    assert r.status == "ok" and r.grader is not None and r.grader.status == "ok", (r.status, r.cause)
    assert r.reward == 0.0  # it changed nothing
    assert r.cause == (
        f"gateway budget exhausted: {served} of 2+2 model calls used, {CALLS - served} more refused "
        "(harness exit code 1)"
    ), r.cause

    # no sample beyond the budget reaches training; every call is on record
    assert sum(len(s.turn_indices) for s in r.samples) == served
    assert all(s.num_sampled > 0 for s in r.samples)
    turns = list(RunStore(run.run_dir).iter_turns(r.session_id))
    assert len(turns) == CALLS
    assert [t.finish_reason == "refused" for t in sorted(turns, key=lambda t: t.turn_index)] == [False] * served + [
        True
    ] * (CALLS - served)
    refused = [t for t in turns if t.finish_reason == "refused"]
    assert all(
        t.failed and not t.output_token_ids and t.response["error"]["code"] == "budget_exhausted" for t in refused
    )
    assert {i for s in r.samples for i in s.turn_indices} == {t.turn_index for t in turns if not t.failed}
    stored = RunStore(run.run_dir).get_rollout(r.rollout_id)
    assert stored is not None and sum(len(s.turn_indices) for s in stored.samples) == served

    # grading flags (info: the budget held, nothing extra was trained on)
    by_kind = {f.kind: f for f in r.flag_details}
    spent = by_kind["gateway_budget_exhausted"]
    assert spent.severity == "info" and spent.evidence["refused"] == CALLS - served and spent.evidence["turn"] == served
    foreign = by_kind["gateway_foreign_client"]
    assert foreign.evidence["requests"] == CALLS // 2 and "Python-urllib" in foreign.evidence["detail"]
    assert not any(label.startswith("gateway_") for label in r.flags)  # none of them blocking
    assert_gateway_only(run)


def test_honest_harness_at_its_step_budget_is_untouched(tmp_path):
    # the default command program (tiny tool agent) needs exactly 2 calls for the gold fix
    run = rollout(
        "command", "scripted-gold", tmp_path, budget=Budget(max_turns=2, max_tokens_per_turn=4096, wall_clock_s=120)
    )
    r = run.rollout
    assert (r.status, r.reward, r.cause) == ("ok", 1.0, None), (r.status, r.cause, r.harness_log_tail)
    assert not [f for f in r.flag_details if f.kind.startswith("gateway_")], r.flag_details
    assert sum(len(s.turn_indices) for s in r.samples) == 2
