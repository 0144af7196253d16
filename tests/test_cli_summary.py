"""The end-of-run summary of `legorl train` / `legorl demo`: held-out rates, where things are, cost."""

from __future__ import annotations

import json

from legorl.cli import run as cli
from legorl.loop.eval import phase_report_path
from legorl.loop.eval_stats import Outcome, build_report
from legorl.observe.memory import TreeMemory


def _report(run_dir, phase, solved, failed, env_failures=0):
    outcomes = [Outcome("t1", "ok", 1.0)] * solved + [Outcome("t2", "ok", 0.0)] * failed
    outcomes += [Outcome("t2", "env_failure", 0.0)] * env_failures
    path = phase_report_path(run_dir, phase)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(build_report(outcomes, [1], meta={"suite": "oneline-heldout"}).to_dict()))


def test_heldout_line_needs_both_phases(tmp_path):
    assert cli._heldout_line(tmp_path) is None
    _report(tmp_path, "before", 2, 8)
    assert cli._heldout_line(tmp_path) is None


def test_heldout_line_quotes_rates_difference_and_p_value(tmp_path):
    _report(tmp_path, "before", 6, 26, env_failures=1)
    _report(tmp_path, "after", 22, 10)
    line = cli._heldout_line(tmp_path)
    assert line is not None
    assert "oneline-heldout: before 6/32 = 0.188, after 22/32 = 0.688 (+0.500" in line
    assert "p = 5.54e-05" in line and "env failures apart: 1 + 0" in line


def test_summary_says_where_and_what_it_cost(tmp_path, capsys):
    (tmp_path / "reward_curve.png").write_bytes(b"png")
    memory = TreeMemory()
    memory.peak_bytes, memory.peak_rss_bytes, memory.peak_processes = int(3.21 * 2**30), int(4.5 * 2**30), 97
    cli._summary([], tmp_path, (390.0, memory))
    out = " ".join(capsys.readouterr().out.split())
    assert f"run: {tmp_path} metrics: {tmp_path}/metrics.jsonl plot: {tmp_path}/reward_curve.png" in out
    assert (
        "wall time 6.5 min (this command, setup excluded); peak resident memory of the process tree 3.21 GiB "
        "(shared pages once; each process's RSS summed: 4.50 GiB over up to 97 processes)"
    ) in out
