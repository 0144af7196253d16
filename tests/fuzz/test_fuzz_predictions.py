"""Fuzzing ``legorl grade``'s predictions loader: whatever a predictions file holds, the loader returns
well-formed records or raises :class:`ConfigError` naming the file (and the line or record)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import garbage, json_values

from legorl.errors import ConfigError
from legorl.grading.predictions import load_predictions, prediction_keys

# examples, randomness and deadline come from the Hypothesis profile (tests/conftest.py)
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

# records that are nearly right: each field missing, of any type, or right
field = st.one_of(st.just(None), json_values, st.text(max_size=10))
records = st.dictionaries(
    st.sampled_from(["instance_id", "model_patch", "model_name_or_path", "extra"]), field, max_size=4
)


def _check(path, loaded_or_error):
    if isinstance(loaded_or_error, ConfigError):
        assert str(path) in str(loaded_or_error), loaded_or_error
        return
    for r in loaded_or_error:
        assert isinstance(r, dict) and isinstance(r["instance_id"], str) and r["instance_id"]
        assert r.get("model_patch") is None or isinstance(r["model_patch"], str)
        assert r.get("model_name_or_path") is None or isinstance(r["model_name_or_path"], str)
    try:
        keys = prediction_keys(loaded_or_error)
    except ConfigError as exc:
        assert "more than once" in str(exc) or "cannot be told apart" in str(exc)
    else:
        assert len(set(keys)) == len(keys)


def _load(path):
    try:
        return load_predictions(path)
    except ConfigError as exc:
        return exc


@FUZZ
@given(st.lists(records | json_values, max_size=4), st.sampled_from([".jsonl", ".json", ".json-dict"]))
def test_any_records(tmp_path, recs, kind):
    path = tmp_path / ("p.jsonl" if kind == ".jsonl" else "p.json")
    if kind == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    elif kind == ".json":
        path.write_text(json.dumps(recs))
    else:
        path.write_text(json.dumps({str(i): r for i, r in enumerate(recs)}))
    _check(path, _load(path))


@FUZZ
@given(garbage, st.sampled_from(["p.jsonl", "p.json"]))
def test_any_bytes(tmp_path, data, name):
    path = tmp_path / name
    path.write_bytes(data)
    _check(path, _load(path))


def test_errors_name_the_field(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"instance_id": "a", "model_patch": ""}\n{"instance_id": 3, "model_patch": ""}\n')
    err = _load(path)
    assert isinstance(err, ConfigError) and f"{path}:2" in str(err) and "'instance_id'" in str(err)
    path.write_text('{"instance_id": "a", "model_patch": 7}\n')
    err = _load(path)
    assert isinstance(err, ConfigError) and f"{path}:1" in str(err) and "'model_patch'" in str(err)
    path.write_text('{"instance_id": "a", "model_patch": "", "instance_id": "b"}\n')
    err = _load(path)
    assert isinstance(err, ConfigError) and "duplicate key 'instance_id'" in str(err)
