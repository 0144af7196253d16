"""``legorl status RUN_DIR``: a terminal summary of a live or finished run."""

from __future__ import annotations

from pathlib import Path

from legorl.observe.rundata import RunData, RunSummary


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None else format(x, fmt)


def _dur(s: float | None) -> str:
    if s is None:
        return "–"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def run_summary(run_dir: str | Path) -> RunSummary:
    run = RunData(run_dir)
    try:
        return run.summary()
    finally:
        run.close()


def format_summary(s: RunSummary) -> str:
    """The summary as a few aligned lines (what ``legorl status`` prints)."""
    steps = f"{s.step}/{s.steps}" if s.steps is not None else str(s.step)
    lines = [
        f"run        {s.name}  ({s.run_dir})",
        f"state      {s.state}"
        + (f", last write {_dur(s.last_update_s_ago)} ago" if s.last_update_s_ago is not None else "")
        + (f"\n           {s.state_reason}" if s.state_reason else ""),
        f"step       {steps}   rollouts {s.rollouts}",
        f"reward     {_num(s.reward_last)} (last step)   resolved {_num(s.resolved_last)}",
        f"throughput {_num(s.rollouts_per_min)} rollouts/min   {_num(s.tokens_per_s)} sampled tokens/s   "
        f"step {_dur(s.step_time_s)}",
        f"ETA        {_dur(s.eta_s) if s.state != 'finished' else 'done'}",
    ]
    if s.canaries:  # impossible-task canaries (legorl.grading.canaries): any pass is a hack
        rate = s.canaries["hack_rate"]
        lines.append(
            f"canaries   {s.canaries['passed']} of {s.canaries['rollouts']} passed"
            + (f" (hack rate {rate:.3g})" if rate is not None else "")
        )
    if s.alerts:
        lines.append(f"alerts     {len(s.alerts)}")
        lines += [f"  [{a.level}] {a.what}: {a.detail}" for a in s.alerts]
    else:
        lines.append("alerts     none")
    return "\n".join(lines)


__all__ = ["format_summary", "run_summary"]
