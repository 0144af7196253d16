"""Typed task records, compatible with SWE-bench instances."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from legorl.errors import TaskError

Tier = Literal["trivial", "easy", "medium", "swebench"]
Runner = Literal["pytest", "sympy"]


class TaskEnvironment(BaseModel):
    """What a task's tests need beyond this process's interpreter: the interpreter, the packages of
    its env layer, the repository's install step and import root (built by
    :func:`legorl.tasks.environment.sandbox_spec`; SWE-bench instances get theirs from SWE-bench's
    specs, :mod:`legorl.tasks.swebench_env`)."""

    python: str  # "3.9"
    interpreter: str  # host path of that interpreter (pyenv)
    requirements: list[str] = Field(default_factory=list)  # must install
    optional: list[str] = Field(default_factory=list)  # installed where the index has them
    build_requirements: list[str] = Field(default_factory=list)  # to build the repository in place
    index_date: str = ""  # resolve packages as the index was that day (YYYY-MM-DD)
    project: str = ""  # a tree whose dependencies (not itself) go into the env layer
    project_extras: list[str] = Field(default_factory=list)
    project_prepare: list[str] = Field(default_factory=list)  # run in a scratch copy of ``project``
    pip_env: dict[str, str] = Field(default_factory=dict)
    python_path: list[str] = Field(default_factory=list)  # inside paths first on PYTHONPATH
    setup: list[str] = Field(default_factory=list)  # run in the repository (instance layer)
    runner: Runner = "pytest"
    # the repository *is* the test framework (pytest-dev/pytest): its own files under _pytest/ are
    # source, the runner imports it from the workspace, and the in-process guard is off (see docs)
    framework_under_test: bool = False
    unsupported: dict[str, str] = Field(default_factory=dict)  # backend → why it cannot build this


class PassRate(BaseModel):
    """How often pilot rollouts solved a task (``legorl tasks filter``, :mod:`legorl.loop.filter`):
    kept in the filtered suite's records so a later run can see why a task is there."""

    solved: int  # pilot rollouts that resolved it (reward > 0)
    samples: int  # pilot rollouts that count (status ok or timeout)
    rate: float  # solved / samples
    harness: str
    engine: str  # embedded | scripted-gold | scripted-wrong | scripted-mixed
    model: str  # the engine's model (or the checkpoint it was exported from)


class MinedInfo(BaseModel):
    """Where a mined task came from and what it costs (``legorl tasks mine``,
    :mod:`legorl.tasks.mining`): for curricula, filters and reports."""

    method: Literal["commit", "mutation"]
    source: str  # "bundle:owner__name.bundle", "pypi:name==1.2", "git:dirname"
    snapshot: str  # the upstream commit the task's tree comes from (commit method: the parent)
    commit: str = ""  # commit method: the mined commit
    mutation: str = ""  # mutation method: its kind (legorl.tasks.mining.mutations)
    functions: list[str] = Field(default_factory=list)  # "file::qualified name" the gold patch edits
    files_changed: int
    lines_changed: int
    fail_to_pass: int
    pass_to_pass: int
    test_seconds: float  # the task's test files' run time at validation (the fixed state)
    synthetic_statement: bool = True  # the problem statement was written from the test run, not by a person
    dedup_keys: list[str] = Field(default_factory=list)


class Task(BaseModel):
    instance_id: str
    repo: str
    base_commit: str = ""
    patch: str  # gold patch (never shown to the agent)
    test_patch: str = ""  # applied only at grading
    problem_statement: str
    hints_text: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    # Local tasks: where the repository source lives, and how to run its tests.
    tier: Tier = "swebench"
    source_dir: Path | None = None
    test_command: str = "python -m pytest"
    test_files: list[str] = Field(default_factory=list)  # files the grader restores before testing
    environment: TaskEnvironment | None = None  # None: this process's interpreter, the standard library
    # set by `legorl tasks filter`; absent in SWE-bench's own records (None: never measured)
    pass_rate: PassRate | None = None
    mined: MinedInfo | None = None  # set by `legorl tasks mine`

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, v: Any) -> Any:
        # SWE-bench stores these as JSON strings.
        if isinstance(v, str):
            return json.loads(v) if v.strip() else []
        return v

    def source(self) -> Path:
        """The repository tree to build sandboxes from; a task without one cannot run here."""
        if self.source_dir is None:
            raise TaskError(f"task {self.instance_id} has no source tree (field 'source_dir'): it cannot run locally")
        return self.source_dir

    @classmethod
    def parse(cls, record: dict[str, Any], origin: str = "") -> Task:
        """Validate a raw record; errors name the instance and the field."""
        try:
            return cls.model_validate(record)
        except ValidationError as exc:
            iid = record.get("instance_id", "<no instance_id>") if isinstance(record, dict) else "<not a mapping>"
            problems = "; ".join(f"field '{'.'.join(str(p) for p in e['loc'])}': {e['msg']}" for e in exc.errors())
            where = f" in {origin}" if origin else ""
            raise TaskError(f"task {iid}{where} is invalid: {problems}") from None
        except json.JSONDecodeError as exc:
            iid = record.get("instance_id", "<no instance_id>")
            raise TaskError(f"task {iid}: FAIL_TO_PASS/PASS_TO_PASS is not valid JSON: {exc}") from None
