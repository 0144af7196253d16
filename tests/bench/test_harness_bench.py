"""``legorl bench harness``: the per-rollout classification (hang, runtime crash, call time) on
records built by hand, and the CI smoke — two real rollouts of the embedded model through the
minimal harness, then a rerun that resumes from the results file and runs nothing."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from legorl.bench.harness import (
    _Window,
    call_interval,
    cause_kind,
    classify,
    percentile,
    read_done,
    summarize,
    union_seconds,
)
from legorl.bench.schema import RESULT_KEYS
from legorl.cli import app
from legorl.gateway.app import CLIENT_DISCONNECTED
from legorl.harnesses.base import HarnessResult
from legorl.sandbox.base import ExecResult
from legorl.trajectory.records import AlignmentEvent, GraderReport, Rollout, Turn

END = 1_000.0  # when the harness program was killed or exited (wall-clock seconds)


def _turn(i: int, end: float, total: float, *, failed: bool = False, error: str | None = None) -> Turn:
    return Turn(
        session_id="s",
        thread_id="t",
        turn_index=i,
        dialect="openai.chat",
        prompt_token_ids=[1, 2],
        output_token_ids=[] if failed else [3],
        output_logprobs=[] if failed else [-0.1],
        sampling={},
        weight_version=0,
        finish_reason="error" if failed else "stop",
        alignment=AlignmentEvent(kind="start", turn_index=i),
        started_at=end,  # stamped when the Turn is built: after generation
        timings={"cancelled_after_s": total} if failed else {"total_s": total, "generate_s": total * 0.9},
        response={} if failed else {"choices": [{"message": {"content": "sleep 1000"}}]},
        failed=failed,
        error=error,
    )


def _window(timed_out: bool, exit_code: int = 0, signal: int | None = None) -> _Window:
    res = ExecResult(exit_code, "", "", 90.0, timed_out, killed_by_signal=signal)
    result = HarnessResult("timeout" if timed_out else "finished", exit_code, "")
    return _Window(start=END - 90, end=END, exec_result=res, result=result)


def _rollout(status: str = "timeout", **kw) -> Rollout:
    return Rollout(
        rollout_id="r-1",
        session_id="s",
        task_id="legorl__trivial-001",
        harness="h",
        sandbox="bwrap",
        status=status,
        **kw,
    )


def test_a_timeout_idle_after_its_last_call_is_a_hang():
    turns = [_turn(0, END - 60, 2.0), _turn(1, END - 40, 3.0)]
    rec = classify(_rollout(duration_s=100.0), _window(True), turns, 0, "t")
    assert rec["hang"] and rec["idle_s"] == 40.0 and rec["runtime_crash"] is None
    assert rec["last_call"]["finish_reason"] == "stop" and "sleep 1000" in rec["last_call"]["reply"]
    assert rec["call_s"] == 5.0 and rec["model_calls"] == 2


def test_a_timeout_with_a_call_cut_off_or_just_answered_is_not_a_hang():
    cut = [_turn(0, END - 60, 2.0), _turn(1, END - 0.5, 30.0, failed=True, error=CLIENT_DISCONNECTED)]
    assert not classify(_rollout(), _window(True), cut, 0, "t")["hang"]
    # a call the harness aborted itself long before the end does not explain the silence after it
    early = [_turn(0, END - 60, 2.0, failed=True, error=CLIENT_DISCONNECTED), _turn(1, END - 50, 1.0)]
    assert classify(_rollout(), _window(True), early, 0, "t")["hang"]
    just = [_turn(0, END - 0.3, 20.0)]  # the response was still on the wire when the clock ran out
    assert not classify(_rollout(), _window(True), just, 0, "t")["hang"]
    # a run that ended by itself, however idle, is no hang
    assert not classify(_rollout("ok"), _window(False), [_turn(0, END - 60, 2.0)], 0, "t")["hang"]


def test_a_fault_signal_is_a_runtime_crash_but_a_plain_exit_code_is_not():
    via_shell = classify(_rollout("harness_error"), _window(False, 132), [], 0, "t")  # 128 + SIGILL
    assert via_shell["runtime_crash"] == "SIGILL"
    direct = classify(_rollout("harness_error"), _window(False, -11, signal=11), [], 0, "t")
    assert direct["runtime_crash"] == "SIGSEGV"
    assert classify(_rollout("harness_error"), _window(False, 1), [], 0, "t")["runtime_crash"] is None


def test_call_time_counts_overlapping_calls_once():
    assert call_interval(_turn(0, 10.0, 4.0)) == (6.0, 10.0)
    assert union_seconds([(0, 2), (1, 3), (5, 6)]) == 4.0
    assert union_seconds([]) == 0.0


def test_env_failure_causes_are_grouped_by_kind():
    assert cause_kind(_rollout("env_failure", cause="sandbox create: no space left")) == "sandbox create"
    assert cause_kind(_rollout("env_failure", cause="engine failed turn 3: overloaded")) == "engine"
    graded = GraderReport(
        resolved=False, reward=0.0, status="env_failure", cause="runner_timeout: x", cause_kind="runner_timeout"
    )
    assert cause_kind(_rollout("env_failure", cause="runner_timeout: x", grader=graded)) == "grader: runner_timeout"


def test_summary_rates_and_percentiles():
    def rec(i, status, **kw):
        base = {"i": i, "status": status, "wall_s": 10.0 * (i + 1), "call_s": 1.0, "generate_s": 0.5}
        return {**base, "model_calls": 2, "resolved": status == "ok", "reward": float(status == "ok"), **kw}

    records = [
        rec(0, "ok"),
        rec(1, "env_failure", cause_kind="sandbox create"),
        rec(2, "harness_error", runtime_crash="SIGILL"),
        rec(3, "timeout", hang=True, idle_s=50.0),
        rec(4, "harness_error"),  # the harness gave up on the model's output: the model's doing
    ]
    s = summarize("h", "embedded", records)
    assert s["statuses"] == {"ok": 1, "env_failure": 1, "harness_error": 2, "timeout": 1}
    assert s["env_failures_by_cause"] == {"sandbox create": 1}
    assert s["env_failure_rate_not_model"] == 0.6 and s["hangs"] == 1 and s["runtime_crashes"] == 1
    assert s["wall_s_p50"] == 30.0 and s["wall_s_p95"] == 50.0 and s["resolved_rate"] == 0.2
    assert s["gateway_share"] == round(5 / 150, 4) and s["engine_share"] == round(2.5 / 150, 4)
    assert [h["i"] for h in s["hang_details"]] == [3]
    assert percentile([], 50) is None and percentile([3.0], 95) == 3.0


def test_a_torn_last_line_is_run_again(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"i": 0, "status": "ok"}) + "\n" + '{"i": 1, "sta')
    assert sorted(read_done(path)) == [0]


@pytest.mark.slow
@pytest.mark.sandbox
def test_bench_harness_smoke_resumes(tmp_path):
    """The CI smoke: 2 rollouts of SmolLM2-135M through the minimal harness (2 short calls each), side
    by side, then the same command again, which finds both in the results file and runs nothing."""
    import torch

    runner = CliRunner()
    args = ["bench", "harness", "--harness", "minimal", "--rollouts", "2", "--out", str(tmp_path), "--json"]
    args += ["--concurrency", "2"]
    args += ["--set", "rollout.max_turns=2", "--set", "rollout.max_tokens_per_turn=48"]
    # one intra-op thread: on a 2-core machine shared with other jobs, two threads decode ~10x slower
    # (docs/harness-bench.md), which would take this smoke from under a minute to several
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = runner.invoke(app, args)
    finally:
        torch.set_num_threads(threads)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(RESULT_KEYS["harness"]) <= set(out)
    assert out["rollouts"] == 2 and out["ran_now"] == 2 and sum(out["statuses"].values()) == 2
    # the small model solves nothing reliably, but the machinery around it must not fail
    assert out["env_failure_rate_not_model"] == 0.0, out
    assert out["hangs"] == 0 and out["runtime_crashes"] == 0
    assert out["model_calls_mean"] >= 1 and 0 < out["gateway_share"] <= 1
    records = [json.loads(line) for line in (tmp_path / "minimal.jsonl").read_text().splitlines()]
    assert sorted(r["i"] for r in records) == [0, 1] and out["concurrency"] == 2
    (s0, e0), (s1, e1) = (r["harness_window"] for r in records)
    assert max(s0, s1) < min(e0, e1)  # the two harness programs ran at the same time
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    second = json.loads(again.stdout)
    assert second["ran_now"] == 0 and second["statuses"] == out["statuses"]


def test_the_small_model_gets_the_learning_bench_slim_harness_options():
    from legorl.bench.harness import harness_options
    from legorl.bench.learn import HARNESS_RUNS

    opencode = HARNESS_RUNS["opencode"]["rollout.harness_options"]
    assert harness_options("opencode-responses") == {"rollout.harness_options": opencode}
    assert harness_options("minimal") == {}
