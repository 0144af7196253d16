"""The learning benchmark's statistics (its end-to-end smoke: tests/test_cli_json.py)."""

from __future__ import annotations

import pytest

from legorl.bench.learn import bootstrap_diff
from legorl.loop.eval_stats import EvalReport, TaskResult


def _report(counts: dict[str, tuple[int, int]]) -> EvalReport:
    tasks = [TaskResult(t, samples=n, correct=c) for t, (c, n) in counts.items()]
    return EvalReport(
        ks=[1],
        tasks=tasks,
        pass_at={},
        interval={},
        samples=sum(t.samples for t in tasks),
        correct=sum(t.correct for t in tasks),
        env_failures=0,
        harness_errors=0,
    )


def test_bootstrap_interval_brackets_the_difference_and_is_zero_width_for_uniform_gains():
    before = _report({"a": (1, 10), "b": (2, 10), "c": (0, 10), "d": (3, 10)})
    after = _report({"a": (4, 10), "b": (6, 10), "c": (1, 10), "d": (5, 10)})
    lo, hi = bootstrap_diff(before, after)
    assert lo <= (16 - 6) / 40 <= hi and lo > 0
    # every task gains exactly 0.3: any resample shows 0.3
    same = bootstrap_diff(_report({"a": (1, 10), "b": (2, 10)}), _report({"a": (4, 10), "b": (5, 10)}))
    assert same == pytest.approx((0.3, 0.3))


def test_bootstrap_uses_only_tasks_in_both_reports():
    lo, hi = bootstrap_diff(_report({"a": (0, 4), "x": (4, 4)}), _report({"a": (2, 4), "y": (0, 4)}))
    assert lo == hi == pytest.approx(0.5)


def test_solved_among_valid_separates_format_from_content(tmp_path):
    """Only answers that replaced the line by one statement count; of those, the rewarded ones."""
    from legorl.bench.learn import solved_among_valid, valid_line_rate
    from legorl.trajectory.records import Rollout
    from legorl.trajectory.store import RunStore

    def diff(line: str) -> str:
        return f"--- a/lib/funcs.py\n+++ b/lib/funcs.py\n@@ -3 +3 @@\n-    return a - b\n+{line}\n"

    store = RunStore(tmp_path)
    for i, (text, reward, status) in enumerate(
        [
            ("    return a * b", 1.0, "ok"),  # valid, solved
            ("    return a + b", 0.0, "ok"),  # valid, wrong
            ("    return (a *", 0.0, "ok"),  # not a statement
            ("    return a * b", 0.0, "env_failure"),  # not graded: left out
        ]
    ):
        r = Rollout(rollout_id=f"r{i}", task_id="t", harness="line-fix", sandbox="bwrap", status=status, reward=reward)
        store.append_rollout(r.model_copy(update={"diff": diff(text)}))
    store.close(compact=False)
    assert solved_among_valid(tmp_path) == (1, 2)
    assert valid_line_rate(tmp_path) == 2 / 3
