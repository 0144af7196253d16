"""The one rule that turns a task into the sandbox it runs in: its tree, its env layer (interpreter,
packages, import root) and its instance setup. Rollouts, graders and pre-flight checks all build
their sandboxes here, so an agent and the grader of its patch see the same environment."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from legorl.errors import UnsupportedEnvironment
from legorl.sandbox.base import SandboxBackend, SandboxSpec
from legorl.sandbox.images import EnvRecipe
from legorl.tasks.model import Task, TaskEnvironment

__all__ = ["UnsupportedEnvironment", "env_recipe", "sandbox_python", "sandbox_spec"]


def env_recipe(env: TaskEnvironment) -> EnvRecipe:
    """The env-layer recipe of ``env`` (keyed on everything that changes the layer's content)."""
    return EnvRecipe(
        python=env.python,
        requirements=tuple(env.requirements),
        interpreter=env.interpreter,
        optional=tuple(env.optional),
        project=env.project,
        project_extras=tuple(env.project_extras),
        project_prepare=tuple(env.project_prepare),
        pip_env=tuple(sorted(env.pip_env.items())),
        python_path=tuple(env.python_path),
        build_requirements=tuple(env.build_requirements),
        index_date=env.index_date,
    )


def sandbox_spec(task: Task, backend: SandboxBackend | None = None, **fields: Any) -> SandboxSpec:
    """The :class:`SandboxSpec` of ``task`` (``fields``: the caller's part, e.g. gateway socket,
    limits, extra layers). A task whose environment ``backend`` cannot build is an
    :class:`UnsupportedEnvironment` naming the task and the reason."""
    spec = SandboxSpec(source_dir=Path(task.source()), **fields)
    env = task.environment
    if env is None:
        # no env layer: the backend's interpreter, i.e. LEGO-RL's own venv, whose pytest plugins
        # (asyncio, hypothesis, timeout: our dev tools, not the task's) the grader's runs turn off too
        return replace(spec, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **spec.env})
    backend_name = getattr(backend, "name", "")
    if "all" in env.unsupported:  # no backend can: no interpreter, no spec for its version...
        raise UnsupportedEnvironment(f"instance {task.instance_id}: {env.unsupported['all']}")
    if backend_name in env.unsupported:
        raise UnsupportedEnvironment(
            f"instance {task.instance_id}: unsupported in {backend_name}: {env.unsupported[backend_name]}"
        )
    return replace(spec, env_recipe=env_recipe(env), setup_commands=tuple(env.setup))


def sandbox_python(task: Task) -> str | None:
    """The interpreter a task's tests run with inside its sandbox (None: the backend's)."""
    return task.environment.interpreter if task.environment is not None else None
