"""Harnesses from outside the project (``rollout.harness: "package.module:Class"``,
legorl.harnesses.external): one runs a real rollout, and every way of naming a class that cannot
work is refused when the config is validated, with an error that says what is wrong."""

from __future__ import annotations

import pytest
from rollout_helpers import assert_gateway_only, assert_recorded, rollout

from legorl.config import RunConfig
from legorl.errors import ConfigError, UnknownHarnessError
from legorl.harnesses.base import Harness
from legorl.harnesses.registry import get_harness

GOOD = "external_harness:StdlibToolHarness"  # tests/harnesses is on sys.path under pytest


def config_error(harness: str, **options: object) -> str:
    with pytest.raises(ConfigError) as exc:
        RunConfig.load(None, **{"rollout.harness": harness, "rollout.harness_options": options})
    return str(exc.value)


def test_an_import_path_names_a_harness_class():
    cfg = RunConfig.load(None, **{"rollout.harness": GOOD, "rollout.harness_options": {"name": "mine"}})
    assert cfg.rollout.harness == GOOD
    h = get_harness(GOOD, name="mine")
    assert isinstance(h, Harness) and (h.name, h.dialect) == ("mine", "openai.chat")


@pytest.mark.parametrize(
    "harness,options,message",
    [
        ("no_such_module_x:Harness", {}, "cannot import module 'no_such_module_x': ModuleNotFoundError"),
        ("external_harness:Missing", {}, "module 'external_harness' has no attribute 'Missing'"),
        ("external_harness:not_a_class", {}, "not_a_class is a function, not a class"),
        (
            "external_harness:NoCollect",
            {},
            "NoCollect does not satisfy legorl.harnesses.base.Harness: "
            "missing method collect(self, sandbox, result, budget)",
        ),
        (
            "external_harness:WrongLaunch",
            {},
            "launch(self, task) cannot be called as launch(self, task, sandbox, gateway_url, session_token, budget)",
        ),
        (
            "external_harness:NoDialect",
            {},
            "NoDialect does not satisfy legorl.harnesses.base.Harness: dialect is a NoneType, not a str",
        ),
        (GOOD, {"bogus": 1}, f"harness {GOOD!r} does not accept options ['bogus']"),
        ("external_harness:StdlibToolHarness:x", {}, "an import path is 'package.module:Class'"),
    ],
)
def test_what_cannot_work_is_refused_with_the_config(harness, options, message):
    error = config_error(harness, **options)
    assert "field 'rollout" in error and message in error, error


def test_a_module_that_fails_to_import_is_named_with_its_error(tmp_path, monkeypatch):
    (tmp_path / "broken_harness_mod.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = config_error("broken_harness_mod:Anything")
    assert "cannot import module 'broken_harness_mod': RuntimeError: no GPU here" in error, error
    with pytest.raises(UnknownHarnessError, match="RuntimeError: no GPU here"):
        get_harness("broken_harness_mod:Anything")


@pytest.mark.slow
@pytest.mark.sandbox
def test_an_outside_harness_runs_a_real_rollout(tmp_path):
    # the code path of `legorl rollout --harness external_harness:StdlibToolHarness --engine scripted-gold`
    run = rollout(GOOD, "scripted-gold", tmp_path, name="outside")
    r = run.rollout
    assert (r.status, r.reward, r.harness) == ("ok", 1.0, "outside"), (r.status, r.cause, r.harness_log_tail)
    assert_recorded(run)
    assert [e.kind for s in r.samples for e in s.alignment_events] == ["start", "extend"]
    assert_gateway_only(run)
