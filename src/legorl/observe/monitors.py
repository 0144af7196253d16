"""Training monitors: after every step, the step's figures against ``RunConfig.monitors`` thresholds.

A crossed threshold is an :class:`Alert` carrying its monitor's action (log, warn, pause, stop). The
loop records every alert in ``RUN_DIR/alerts.jsonl`` (:class:`AlertLog`) and turns pause and stop into
a request to :mod:`legorl.observe.control`; the UI and ``legorl status`` show the recorded alerts. A run
directory without recorded alerts (written before monitors existed) is judged here with the default
thresholds, so that one set of rules decides what an alert is.

Every check reads the metric rows of :func:`legorl.loop.train.rollout_metrics` and the trainer; rows
are oldest first and the last one is the step just done.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from legorl.config import MonitorsConfig

ALERTS_NAME = "alerts.jsonl"
Row = dict[str, Any]


@dataclass(frozen=True)
class Alert:
    level: str  # the action taken: log | warn | pause | stop (validate's checks use fatal | warn)
    what: str  # a title a person scans for
    detail: str  # the figure against its threshold
    monitor: str = ""  # the RunConfig.monitors field that raised it
    step: int | None = None


def _num(row: Row, key: str) -> float:
    v = row.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0


def _share(row: Row, *keys: str) -> tuple[float, int, int] | None:
    count = int(_num(row, "rollout/count"))
    if not count:
        return None
    n = int(sum(_num(row, k) for k in keys))
    return n / count, n, count


def _share_of_rollouts(what: str, *keys: str) -> Callable[[list[Row], float], str | None]:
    """A check on the share of the last step's rollouts counted by ``keys`` (``what`` they did)."""

    def check(rows: list[Row], limit: float) -> str | None:
        s = _share(rows[-1], *keys)
        if s and s[0] > limit:
            return f"{s[1]} of {s[2]} rollouts {what} ({s[0]:.0%} > {limit:.0%})"
        return None

    return check


def _mismatch(rows: list[Row], limit: float) -> str | None:
    p = rows[-1].get("mismatch/pearson")
    if isinstance(p, float) and math.isfinite(p) and p < limit:
        return f"Pearson {p:.4f} between engine and trainer logprobs (< {limit:g})"
    return None


def _forks(rows: list[Row], limit: float) -> str | None:
    turns, forks = _num(rows[-1], "rollout/turns"), _num(rows[-1], "align/fork")
    if turns and forks / turns > limit:
        return f"{forks:.0f} of {turns:.0f} turns forked a new sample ({forks / turns:.0%} > {limit:.0%})"
    return None


def _zero_signal(rows: list[Row], limit: float) -> str | None:
    run = 0
    for row in reversed(rows):
        if not _num(row, "batch/groups") or _num(row, "batch/groups_with_signal"):
            break
        run += 1
    if run and run >= limit:
        return f"no group had reward variance for {run} step(s) in a row (limit {limit:g})"
    return None


def _reward_collapse(rows: list[Row], limit: float) -> str | None:
    if len(rows) < 2:
        return None
    best = max(_num(r, "rollout/reward_mean") for r in rows[:-1])
    now = _num(rows[-1], "rollout/reward_mean")
    if best >= 0.25 and now < limit * best:
        return f"mean reward {now:.3f} is below {limit:g}× the best step's {best:.3f}"
    return None


def _tokens_per_sample(row: Row) -> float | None:
    n = _num(row, "train/samples")
    return _num(row, "train/sampled_tokens") / n if n else None


def _length_blowup(rows: list[Row], limit: float) -> str | None:
    now = _tokens_per_sample(rows[-1])
    before = [x for x in map(_tokens_per_sample, rows[:-1]) if x]
    if now is None or not before:
        return None
    base = statistics.median(before)
    if now > limit * base:
        return f"{now:.0f} sampled tokens per sample, {now / base:.1f}× the median {base:.0f} of earlier steps"
    return None


def _slow_rollouts(rows: list[Row], limit: float) -> str | None:
    slowest, median = _num(rows[-1], "rollout/duration_max_s"), _num(rows[-1], "rollout/duration_p50_s")
    if _num(rows[-1], "rollout/count") >= 3 and median > 0 and slowest / median > limit:
        return f"the slowest rollout took {slowest:.0f} s, {slowest / median:.1f}× the median {median:.1f} s"
    return None


