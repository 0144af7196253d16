"""Fuzzing run configs: any config file and any ``--set key=value`` overrides give a RunConfig or a
:class:`ConfigError` naming the file and the field path — never an AttributeError or a traceback."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import garbage, json_values

from legorl.config import RunConfig
from legorl.errors import ConfigError

# examples, randomness and deadline come from the Hypothesis profile (tests/conftest.py)
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

# real field paths, near misses and junk: every level of the tree, and paths through scalars
PATHS = [
    "steps",
    "seed",
    "suite",
    "run_dir",
    "task_ids",
    "engine",
    "engine.model",
    "engine.max_batch_size",
    "engine.type",
    "rollout",
    "rollout.max_turns",
    "rollout.harness",
    "rollout.temperature",
    "rollout.harness_options",
    "rollout.harness_options.x",
    "sandbox",
    "sandbox.type",
    "sandbox.memory_mb",
    "sandbox.executable",
    "sandbox.hide",
    "grading.reward_mode",
    "grading.retries",
    "trainer.lr",
    "trainer.objective",
    "trainer.eps_high",
    "steps.x",
    "engine.model.name",
    "nope",
    "engine.nope",
    "",
    "a..b",
]
overrides = st.dictionaries(st.sampled_from(PATHS), json_values, max_size=3)


def _load(path, **kw):
    try:
        return RunConfig.load(path, **kw)
    except ConfigError as exc:
        return exc


@FUZZ
@given(overrides)
def test_any_overrides(ov):
    got = _load(None, **ov)
    if isinstance(got, ConfigError):
        msg = str(got)
        assert "\n" not in msg
        # the error names at least one of the paths that was set (or one below it)
        assert any(p.split(".")[0] in msg for p in ov), msg
    else:
        assert isinstance(got, RunConfig)


@FUZZ
@given(json_values | st.dictionaries(st.sampled_from(PATHS[:12]), json_values, max_size=3), overrides)
def test_any_config_file(tmp_path, data, ov):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(data))
    got = _load(path, **ov)
    if isinstance(got, ConfigError):
        assert str(path) in str(got), got
        assert "\n" not in str(got)


@FUZZ
@given(garbage)
def test_any_bytes(tmp_path, data):
    path = tmp_path / "cfg.json"
    path.write_bytes(data)
    got = _load(path)
    assert isinstance(got, (ConfigError, RunConfig))
    if isinstance(got, ConfigError):
        assert str(path) in str(got)


def test_errors_name_the_field_path(tmp_path):
    err = _load(None, **{"sandbox.memory_mb": "lots"})
    assert isinstance(err, ConfigError) and "field 'sandbox.memory_mb'" in str(err)
    err = _load(None, **{"steps": 2, "steps.x": 1})
    assert isinstance(err, ConfigError) and "'steps'" in str(err) and "steps.x" in str(err)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"engine": {"modle": "x"}}))
    err = _load(path)
    assert isinstance(err, ConfigError) and str(path) in str(err) and "field 'engine.modle'" in str(err)
    path.write_text("[1, 2]")
    err = _load(path, **{"engine.model": "x"})
    assert isinstance(err, ConfigError) and str(path) in str(err) and "JSON object" in str(err)
