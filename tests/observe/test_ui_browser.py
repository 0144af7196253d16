"""The run UI in a real browser (Playwright driving Debian's chromium) against a real run directory:
a short training run made once per session (runmaker.py), and a run going on while a test watches."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from legorl.observe.ui.export import export_snapshot
from legorl.observe.ui.server import BackgroundUI
from legorl.store import open_run

pytestmark = [pytest.mark.slow, pytest.mark.sandbox, pytest.mark.browser]


def _rollout_of(run_dir: Path, *, flagged: bool, resolved: bool | None = None) -> str:
    store = open_run(run_dir)
    try:
        for r in store.rollout_index(limit=-1):
            if bool(r["flags"]) == flagged and (resolved is None or (r["reward"] > 0) == resolved):
                return r["rollout_id"]
    finally:
        store.close(compact=False)
    raise AssertionError("the run has no such rollout")


def _follow(page, link) -> None:
    """Click a link (a selector or a locator) and wait for the page it opens to finish loading.

    A click waits only until the navigation commits; the new page may still be parsing, and a
    count() taken then sees part of it (CI saw one `.side` of two on a long compare page)."""
    with page.expect_navigation(wait_until="load"):
        if isinstance(link, str):
            page.click(link)
        else:
            link.click()


def test_wrong_or_missing_token_gets_401(ui, page):
    for url in (
        f"{ui.origin}/?token=not-the-token",
        f"{ui.origin}/",
        f"{ui.origin}/run/trained/rollouts",
        f"{ui.origin}/api/run/trained/events",
    ):
        resp = page.goto(url)
        assert resp is not None and resp.status == 401, url
    assert page.goto(ui.url).status == 200


def test_overview_charts_render(ui, page, shots):
    page.goto(ui.url)
    _follow(page, "text=trained")
    page.wait_for_selector("figure.chart svg polyline.curve", state="attached")
    titles = page.locator("figure.chart figcaption").all_inner_texts()
    assert "reward" in titles and "rollout vs trainer mismatch" in titles
    # every curve of a metric the run logged has one point per step
    reward = page.locator("figure.chart", has_text="reward").first
    assert reward.locator("circle").count() == 2
    mismatch = page.locator("figure.chart", has_text="mismatch")
    # the scripted engine reports logprob 0.0 everywhere: Pearson is undefined (null), k3-KL is not
    assert mismatch.locator("polyline[data-key='mismatch/k3_kl']").count() == 1
    assert "finished" in page.locator("#summary").inner_text()
    assert '"harness": "command"' in page.locator("pre.config").inner_text()
    page.screenshot(path=str(shots / "overview.png"), full_page=True)
    _follow(page, "text=tasks × steps")
    assert page.locator("#task-grid tr").count() == 3  # header + two tasks
    page.screenshot(path=str(shots / "task-grid.png"), full_page=True)


def test_trajectory_shows_tool_calls_and_token_heat_map(ui, page, trained_run, shots):
    rid = _rollout_of(trained_run, flagged=False, resolved=True)
    page.goto(ui.url)
    page.goto(f"{ui.origin}/run/trained/rollout/{rid}")
    call = page.locator(".turn .tool-call").first
    assert "bash" in call.locator(".tool-name").inner_text()
    assert "base64" in call.locator("pre").inner_text()  # the command the scripted policy ran
    assert "fixed" in page.locator(".msg.role-tool pre.tool-result").first.inner_text()  # the tool's output
    assert page.locator(".turn .align-extend").count() >= 1
    # loss mask: prompt tokens and sampled tokens; heat: the scripted engine's logprob 0.0 vs the trainer's
    assert page.locator(".tokens .tok.m0").count() > 100
    heated = page.locator(".tokens .tok.m1[style*='background']")
    assert heated.count() > 5
    title = heated.first.get_attribute("title")
    assert "rollout 0.0000" in title and "trainer -" in title and "Δ" in title
    assert page.locator("#alignment-events").inner_text().count("extend") >= 1
    assert "+" in page.locator("pre.diff").inner_text()
    assert "passed" in page.locator("table.tests").inner_text()
    page.screenshot(path=str(shots / "trajectory.png"), full_page=True)
    page.locator("#tokens").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "token-heat-map.png"))


def test_flagged_rollout_shows_its_evidence(ui, page, trained_run, shots):
    page.goto(ui.url)
    page.goto(f"{ui.origin}/run/trained/rollouts")
    page.select_option("select[name=flag]", "modified_test_file")
    _follow(page, "#filters button")
    rows = page.locator("#rollout-rows tr")
    assert rows.count() >= 1 and all("modified_test_file" in t for t in rows.all_inner_texts())
    _follow(page, rows.first.locator("a").first)
    ev = page.locator("#flag-evidence")
    text = ev.inner_text()
    assert "modified_test_file" in text and "blocking" in text
    assert "tests/" in text and "removed_lines" in text
    assert "-" in page.locator("pre.diff .del").first.inner_text()
    page.screenshot(path=str(shots / "flag-evidence.png"), full_page=True)


def test_two_rollouts_side_by_side_and_two_runs_compared(trained_run, page, shots):
    with BackgroundUI([trained_run, trained_run]) as ui:
        page.goto(ui.url)
        a = _rollout_of(trained_run, flagged=True)
        page.goto(f"{ui.origin}/run/trained/rollout/{a}")
        _follow(page, page.locator("a.cmp").first)
        assert page.locator(".side-by-side .side").count() == 2
        assert page.locator(".side-by-side .side .tool-call").count() >= 2
        page.screenshot(path=str(shots / "side-by-side.png"), full_page=True)
        page.goto(ui.url)
        _follow(page, "text=compare these runs")
        assert "trained vs trained-2" in page.locator("h1").inner_text()
        page.wait_for_selector("figure.chart svg polyline.curve", state="attached")
        assert page.locator("polyline[data-key='trained-2: rollout/reward_mean']").count() == 1
        page.screenshot(path=str(shots / "compare-runs.png"), full_page=True)


def _status(run_dir: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "status", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_rollout_appears_live_while_the_run_continues(live_run, page, shots):
    with BackgroundUI([live_run.run_dir]) as ui:
        page.goto(ui.url)
        page.goto(f"{ui.origin}/run/live/rollouts")
        before = page.locator("#rollout-rows tr").count()
        assert live_run.running, "the run ended before the page was open"
        page.wait_for_selector("#rollout-rows tr.new", timeout=180_000)  # pushed over SSE, no reload
        assert page.locator("#rollout-rows tr").count() > before
        assert "off" not in (page.locator("#live").get_attribute("class") or "")
        new_id = page.locator("#rollout-rows tr.new").first.get_attribute("data-rollout")
        page.screenshot(path=str(shots / "live-rollout.png"), full_page=True)
        status = _status(live_run.run_dir)  # legorl status of the live run
        assert status["state"] == "running" and status["steps"] == 2 and status["rollouts"] >= 1
        _follow(page, page.locator(f"tr[data-rollout='{new_id}'] a").first)
        assert page.locator(".turn .tool-call").count() >= 1
    live_run.join()
    done = _status(live_run.run_dir)
    assert done["state"] == "finished" and done["step"] == 2 and done["rollouts"] == 8 and done["eta_s"] is None


def test_status_of_a_finished_run(trained_run):
    out = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "status", str(trained_run)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "state      finished" in out and "step       2/2" in out and "rollouts 8" in out
    assert "reward-hack flags" in out  # the hack rollouts raise an alert
    s = _status(trained_run)
    assert s["rollouts_per_min"] > 0 and s["reward_last"] is not None


def test_export_opens_from_file(trained_run, tmp_path, page, shots):
    result = export_snapshot(trained_run, tmp_path / "snap")
    assert result["rollouts"] == 8
    page.goto((tmp_path / "snap" / "index.html").as_uri())
    _follow(page, "text=trained")
    page.wait_for_selector("figure.chart svg polyline.curve", state="attached")
    assert "static snapshot" in page.locator("nav").inner_text()
    page.screenshot(path=str(shots / "export-overview.png"), full_page=True)
    _follow(page, "nav >> text=rollouts")
    assert page.locator("#rollout-rows tr").count() == 8
    page.select_option("select[name=flag]", "modified_test_file")  # filtered in the browser
    visible = page.locator("#rollout-rows tr:not([hidden])")
    assert 1 <= visible.count() < 8
    _follow(page, visible.first.locator("a").first)
    assert page.url.startswith("file://")
    assert "modified_test_file" in page.locator("#flag-evidence").inner_text()
    assert page.locator(".tokens .tok.m1[style*='background']").count() > 5
    _follow(page, page.locator("a.cmp").first)
    assert page.locator(".side-by-side .side").count() == 2
    page.screenshot(path=str(shots / "export-side-by-side.png"), full_page=True)
    time.sleep(0)  # nothing is served: the pages above came from files
