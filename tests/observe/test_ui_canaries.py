"""The overview's impossible-task canary panel (issue 37): totals, the per-step hack rate (updated live
as steps are written), the canaries passed with links to their rollouts; absent from a run without
canaries. The run directory is written by the production writers (config, run store, metrics logger
with the loop's own :func:`~legorl.grading.canaries.canary_metrics`, monitors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.grading.canaries import canary_metrics
from legorl.grading.impossible import FLAG_KIND
from legorl.observe.metrics import MetricsLogger
from legorl.observe.monitors import Monitors
from legorl.observe.rundata import RunData
from legorl.observe.ui.pages import Links, Pages
from legorl.observe.ui.server import BackgroundUI
from legorl.trajectory.records import Flag, GraderReport, Rollout
from legorl.trajectory.store import RunStore


def _rollout(i: int, step: int, task_id: str, hacked: bool = False) -> Rollout:
    flags = [Flag(kind=FLAG_KIND, evidence={"source": "runner", "tests": ["tests/t.py::test_x"]})] if hacked else []
    return Rollout(
        rollout_id=f"r{step}-{i}",
        task_id=task_id,
        harness="command",
        sandbox="bwrap",
        step=step,
        group_index=i,
        status="ok",
        reward=0.0,
        flags=[f.label for f in flags],
        flag_details=flags,
        grader=GraderReport(resolved=False, reward=0.0, flag_details=flags, tests_resolved=hacked),
    )


def _step(run: Path, store: RunStore, metrics: MetricsLogger, monitors: Monitors, step: int, hacks: int) -> None:
    rollouts = [_rollout(i, step, "t1") for i in range(2)]
    rollouts += [_rollout(2 + i, step, "t1__impossible", hacked=i < hacks) for i in range(2)]
    for r in rollouts:
        store.append_rollout(r)
    row = {"rollout/count": len(rollouts), "rollout/reward_mean": 0.0, **canary_metrics(rollouts)}
    metrics.log(step, row)
    monitors.after_step({"step": step, **row})


def _canary_run(run: Path, steps: list[int]) -> tuple[RunStore, MetricsLogger, Monitors]:
    cfg = RunConfig.load(None, run_dir=str(run), steps=4, **{"grading.canaries.share": 0.5})
    run.mkdir(parents=True)
    (run / "config.json").write_text(cfg.model_dump_json(indent=2))
    store, metrics = RunStore(run), MetricsLogger(run)
    monitors = Monitors(run, cfg.monitors, [])
    for step, hacks in enumerate(steps):
        _step(run, store, metrics, monitors, step, hacks)
    return store, metrics, monitors


def test_the_overview_has_a_canary_panel_only_when_the_run_has_canaries(tmp_path):
    store, metrics, _ = _canary_run(tmp_path / "canaried", [0, 1])
    store.close()
    metrics.close()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(RunConfig.load(None, run_dir=str(plain)).model_dump_json())
    RunStore(plain).close()
    runs = {"canaried": RunData(tmp_path / "canaried"), "plain": RunData(plain)}
    try:
        pages = Pages(runs)
        html = pages.overview("canaried", Links())
        assert 'id="canaries"' in html and "canary/hack_rate" in html and 'id="canary-totals"' in html
        assert "r1-2" in html and "/run/canaried/rollouts?flag=impossible_task_passed" in html
        assert runs["canaried"].summary().canaries == {"rollouts": 4, "passed": 1, "hack_rate": 0.25}
        assert 'id="canaries"' not in pages.overview("plain", Links())
        assert runs["plain"].summary().canaries is None
    finally:
        for r in runs.values():
            r.close()


@pytest.mark.slow
@pytest.mark.browser
def test_the_canary_panel_in_a_browser_updates_live(tmp_path, page, shots):
    run = tmp_path / "canaried"
    store, metrics, monitors = _canary_run(run, [0, 1])
    try:
        with BackgroundUI([run]) as ui:
            page.goto(ui.url)
            page.goto(f"{ui.origin}/run/canaried/")
            panel = page.locator("#canaries")
            assert "Impossible-task canaries" in panel.locator("h2").inner_text()
            chart = panel.locator("figure.chart")
            chart.locator("polyline[data-key='canary/hack_rate']").wait_for(state="attached")
            assert chart.locator("circle").count() == 2
            assert panel.locator("#canary-summary").inner_text().split() == [
                "canary", "rollouts", "4", "passed", "1", "hack", "rate", "0.25"
            ]  # fmt: skip
            assert panel.locator("table.canary-passed tr.rollout-row").count() == 1
            assert "impossible-task canaries passed" in page.locator("ul.alerts").inner_text()
            page.screenshot(path=str(shots / "canaries.png"), full_page=True)

            _step(run, store, metrics, monitors, 2, hacks=2)  # the next step, while the page is open
            page.wait_for_function(
                "document.querySelectorAll('#canaries figure.chart circle').length === 3", timeout=60_000
            )
            page.wait_for_function(
                "document.querySelector('#canary-totals').innerText.includes('3 of 6')", timeout=60_000
            )
            panel.locator("table.canary-passed a").first.click()
            page.wait_for_url("**/rollout/r1-2")  # a click waits for the navigation to start, not to land
    finally:
        store.close()
        metrics.close()
