"""A SWE-bench instance's environment from SWE-bench's spec: requirement files as SWE-bench reads them,
conda environment files as pip requirements, the import root, apt steps bwrap cannot run, and the
task → sandbox rule every caller shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from legorl.errors import SandboxError
from legorl.tasks import swebench_env
from legorl.tasks.environment import UnsupportedEnvironment, env_recipe, sandbox_python, sandbox_spec
from legorl.tasks.model import Task, TaskEnvironment
from legorl.tasks.swebench_specs import EnvSpec


def test_requirements_are_read_as_swebench_reads_them(tmp_path: Path) -> None:
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "dev.txt").write_text(
        "-r tests.txt\n-e .\n# a comment\npre-commit  # inline comment\n--index-url https://x\nsphinx==7.0\n"
    )
    (tmp_path / "requirements" / "tests.txt").write_text("pytest==7.3.1\n.[test]\nsphinx==7.0\n")
    reqs = swebench_env.read_requirements(tmp_path, ["requirements/missing.txt", "requirements/dev.txt"])
    assert reqs == ["pytest==7.3.1", "sphinx==7.0", "pre-commit"]


def test_a_missing_requirements_file_names_the_paths_tried(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"no requirements file at \['a.txt', 'b.txt'\]"):
        swebench_env.read_requirements(tmp_path, ["a.txt", "b.txt"])


def test_conda_environment_files_become_pip_requirements(tmp_path: Path) -> None:
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "environment.yml").write_text(
        "name: test\nchannels: [conda-forge]\ndependencies:\n"
        "  - python=3.10\n  - pip\n  - numpy=1.23\n  - pandas>=1.4\n  - scipy=1.11.1\n"
        "  - iris\n  - pynio\n  - pip:\n    - numbagg\n    - -e .\n"
    )
    reqs = swebench_env.read_environment_yml(tmp_path, ["ci/environment.yml", "environment.yml"])
    # conda's "=1.23" is a prefix; PyPI's "iris" is another project (a placeholder that raises at
    # import); pynio exists only on conda
    assert reqs == ["numpy==1.23.*", "pandas>=1.4", "scipy==1.11.1", "scitools-iris", "numbagg"]


def test_the_import_root_follows_the_layout(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    assert swebench_env.import_root(tmp_path) == "/workspace"
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    assert swebench_env.import_root(tmp_path) == "/workspace/src"


def _spec(pre_install: tuple[str, ...]) -> EnvSpec:
    return EnvSpec("o/r", "1.0", "3.9", (), "", pre_install, "python -m pip install -e .", "pytest", ())


def test_apt_steps_are_told_apart_from_shell_fixes() -> None:
    shell, apt = swebench_env._split_pre_install(
        _spec(("sed -i 's/a/b/' setup.cfg", "apt-get update && apt-get install -y graphviz legorl-no-such-pkg"))
    )
    assert shell == ["sed -i 's/a/b/' setup.cfg"]
    assert apt == ["graphviz", "legorl-no-such-pkg"]
    assert "legorl-no-such-pkg" in swebench_env._host_has_packages(apt)


def test_setuptools_scm_gets_a_version_from_the_spec() -> None:
    assert swebench_env._pretend_version("5.4") == "5.4.0"
    assert swebench_env._pretend_version("2022.06") == "2022.06.0"
    assert swebench_env._pretend_version("1.2.3") == "1.2.3"
    assert swebench_env._pretend_version("dev") == "0.0.0"


def _env_task(tmp_path: Path, **env: object) -> Task:
    environment = TaskEnvironment(python="3.9", interpreter="/py/bin/python3.9", python_path=["/workspace/src"], **env)
    return Task(
        instance_id="o__r-1",
        repo="o/r",
        patch="",
        problem_statement="p",
        FAIL_TO_PASS=["t"],
        source_dir=tmp_path,
        environment=environment,
    )


def test_a_task_environment_is_the_sandbox_spec_of_every_caller(tmp_path: Path) -> None:
    task = _env_task(tmp_path, requirements=["pkg==1.0"], setup=["make version"], pip_env={"A": "1"})
    spec = sandbox_spec(task, None, memory_mb=512)
    assert spec.source_dir == tmp_path and spec.memory_mb == 512
    assert spec.setup_commands == ("make version",)
    assert spec.env_recipe == env_recipe(task.environment)
    assert spec.env_recipe.interpreter == "/py/bin/python3.9" and spec.env_recipe.python_path == ("/workspace/src",)
    assert sandbox_python(task) == "/py/bin/python3.9"
    plain = task.model_copy(update={"environment": None})
    assert sandbox_spec(plain, None).env_recipe is None and sandbox_python(plain) is None


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def test_an_environment_a_backend_cannot_build_is_refused_with_the_reason(tmp_path: Path) -> None:
    task = _env_task(tmp_path, unsupported={"bwrap": "needs the Debian packages graphviz"})
    with pytest.raises(UnsupportedEnvironment, match="o__r-1: unsupported in bwrap: needs the Debian packages"):
        sandbox_spec(task, _Named("bwrap"))
    assert sandbox_spec(task, _Named("podman")).env_recipe is not None
    broken = _env_task(tmp_path, unsupported={"all": "needs python 3.5, which pyenv does not have"})
    with pytest.raises(SandboxError, match="o__r-1: needs python 3.5"):
        sandbox_spec(broken, _Named("podman"))


def test_recipe_keys_of_older_env_layers_do_not_change() -> None:
    from legorl.sandbox.images import EnvRecipe

    # the key of a recipe without the SWE-bench fields is what it was before they existed
    old = EnvRecipe(python="3.11", requirements=("a",))
    assert old.key("base") == "5a5e995b644c30b47caa4055"
    assert EnvRecipe(python="3.11", requirements=("a",), interpreter="/x").key("base") != old.key("base")
