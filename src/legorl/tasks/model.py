"""Typed task records, compatible with SWE-bench instances."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from legorl.errors import TaskError

Tier = Literal["trivial", "easy", "medium", "swebench"]


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
