"""One typed configuration for a training run (no ML imports here, so `legorl --help` is instant).

Field descriptions double as documentation; files are JSON, and CLI flags override single fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from legorl.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineConfig(_Strict):
    type: Literal["embedded"] = Field("embedded", description="Inference backend.")
    model: str = Field("smollm2-135m", description="Built-in model name or a local Hugging Face model directory.")
    max_batch_size: int = Field(16, ge=1, description="Most sequences decoded together.")


class RolloutConfig(_Strict):
    harness: Literal["minimal", "command", "mini-swe-agent", "openhands", "claude-code", "opencode",
                     "opencode-responses"] = Field(
        "minimal", description="Agent program run inside the sandbox (legorl.harnesses.registry).")
    harness_options: dict[str, Any] = Field(default_factory=dict, description="Adapter options (tool sets, step budgets, context limits).")
    sandbox: Literal["bwrap"] = Field("bwrap", description="Sandbox backend.")
    max_turns: int = Field(3, ge=1, description="Agent steps (model calls) per rollout; the gateway serves max_turns + turn_slack calls in all.")
    max_tokens_per_turn: int = Field(512, ge=1, description="Sampling budget per model call.")
    max_total_tokens: int | None = Field(None, ge=1, description="Generated tokens per rollout, all calls together (the gateway enforces it); null: no limit beyond the calls x max_tokens_per_turn.")
    turn_slack: int | None = Field(None, ge=0, description="Model calls the gateway serves beyond max_turns (side calls: titles, summaries); null: max(2, ceil(max_turns/4)).")
    max_concurrent_requests: int = Field(8, ge=1, description="Model calls of one rollout in flight at once (more are refused by the gateway).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (the trainer applies the same).")
    wall_clock_s: float = Field(900.0, gt=0, description="Harness time limit per rollout.")
    grade_timeout_s: float = Field(120.0, gt=0, description="Test-run time limit when grading.")


class TrainerConfig(_Strict):
    objective: Literal["gspo", "gspo_token", "grpo"] = Field("gspo", description="Policy-gradient objective.")
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate.")
    eps_low: float = Field(3e-4, ge=0, description="Lower clip range of the ratio (GRPO: 0.2).")
    eps_high: float = Field(4e-4, ge=0, description="Upper clip range of the ratio (GRPO: 0.2).")
    tis_cap: float | None = Field(2.0, description="Truncated importance sampling cap for rollout/trainer mismatch; null disables.")
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm.")
    chunk_size: int = Field(1024, ge=16, description="Tokens per forward chunk when recomputing logprobs.")


class RunConfig(_Strict):
    run_dir: Path = Field(Path("runs/demo"), description="Where turns, rollouts and metrics are written.")
    suite: str = Field("trivial", description="Task suite: a built-in name or a path.")
    task_ids: list[str] = Field(default_factory=list, description="Only these instance ids of the suite (empty = all).")
    steps: int = Field(2, ge=1, description="Training steps.")
    tasks_per_step: int = Field(3, ge=1, description="Distinct tasks per step.")
    group_size: int = Field(4, ge=2, description="Rollouts per task (the GSPO group).")
    seed: int = Field(0, description="Seed for task order and sampling.")
    flagged_policy: Literal["zero", "drop"] = Field("zero", description="What a rollout with a blocking grader flag gets.")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)

    @model_validator(mode="after")
    def _grpo_clip(self) -> "RunConfig":
        if self.trainer.objective == "grpo" and self.trainer.eps_high < 0.01:
            raise ValueError("objective 'grpo' uses token ratios: set trainer.eps_low/eps_high (e.g. 0.2)")
        return self

    @classmethod
    def load(cls, path: Path | None = None, **overrides: object) -> "RunConfig":
        data: dict = {}
        if path is not None:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(f"cannot read config {path}: {exc}") from None
        for dotted, value in overrides.items():
            if value is None:
                continue
            node = data
            *parents, leaf = dotted.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"invalid run config: {problems}") from None
