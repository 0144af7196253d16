"""SWE-bench's own environment specs and log parsers, imported without its docker/Modal runners, and
the pyenv interpreter a spec asks for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from needs import unavailable

from legorl.errors import TaskError
from legorl.tasks import swebench, swebench_specs
from legorl.tasks.model import Task


@pytest.fixture(scope="module")
def specs() -> swebench_specs.Harness:
    try:
        return swebench_specs.harness()
    except TaskError as exc:
        unavailable(str(exc))


def _task(repo: str, version: str) -> Task:
    return Task(instance_id="x__y-1", repo=repo, version=version, patch="", problem_statement="p", FAIL_TO_PASS=["t"])


def test_specs_come_from_swebench_without_its_container_runners(specs: swebench_specs.Harness) -> None:
    assert specs.version == swebench_specs.SWEBENCH_VERSION
    assert not any(m.split(".")[0] in ("docker", "modal") for m in sys.modules)
    spec = swebench_specs.env_spec(_task("pytest-dev/pytest", "5.4"))
    assert spec.python == "3.9" and spec.install == "python -m pip install -e ." and spec.test_cmd.startswith("pytest")
    assert any(p.startswith("pluggy==") for p in spec.pip_packages)
    sympy = swebench_specs.env_spec(_task("sympy/sympy", "1.1"))
    assert "bin/test" in sympy.test_cmd and sympy.key() != spec.key()
    assert swebench_specs.env_spec(_task("pytest-dev/pytest", "5.4")).key() == spec.key()


def test_unknown_repository_or_version_names_the_instance(specs: swebench_specs.Harness) -> None:
    with pytest.raises(TaskError, match=r"x__y-1: pytest-dev/pytest has no environment spec for version '0.1'"):
        swebench_specs.env_spec(_task("pytest-dev/pytest", "0.1"))
    with pytest.raises(TaskError, match="x__y-1: SWE-bench has no environment specs for nobody/nothing"):
        swebench_specs.env_spec(_task("nobody/nothing", "1.0"))


def test_log_parsers_are_swebench_own(specs: swebench_specs.Harness) -> None:
    pytest_log = "PASSED testing/test_a.py::test_ok\nFAILED testing/test_a.py::test_bad - assert 1 == 2\n"
    assert swebench_specs.parse_test_log(_task("pytest-dev/pytest", "5.4"), pytest_log) == {
        "testing/test_a.py::test_ok": "PASSED",
        "testing/test_a.py::test_bad": "FAILED",
    }
    sympy_log = "test_one ok\ntest_two F\ntest_three E\n"
    assert swebench_specs.parse_test_log(_task("sympy/sympy", "1.1"), sympy_log) == {
        "test_one": "PASSED",
        "test_two": "FAILED",
        "test_three": "ERROR",
    }


@pytest.mark.swebench_data
def test_every_shipped_instance_has_a_spec(specs: swebench_specs.Harness) -> None:
    source = swebench.default_repo_source()
    for suite in swebench.SUITES:
        records = swebench.read_records(suite)
        shipped = [t for t, st in zip(records, swebench.instance_status(records, source)) if st.available]
        for t in shipped:
            assert swebench_specs.env_spec(t).python, t.instance_id


def test_pyenv_interpreter_is_the_newest_patch_release_and_a_missing_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for release in ("3.9.1", "3.9.18", "3.9.2", "3.10.4"):
        exe = tmp_path / "versions" / release / "bin" / f"python{release.rsplit('.', 1)[0]}"
        exe.parent.mkdir(parents=True)
        exe.write_text("")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    assert swebench_specs.pyenv_python("3.9") == tmp_path / "versions/3.9.18/bin/python3.9"
    with pytest.raises(
        TaskError, match=r"sympy__sympy-1 needs python 3\.5, which pyenv .* does not have: pyenv install 3\.5"
    ):
        swebench_specs.pyenv_python("3.5", needed_by="sympy__sympy-1")
    with pytest.raises(TaskError, match="not MAJOR.MINOR"):
        swebench_specs.pyenv_python("3")
