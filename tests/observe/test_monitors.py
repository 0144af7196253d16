"""Training monitors on metric rows: each check fires past its threshold and not before, actions and
``off`` come from the config, alerts are recorded and shown (latest per monitor)."""

from __future__ import annotations

import json

import pytest

from legorl.config import MonitorsConfig, RunConfig
from legorl.observe.monitors import CHECKS, AlertLog, Monitors, check_step, current_alerts


def row(step: int = 0, **kv: float) -> dict:
    return {"step": step, "rollout/count": 10, **{k.replace("__", "/"): v for k, v in kv.items()}}


def fired(rows: list[dict], cfg: MonitorsConfig | None = None) -> set[str]:
    return {a.monitor for a in check_step(rows, cfg)}


def test_every_monitor_has_a_config_rule_and_back():
    assert set(CHECKS) == set(MonitorsConfig.model_fields)


@pytest.mark.parametrize(
    ("monitor", "quiet", "loud"),
    [
        ("mismatch", [row(mismatch__pearson=0.995)], [row(mismatch__pearson=0.95)]),
        (
            "env_failures",
            [row(rollout__status_env_failure=2)],
            [row(rollout__status_env_failure=2, rollout__status_harness_error=1)],
        ),
        ("hack_flags", [row(rollout__flagged=0)], [row(rollout__flagged=1)]),
        ("forks", [row(rollout__turns=20, align__fork=5)], [row(rollout__turns=20, align__fork=6)]),
        (
            "zero_signal",
            [
                row(0, batch__groups=2, batch__groups_with_signal=0),
                row(1, batch__groups=2, batch__groups_with_signal=0),
            ],
            [row(i, batch__groups=2, batch__groups_with_signal=0) for i in range(3)],
        ),
        (
            "reward_collapse",
            [row(0, rollout__reward_mean=0.6), row(1, rollout__reward_mean=0.31)],
            [row(0, rollout__reward_mean=0.6), row(1, rollout__reward_mean=0.29)],
        ),
        (
            "length_blowup",
            [row(0, train__samples=4, train__sampled_tokens=400), row(1, train__samples=4, train__sampled_tokens=1200)],
            [row(0, train__samples=4, train__sampled_tokens=400), row(1, train__samples=4, train__sampled_tokens=1204)],
        ),
        (
            "slow_rollouts",
            [row(rollout__duration_max_s=50, rollout__duration_p50_s=10)],
            [row(rollout__duration_max_s=51, rollout__duration_p50_s=10)],
        ),
        ("stuck_sandboxes", [row(rollout__status_timeout=2)], [row(rollout__status_timeout=3)]),
        ("canary_hacks", [row(canary__rollouts=4, canary__passed=0)], [row(canary__rollouts=4, canary__passed=1)]),
    ],
)
def test_each_monitor_fires_past_its_threshold_only(monitor, quiet, loud):
    assert monitor not in fired(quiet)
    assert monitor in fired(loud)
    (alert,) = [a for a in check_step(loud) if a.monitor == monitor]
    assert alert.step == loud[-1]["step"] and alert.detail.startswith(f"step {alert.step}: ")
    assert alert.level == getattr(MonitorsConfig(), monitor).action
    off = RunConfig.load(None, **{f"monitors.{monitor}.action": "off"}).monitors
    assert monitor not in fired(loud, off)


def test_reward_collapse_needs_a_reward_worth_losing():
    assert "reward_collapse" not in fired([row(0, rollout__reward_mean=0.2), row(1, rollout__reward_mean=0.0)])


def test_missing_and_nan_figures_raise_nothing():
    assert check_step([]) == []
    assert check_step([{"step": 0}]) == []
    assert "mismatch" not in fired([row(mismatch__pearson=float("nan"))])
    assert check_step([{"step": 0, "rollout/count": 0, "rollout/status_env_failure": 0}]) == []


def test_partial_rule_override_keeps_the_other_default():
    cfg = RunConfig.load(None, **{"monitors.env_failures.action": "pause", "monitors.mismatch.threshold": 0.5})
    assert (cfg.monitors.env_failures.threshold, cfg.monitors.env_failures.action) == (0.2, "pause")
    assert (cfg.monitors.mismatch.threshold, cfg.monitors.mismatch.action) == (0.5, "warn")
    assert "mismatch" not in fired([row(mismatch__pearson=0.9)], cfg.monitors)


def test_monitors_record_alerts_and_the_overview_shows_the_latest_per_monitor(tmp_path):
    cfg = RunConfig.load(None, **{"monitors.env_failures.action": "pause"}).monitors
    m = Monitors(tmp_path, cfg, history=[])
    assert m.after_step(row(0)) == [] and AlertLog(tmp_path).read() == []
    m.after_step(
        row(1, rollout__status_env_failure=5, rollout__flagged=1, rollout__duration_max_s=60, rollout__duration_p50_s=1)
    )
    m.after_step(row(2, rollout__status_env_failure=9))
    lines = [json.loads(x) for x in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [(x["step"], x["monitor"], x["level"]) for x in lines] == [
        (1, "env_failures", "pause"),
        (1, "hack_flags", "warn"),
        (1, "slow_rollouts", "log"),
        (2, "env_failures", "pause"),
    ]
    shown = current_alerts(tmp_path, m.rows)
    assert [(a.monitor, a.step) for a in shown] == [("env_failures", 2), ("hack_flags", 1)]  # no "log" level
    assert "9 of 10 rollouts" in shown[0].detail

    AlertLog(tmp_path).keep_until(1)  # a resume from the checkpoint of step 1
    assert [a.step for a in AlertLog(tmp_path).read()] == [1, 1, 1]


def test_a_run_without_recorded_alerts_is_judged_with_the_defaults(tmp_path):
    rows = [row(3, mismatch__pearson=0.9, rollout__status_env_failure=3, rollout__flagged=1)]
    assert {a.what for a in current_alerts(tmp_path, rows)} == {
        "rollout/trainer mismatch",
        "environment failures",
        "reward-hack flags",
    }


def test_a_torn_alert_line_is_skipped(tmp_path):
    m = Monitors(tmp_path, MonitorsConfig(), history=[])
    m.after_step(row(0, rollout__flagged=2))
    with (tmp_path / "alerts.jsonl").open("a") as f:
        f.write('{"level": "warn", "wh')
    assert [a.monitor for a in AlertLog(tmp_path).read()] == ["hack_flags"]
