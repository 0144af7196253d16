"""The live progress bar: phases replace each other, rollouts advance it with a token rate."""

from __future__ import annotations

import io

from rich.console import Console

from legorl.observe.progress import RichPhaseProgress, StepClock, sampled_tokens
from legorl.trajectory.records import Rollout, Sample


def _rollout(i: int, sampled: int) -> Rollout:
    ids = list(range(4 + sampled))
    mask = [0] * 4 + [1] * sampled
    sample = Sample(
        rollout_id=f"r{i}",
        thread_id="t",
        segment_index=0,
        token_ids=ids,
        loss_mask=mask,
        rollout_logprobs=[0.0] * len(ids),
    )
    return Rollout(rollout_id=f"r{i}", task_id="t", harness="h", sandbox="s", samples=[sample])


def test_phases_and_rate():
    out = io.StringIO()
    with RichPhaseProgress(Console(file=out, force_terminal=True, width=120)) as bar:
        bar.begin("step 1/2: rollouts", total=3)
        bar.rollout_done(_rollout(0, 10))
        bar.rollout_done(_rollout(1, 5))
        [(label, done, total, rate)] = bar.tasks
        assert (label, done, total) == ("step 1/2: rollouts", 2, 3)
        assert rate.endswith(" tok/s") and float(rate.split()[0]) > 0
        bar.begin("step 1/2: training on 16 samples")  # the next phase replaces the bar
        assert [(t[0], t[1], t[2]) for t in bar.tasks] == [("step 1/2: training on 16 samples", 0, None)]
        bar.console.print("a summary line")
    assert "a summary line" in out.getvalue()
    assert sampled_tokens(_rollout(2, 7)) == 7


def test_without_a_terminal_the_figures_print_as_lines():
    """A log file cannot redraw a bar: the phase and each quarter of its rollouts print as lines."""
    out = io.StringIO()
    with RichPhaseProgress(Console(file=out, force_terminal=False, width=200)) as bar:
        bar.begin("held-out before: oneline-heldout", total=8)
        for i in range(8):
            bar.rollout_done(_rollout(i, 3))
    lines = out.getvalue().splitlines()
    assert lines[0] == "held-out before: oneline-heldout: 8 rollouts"
    quarters = [ln for ln in lines[1:] if "rollouts," in ln]
    assert [ln.split(": ")[-1].split()[0] for ln in quarters] == ["2/8", "4/8", "6/8", "8/8"]
    assert all("tok/s" in ln and "ETA" in ln for ln in quarters)


def test_step_clock_counts_steps_not_the_evaluation_before_them():
    clock = StepClock(total_steps=5)
    assert clock.eta_s(0, 10.0) == 40.0  # 4 steps left at 10 s
    assert clock.eta_s(1, 20.0) == 45.0  # mean 15 s x 3
    assert clock.eta_s(4, 15.0) == 0.0
