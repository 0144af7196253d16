"""A mined repository's environment, resolved with uv as PyPI was on the commit's day (uses PyPI):
a pytest too old for the grader's runner is replaced, a test requirement that cannot be resolved is
dropped and named, a runtime one is an error naming it; resolutions are cached."""

from __future__ import annotations

from datetime import date

import pytest

from legorl.errors import TaskError
from legorl.tasks.mining.env import Declared, choose_python, resolve
from legorl.tasks.mining.sources import mining_root


def test_requirements_resolve_as_the_index_was_and_unresolvable_tests_are_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    declared = Declared(name="demo", runtime=("six",), tests=("legorl-no-such-distribution", "iniconfig"))
    resolved = resolve(declared, "3.11", "2020-01-01", "demo at abc")
    assert "six==1.13.0" in resolved.pins  # six 1.14 came out in 2020
    # the pytest of 2019 is too old for the grader's runner: pytest and its requirements as of RUNNER_INDEX_DATE
    assert "pytest==8.3.2" in resolved.pins and any(p.startswith("iniconfig==") for p in resolved.pins)
    assert resolved.dropped == ("legorl-no-such-distribution",)
    assert list((mining_root() / "envs").glob("*.json"))  # cached: the same question is not asked again
    assert resolve(declared, "3.11", "2020-01-01", "demo at abc") == resolved


def test_a_runtime_requirement_that_cannot_be_resolved_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    declared = Declared(name="demo", runtime=("legorl-no-such-distribution>=1",))
    with pytest.raises(TaskError) as err:
        resolve(declared, "3.11", "2024-01-01", "owner/demo at 0123456789ab")
    message = str(err.value)
    assert message.startswith("owner/demo at 0123456789ab: cannot resolve the environment (python 3.11")
    assert "legorl-no-such-distribution" in message


def test_the_interpreter_is_the_newest_settled_one_the_project_allows():
    try:
        choose_python("", date(2030, 1, 1))
    except TaskError as exc:
        pytest.skip(f"no pyenv interpreters here: {exc}")
    assert choose_python(">=3.9,<3.12", date(2030, 1, 1)) == "3.11"
    assert choose_python("", date(2023, 1, 1)) in ("3.10", "3.9")  # 3.11 (Oct 2022) not settled yet
    with pytest.raises(TaskError, match="no pyenv interpreter satisfies requires-python '>=4'"):
        choose_python(">=4", date(2030, 1, 1))
