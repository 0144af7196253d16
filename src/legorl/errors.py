"""Every error class LEGO-RL defines, named after the boundary it crossed, and the causes of an
environment failure.

    LegoRLError
     ├── ConfigError              bad user configuration or CLI input
     │    └── UnknownHarnessError      no such harness id, or options it does not accept (also a ValueError)
     ├── ModelError               a model name/directory/cache cannot be resolved or loaded
     ├── EngineError              the inference engine refused or failed a request
     │    ├── InvalidRequestError      bad sampling values, empty prompt, unknown token ids
     │    │    └── ContextLengthError  prompt (+max_tokens) does not fit the context window
     │    └── EngineOverloadedError    the engine is shutting down or over capacity
     ├── GatewayError             an error the gateway answers to its client (HTTP status, OpenAI type/code)
     │    └── BudgetRefusal            a call the session's budget does not allow (403/429) [legorl.gateway.sessions]
     ├── ClientDisconnected       the gateway's client went away while its request was served
     ├── SandboxError             the environment: a sandbox could not be created, or an exec failed for infra reasons
     │    ├── ImageBuildError          a cached image layer could not be built (names the step, with its output)
     │    │    └── ImageDiskFullError  ... because the disk filled up (the partial layer was removed)
     │    ├── UnsupportedEnvironment   the backend cannot build this task's environment (not transient)
     │    └── WorkspaceDiffError       git fails on the workspace or its diff is too large (the agent's state: scored)
     ├── TaskError                a task record or suite is malformed (names instance and field)
     ├── DiffError                a diff git would reject, or one that could be read two ways (also a ValueError)
     ├── RunDirError              a run directory is missing, truncated or corrupt (names the file)
     └── AlignmentBuildError      recorded turns contradict their alignment events

Every class is defined here except those marked ``[module]``, which live beside the state they need.

Environment failures. Only the :class:`SandboxError` tree (``ImageBuildError`` included) and what a
sandbox reports about an exec (ran past its time limit, killed from outside, no report) make the
grader answer ``status="env_failure"`` (retried, then left out of the gradient); the cause is an
:class:`EnvFailureCause`. Any other exception raised while grading — a ``TypeError`` in our own code
— is a bug: it propagates out of ``grade()``, it is never retried and never recorded as an environment
failure; the callers that grade many diffs (``legorl grade``, a rollout) catch it at their boundary
and record it as that one diff's ``status="grader_error"`` with its cause
(:func:`legorl.grading.grader.grade_isolated`), which the batch keeps out of the gradient and counts.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class LegoRLError(Exception):
    """Base of every error LEGO-RL raises on purpose."""


class DiffError(LegoRLError, ValueError):
    """A diff ``git apply`` would reject, or one :mod:`legorl.diffs` cannot be sure it reads as git does."""


class ConfigError(LegoRLError):
    pass


class UnknownHarnessError(ConfigError, ValueError):
    """A harness id that is not registered, or options its adapter does not accept."""


class ModelError(LegoRLError):
    pass


class EngineError(LegoRLError):
    pass


class InvalidRequestError(EngineError):
    pass


class ContextLengthError(InvalidRequestError):
    pass


class EngineOverloadedError(EngineError):
    pass


class GatewayError(LegoRLError):
    """An error answered to the client; each dialect renders it in its own shape.

    ``type`` uses OpenAI's vocabulary (``invalid_request_error``, ``server_error``...); ``code`` is
    e.g. ``context_length_exceeded``, ``invalid_api_key``, ``engine_overloaded``, ``engine_timeout``.
    ``body()`` / ``response()`` give the OpenAI shape (the default dialect)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> Any:
        """The OpenAI-shaped ``JSONResponse`` (fastapi is imported here only, so this module stays light)."""
        from fastapi.responses import JSONResponse

        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


class ClientDisconnected(LegoRLError):
    """The client went away while its request was being served."""


class SandboxError(LegoRLError):
    pass


class WorkspaceDiffError(SandboxError):
    """The workspace's changes cannot be taken: git fails on it, or the diff is over the size limit.
    That is the state the agent left (it can remove ``.git`` or write a huge file), so a rollout that
    ends so is scored, not an environment failure (docs/reward-integrity.md)."""


class UnsupportedEnvironment(SandboxError):
    """The backend cannot build this task's environment (an apt step in bwrap, an interpreter pyenv
    lacks): an environment failure that retrying will not change."""


class ImageBuildError(SandboxError):
    """A layer could not be built. ``step`` names what failed, ``output`` is its (tail of) output."""

    def __init__(self, message: str, *, kind: str = "", key: str = "", step: str = "", output: str = ""):
        self.message, self.kind, self.key, self.step, self.output = message, kind, key, step, output
        detail = f"{kind} layer {key[:12]}: " if kind else ""
        text = f"{detail}{message}" + (f" [step: {step}]" if step else "")
        if output.strip():
            text += "\n--- output (tail) ---\n" + output.strip()[-4000:]
        super().__init__(text)


class ImageDiskFullError(ImageBuildError):
    """The disk filled up (ENOSPC) while building a layer; the partial layer was removed."""


class TaskError(LegoRLError):
    pass


class RunDirError(LegoRLError):
    """A run directory cannot be read: no ``run.sqlite``, a truncated or corrupt database, a missing or
    unreadable ``tokens/*.parquet`` file. The message names the file."""


class AlignmentBuildError(LegoRLError):
    """Recorded turns contradict their alignment events."""


class EnvFailureCause(StrEnum):
    """Why the grader could not give a verdict (``GraderReport.cause_kind``; ``GraderReport.cause`` is
    ``"<value>: <detail>"``). A ``str`` enum: it serialises as its value, as the cause prefixes did."""

    IMAGE_BUILD = "image_build"  # ImageBuildError while creating the grading sandbox
    SANDBOX_CREATE = "sandbox_create"  # any other SandboxError while creating it
    SANDBOX_CRASH = "sandbox_crash"  # SandboxError while grading in it, or the sandbox killed from outside
    RUNNER_TIMEOUT = "runner_timeout"  # the test run passed its time limit (also on the pristine repository)
    RUNNER_CRASHED = "runner_crashed"  # the test runner died without a report (also on the pristine repository)
    TEST_PATCH_FAILED = "test_patch_failed"  # the task's test_patch does not apply (a broken task)
    NO_SOURCE = "no_source"  # the task has no local source_dir and no sandbox spec was given
    NO_TESTS = "no_tests"  # the task lists no FAIL_TO_PASS/PASS_TO_PASS tests
    UNSUPPORTED = "unsupported"  # the backend cannot build the task's environment (e.g. apt steps in bwrap)

    @property
    def transient(self) -> bool:
        """Worth retrying: the environment may behave next time (a broken task will not)."""
        return self in _TRANSIENT


_TRANSIENT = frozenset(
    {
        EnvFailureCause.IMAGE_BUILD,
        EnvFailureCause.SANDBOX_CREATE,
        EnvFailureCause.SANDBOX_CRASH,
        EnvFailureCause.RUNNER_TIMEOUT,
        EnvFailureCause.RUNNER_CRASHED,
    }
)
