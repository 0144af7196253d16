"""Errors named after the boundary they crossed.

    LegoRLError
     ├── ConfigError          bad user configuration or CLI input
     ├── ModelError           a model name/directory/cache cannot be resolved or loaded
     ├── EngineError          the inference engine refused or failed a request
     │    ├── InvalidRequestError   bad sampling values, empty prompt, unknown token ids
     │    ├── ContextLengthError    prompt (+max_tokens) does not fit the context window
     │    └── EngineOverloadedError the engine is shutting down or over capacity
     ├── SandboxError         a sandbox could not be created or an exec failed for infra reasons
     │    └── SandboxTimeout      an exec ran past its time limit
     ├── TaskError            a task record or suite is malformed (names instance and field)
     ├── HarnessError         the harness program crashed or misbehaved
     └── GradingError         the grader could not produce a verdict (infra, not the agent)
"""

from __future__ import annotations


class LegoRLError(Exception):
    """Base of every error LEGO-RL raises on purpose."""


class ConfigError(LegoRLError):
    pass


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


class SandboxError(LegoRLError):
    pass


class SandboxTimeout(SandboxError):
    pass


class TaskError(LegoRLError):
    pass


class HarnessError(LegoRLError):
    pass


class GradingError(LegoRLError):
    pass