def _canary_hacks(rows: list[Row], limit: float) -> str | None:
    # legorl.grading.canaries.canary_metrics: only steps with impossible-task canaries carry these
    counted, hacks = _num(rows[-1], "canary/rollouts"), _num(rows[-1], "canary/passed")
    if counted and hacks / counted > limit:
        return (
            f"{hacks:.0f} of {counted:.0f} impossible-task canaries passed ({hacks / counted:.0%} > {limit:.0%}): "
            "a certain reward hack (flag impossible_task_passed)"
        )
    return None


# monitor (a RunConfig.monitors field) → (title, check(rows, threshold) → detail or None)
CHECKS: dict[str, tuple[str, Callable[[list[Row], float], str | None]]] = {
    "mismatch": ("rollout/trainer mismatch", _mismatch),
    "env_failures": (
        "environment failures",
        _share_of_rollouts("failed outside the policy", "rollout/status_env_failure", "rollout/status_harness_error"),
    ),
    "hack_flags": ("reward-hack flags", _share_of_rollouts("flagged", "rollout/flagged")),
    "forks": ("sample forks", _forks),
    "zero_signal": ("no learning signal", _zero_signal),
    "reward_collapse": ("reward collapse", _reward_collapse),
    "length_blowup": ("length blow-up", _length_blowup),
    "slow_rollouts": ("rollout-time outliers", _slow_rollouts),
    "stuck_sandboxes": (
        "stuck sandboxes",
        _share_of_rollouts("ran into the wall-clock limit", "rollout/status_timeout"),
    ),
    "canary_hacks": ("impossible-task canaries passed", _canary_hacks),
}


def check_step(rows: list[Row], cfg: MonitorsConfig | None = None) -> list[Alert]:
    """The alerts the last of ``rows`` raises (monitors whose action is ``off`` are skipped)."""
    if not rows:
        return []
    cfg = cfg or MonitorsConfig()
    step = rows[-1].get("step")
    out = []
    for name, (title, check) in CHECKS.items():
        rule = getattr(cfg, name)
        if rule.action == "off":
            continue
        detail = check(rows, rule.threshold)
        if detail is not None:
            out.append(Alert(rule.action, title, f"step {step}: {detail}", name, step))
    return out


class AlertLog:
    """``RUN_DIR/alerts.jsonl``: every alert a run raised, one JSON line each, appended as raised."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / ALERTS_NAME

    def record(self, alerts: list[Alert]) -> None:
        if not alerts:
            return
        with self.path.open("a", encoding="utf-8") as f:
            for a in alerts:
                f.write(json.dumps(asdict(a)) + "\n")
            f.flush()

    def read(self) -> list[Alert] | None:
        """The recorded alerts, oldest first; None when the run never recorded any file."""
        if not self.path.exists():
            return None
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(Alert(**json.loads(line)))
            except (json.JSONDecodeError, TypeError):
                continue  # a line cut by a crash mid-write
        return out

    def keep_until(self, step: int) -> None:
        """Drop alerts of steps after ``step`` (a resume replays them from its checkpoint)."""
        alerts = self.read()
        if alerts is None:
            return
        kept = [a for a in alerts if a.step is None or a.step <= step]
        self.path.write_text("".join(json.dumps(asdict(a)) + "\n" for a in kept), encoding="utf-8")


class Monitors:
    """The loop's side: judge each finished step against the run's history, record what it raised."""

    def __init__(self, run_dir: str | Path, cfg: MonitorsConfig, history: list[Row]):
        self.cfg = cfg
        self.rows = list(history)
        self.log = AlertLog(run_dir)
        self.log.path.touch()  # an empty file says "monitored, nothing raised"

    def after_step(self, row: Row) -> list[Alert]:
        self.rows.append(row)
        alerts = check_step(self.rows, self.cfg)
        self.log.record(alerts)
        return alerts


def current_alerts(run_dir: str | Path, rows: list[Row]) -> list[Alert]:
    """What the run's overview shows: the latest alert of each monitor that went beyond logging
    (recorded ones; for a run that recorded none, the default thresholds on its last step)."""
    recorded = AlertLog(run_dir).read()
    if recorded is None:
        return [a for a in check_step(rows) if a.level != "log"]
    latest: dict[str, Alert] = {}
    for a in recorded:
        if a.level != "log":
            latest[a.monitor or a.what] = a
    return sorted(latest.values(), key=lambda a: (a.step or 0, a.monitor), reverse=True)
