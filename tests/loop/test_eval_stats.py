"""Evaluation statistics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from legorl.loop.eval_stats import (
    EvalReport,
    Outcome,
    build_report,
    compare,
    pass_at_k,
    two_proportion_test,
    wilson_interval,
)


def test_pass_at_k_hand_computed():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))  # 0.5
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - math.comb(3, 3) / math.comb(5, 3))  # 0.9
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0 and pass_at_k(3, 3, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_env_failures_are_reported_apart_never_as_fails():
    outs = [
        Outcome("a", "ok", 1.0),
        Outcome("a", "ok", 0.0),
        Outcome("a", "env_failure", 0.0),
        Outcome("a", "env_failure", 0.0),
        Outcome("b", "ok", 0.0),
        Outcome("b", "harness_error", 0.0),
        Outcome("b", "timeout", 1.0),
    ]
    r = build_report(outs, ks=[1, 2])
    a, b = r.tasks
    assert (a.samples, a.correct, a.env_failures) == (2, 1, 2)  # 1/2, not 1/4
    assert a.pass_at == {"1": pytest.approx(0.5), "2": pytest.approx(1.0)}
    assert (b.samples, b.correct, b.harness_errors) == (2, 1, 1)
    assert r.pass_at["1"] == pytest.approx(0.5) and r.samples == 4 and r.env_failures == 2
    assert r.interval["1"] == pytest.approx(wilson_interval(2, 4))
    lo, hi = r.interval["2"]
    assert lo <= r.pass_at["2"] <= hi
    assert EvalReport.from_dict(r.to_dict()) == r


def test_wilson_and_baseline_test_hand_computed():
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    z, p = two_proportion_test(30, 50, 20, 50)  # pooled 0.5, se = 0.1, z = 2
    assert z == pytest.approx(2.0) and p == pytest.approx(0.0455, abs=1e-4)
    new = build_report([Outcome("a", "ok", 1.0)] * 30 + [Outcome("a", "ok", 0.0)] * 20, ks=[1])
    old = build_report([Outcome("a", "ok", 1.0)] * 20 + [Outcome("a", "ok", 0.0)] * 30, ks=[1])
    c = compare(new, old)
    assert c["diff"]["1"] == pytest.approx(0.2) and c["significant_at_0.05"] is True
