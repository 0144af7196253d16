"""Records that cross module boundaries and hit disk (schema-versioned).

Turn    — one call the harness made to the gateway, with the exact token ids the policy saw and sampled.
Sample  — one training sequence (a thread segment): token ids, loss mask, rollout logprobs.
Rollout — one task attempted by one harness: turns, samples, reward, grader report, status.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from legorl.errors import EnvFailureCause

SCHEMA_VERSION = 1

AlignmentKind = Literal["start", "extend", "realign", "fork"]
# grader_error: our own grading code failed on this rollout's diff (a bug, or a limit it hit): no
# verdict, kept out of the gradient like env_failure but counted apart (legorl.grading.grader.grade_isolated)
RolloutStatus = Literal["ok", "env_failure", "harness_error", "timeout", "grader_error"]


class AlignmentEvent(BaseModel):
    """How one request was matched against the tokens its thread already held."""

    turn_index: int
    kind: AlignmentKind
    reason: str = ""
    segment_index: int = 0
    # what the segment is: main | subagent | side | compaction | rebuild | retry | tools_changed
    segment_kind: str = "main"
    # links a start (sub-agent thread) / fork (new segment) to where it came from
    parent_thread_id: str | None = None
    parent_segment_index: int | None = None
    forked_from_turn: int | None = None
    # realign: indices of the request's messages that were re-serialized (held tokens kept)
    realigned_messages: list[int] = Field(default_factory=list)


class Turn(BaseModel):
    schema_version: int = SCHEMA_VERSION
    session_id: str
    thread_id: str
    turn_index: int  # order within the session
    dialect: str  # e.g. "openai.chat"
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    output_logprobs: list[float]
    sampling: dict[str, Any]
    weight_version: int
    finish_reason: str
    alignment: AlignmentEvent
    # prompt_token_ids[:reused_prefix_len] are tokens the thread already held (verbatim reuse).
    reused_prefix_len: int = 0
    cached_prompt_tokens: int = 0
    started_at: float = Field(default_factory=time.time)
    timings: dict[str, float] = Field(default_factory=dict)
    request: dict[str, Any] = Field(default_factory=dict)
    response: dict[str, Any] = Field(default_factory=dict)
    failed: bool = False
    error: str | None = None

    @model_validator(mode="after")
    def _lengths_agree(self) -> Turn:
        if len(self.output_token_ids) != len(self.output_logprobs):
            raise ValueError("output_token_ids and output_logprobs differ in length")
        return self


class Sample(BaseModel):
    """A training sequence. loss_mask[i] == 1 exactly on tokens the policy sampled."""

    schema_version: int = SCHEMA_VERSION
    rollout_id: str
    thread_id: str
    segment_index: int
    token_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]  # 0.0 where loss_mask == 0
    turn_indices: list[int] = Field(default_factory=list)
    alignment_events: list[AlignmentEvent] = Field(default_factory=list)
    reward: float | None = None
    advantage: float | None = None
    session_id: str = ""
    segment_kind: str = "main"  # see AlignmentEvent.segment_kind
    parent_thread_id: str | None = None  # the thread / segment / turn this segment was started from
    parent_segment_index: int | None = None
    forked_from_turn: int | None = None
    # the oldest weight version among its turns (each turn: the version in force when it finished);
    # how stale the sample is when trained (legorl.loop.staleness); None: built before it was recorded
    weight_version: int | None = None

    @model_validator(mode="after")
    def _lengths_agree(self) -> Sample:
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.rollout_logprobs) != n:
            raise ValueError("token_ids, loss_mask and rollout_logprobs must have equal lengths")
        return self

    @property
    def num_sampled(self) -> int:
        return sum(self.loss_mask)


FlagSeverity = Literal["blocking", "info"]
FlagStage = Literal["before", "during", "after"]


class Flag(BaseModel):
    """One reward-hacking defense finding, with its evidence (docs/reward-integrity.md).

    kind: e.g. ``modified_test_file``, ``git_history_probe``, ``package_install``, ``network_tool``,
    ``forged_results``; severity: ``blocking`` (``RunConfig.flagged_policy`` applies: reward 0 or
    dropped) or ``info`` (recorded, shown in the UI, no effect on reward); stage: where it was seen;
    evidence: what was seen: ``turn`` (Turn index), ``pid``, ``command``, ``path``, ``source``
    (``gateway`` | ``strace`` | ``fs_scan`` | ``diff`` | ``runner``), ``detail``.
    """

    kind: str
    severity: FlagSeverity = "blocking"
    stage: FlagStage = "after"
    evidence: dict[str, Any] = Field(default_factory=dict)

    @property
    def label(self) -> str:
        """The legacy string form stored in ``flags`` (``kind`` or ``kind:path``)."""
        path = self.evidence.get("path")
        return f"{self.kind}:{path}" if path else self.kind


class GraderReport(BaseModel):
    resolved: bool  # the verdict: every expected test passed and no blocking flag zeroed the reward
    reward: float
    tests: dict[str, str] = Field(default_factory=dict)  # test id -> passed|failed|error|skipped|missing
    runner_exit_code: int | None = None
    log_tail: str = ""
    flags: list[str] = Field(default_factory=list)
    status: RolloutStatus = "ok"
    cause: str | None = None  # env_failure: "<cause_kind>: <detail>"
    cause_kind: EnvFailureCause | None = None  # env_failure: the typed cause (branch on this, not on ``cause``)
    duration_s: float = 0.0
    # Added with the staged defenses (all optional; older records load unchanged):
    flag_details: list[Flag] = Field(default_factory=list)  # every flag, typed, with evidence
    fail_to_pass_fraction: float | None = None  # FAIL_TO_PASS tests seen passing / all of them
    attempts: int = 1  # grading attempts (env failures are retried)
    stage_s: dict[str, float] = Field(default_factory=dict)  # seconds per grading stage
    # the raw test outcome: every expected test seen passing, whatever the flags (None: no verdict, older records)
    tests_resolved: bool | None = None

    def blocking_flags(self) -> list[Flag]:
        return [f for f in self.flag_details if f.severity == "blocking"]


class Rollout(BaseModel):
    schema_version: int = SCHEMA_VERSION
    rollout_id: str
    session_id: str = ""  # the gateway session; its Turns live in the run store under this id
    task_id: str
    harness: str
    sandbox: str
    group_index: int = 0
    step: int = 0
    status: RolloutStatus = "ok"
    cause: str | None = None
    reward: float = 0.0
    diff: str = ""
    harness_exit_code: int | None = None
    harness_log_tail: str = ""
    grader: GraderReport | None = None
    flags: list[str] = Field(default_factory=list)  # labels of the *blocking* flags (flagged_policy acts on these)
    flag_details: list[Flag] = Field(default_factory=list)  # every flag (blocking and info) with evidence
    turns: list[Turn] = Field(default_factory=list)
    samples: list[Sample] = Field(default_factory=list)
    started_at: float = Field(default_factory=time.time)
    duration_s: float = 0.0
