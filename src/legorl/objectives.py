"""The registries of policy-gradient objectives and advantage estimators, chosen by name in the config
(``trainer.objective``, ``trainer.advantage``); formulas and references in ``docs/objectives.md``.

This module imports nothing of ML and nothing of LEGO-RL: the config validates names against it (so
it sits below the config, outside the training package) and ``legorl --help`` must stay instant. The
built-in objectives are *declared* here with what the config needs to know about them, and their torch
implementations (:mod:`legorl.training.policy_losses`) are imported on the first :func:`get_policy_loss`. The advantage estimators are plain Python and live here.

A user's objective or estimator registers from a module named in ``trainer.objective_module``,
imported when the config is validated (so its names validate, in every process that loads the
config, FSDP ranks included)::

    from legorl.objectives import register_advantage, register_policy_loss
    from legorl.training.policy_losses import PolicyLoss

    @register_policy_loss("my_pg", is_level="token")
    def my_pg(logp, logp_old, advantage, weight, cfg) -> PolicyLoss: ...

    @register_advantage("my_baseline")
    def my_baseline(rewards): ...  # list of advantages, or None: the group carries no signal

A policy loss takes one sample's per-token tensors over its loss-masked positions only — ``logp``
(π_θ, with grad), ``logp_old`` (π_old, detached), the scalar ``advantage`` (float), the detached
rollout-vs-trainer importance ``weight`` (per token or a scalar, at the objective's ``is_level``
unless ``trainer.is_level`` says otherwise) and the :class:`~legorl.training.gspo.LossConfig` —
and returns a :class:`~legorl.training.policy_losses.PolicyLoss` (the sample's loss to minimise,
before the KL term, and its ratio and clip statistics).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

AdvantageFn = Callable[[Sequence[float]], list[float] | None]
_A = TypeVar("_A", bound=AdvantageFn)
ImportanceLevel = Literal["sequence", "token"]

# the module whose import binds the built-in objectives' functions (it needs torch)
_BUILTIN_MODULE = "legorl.training.policy_losses"


@dataclass(frozen=True)
class ObjectiveInfo:
    """What the config and the loss need to know about an objective, besides its function."""

    name: str
    fn: Callable[..., Any] | None  # None: a built-in whose module is not imported yet
    is_level: ImportanceLevel = "token"  # the importance weights' level when trainer.is_level is null
    advantage: str = "group_norm"  # the estimator used when trainer.advantage is not given
    token_ratio: bool = True  # per-token ratios: a clip range of GSPO's 1e-4 scale would freeze it
    clip_higher: bool = False  # needs eps_high > eps_low (DAPO's decoupled clip)


_OBJECTIVES: dict[str, ObjectiveInfo] = {
    info.name: info
    for info in (
        ObjectiveInfo("gspo", None, is_level="sequence", token_ratio=False),
        ObjectiveInfo("gspo_token", None, is_level="sequence", token_ratio=False),
        ObjectiveInfo("grpo", None),
        ObjectiveInfo("dr_grpo", None, advantage="group_mean"),
        ObjectiveInfo("dapo", None, clip_higher=True),
        ObjectiveInfo("cispo", None),
    )
}
BUILTIN_OBJECTIVES = tuple(_OBJECTIVES)

_ADVANTAGES: dict[str, AdvantageFn] = {}


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # a module imported again (importlib.reload, a test re-running it) registers the same function anew
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def register_policy_loss(
    name: str,
    *,
    is_level: ImportanceLevel = "token",
    advantage: str = "group_norm",
    token_ratio: bool = True,
    clip_higher: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: make ``fn`` the objective ``name`` (``trainer.objective: name``). ``is_level``: the
    level of its importance weights when ``trainer.is_level`` is null; ``advantage``: the estimator
    it pairs with when ``trainer.advantage`` is not set; ``token_ratio``: it clips per-token ratios
    (the config then refuses a clip range below 0.01); ``clip_higher``: it needs ``eps_high > eps_low``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        info = ObjectiveInfo(name, fn, is_level, advantage, token_ratio, clip_higher)
        old = _OBJECTIVES.get(name)
        if old is not None:
            if old.fn is None and fn.__module__ == _BUILTIN_MODULE:
                # a built-in's implementation: its declaration above stays the one truth
                _OBJECTIVES[name] = replace(old, fn=fn)
                return fn
            if old.fn is None or not _same_function(old.fn, fn):
                raise ValueError(f"objective {name!r} is already registered")
        _OBJECTIVES[name] = info
        return fn

    return deco


def register_advantage(name: str) -> Callable[[_A], _A]:
    """Decorator: make ``fn(rewards) -> advantages | None`` the estimator ``name``
    (``trainer.advantage: name``). It gets one task's group of rewards and returns one advantage per
    reward, or None when the group carries no signal (its samples then get no gradient)."""

    def deco(fn: _A) -> _A:
        old = _ADVANTAGES.get(name)
        if old is not None and not _same_function(old, fn):
            raise ValueError(f"advantage estimator {name!r} is already registered")
        _ADVANTAGES[name] = fn
        return fn

    return deco


def objective_names() -> list[str]:
    return list(_OBJECTIVES)


def advantage_names() -> list[str]:
    return list(_ADVANTAGES)


def objective_info(name: str) -> ObjectiveInfo:
    try:
        return _OBJECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown objective {name!r}; known: {', '.join(_OBJECTIVES)}") from None


def get_policy_loss(name: str) -> Callable[..., Any]:
    """The loss function of objective ``name`` (importing the built-ins' torch module on first use)."""
    info = objective_info(name)
    if info.fn is None:
        importlib.import_module(_BUILTIN_MODULE)
        info = _OBJECTIVES[name]
        if info.fn is None:
            raise RuntimeError(f"built-in objective {name!r} has no implementation in {_BUILTIN_MODULE}")
    return info.fn


def get_advantage(name: str) -> AdvantageFn:
    try:
        return _ADVANTAGES[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(_ADVANTAGES)}") from None


def load_objective_module(module: str) -> None:
    """Import the user's module that registers objectives or estimators (``trainer.objective_module``)."""
    importlib.import_module(module)


# --- advantage estimators: one task's group of rewards → one advantage each, or None (no signal) ---
# Every estimator returns None for fewer than 2 rollouts or zero reward variance: all rollouts of the
# group then get advantage 0 from any baseline, and the group is only monitored (as before).


def _no_signal(rewards: Sequence[float], eps: float) -> bool:
    n = len(rewards)
    if n < 2:
        return True
    mean = sum(rewards) / n
    return sum((r - mean) ** 2 for r in rewards) / n <= eps * eps


@register_advantage("group_norm")
def group_norm(rewards: Sequence[float], eps: float = 1e-6) -> list[float] | None:
    """GRPO's ``(r_i − mean) / (std + eps)``, population std. None when the group carries no signal:
    fewer than 2 valid rollouts or zero reward variance (callers drop env failures first)."""
    n = len(rewards)
    if n < 2:
        return None
    mean = sum(rewards) / n
    var = sum((r - mean) ** 2 for r in rewards) / n
    if var <= eps * eps:
        return None
    std = math.sqrt(var)
    return [(r - mean) / (std + eps) for r in rewards]


@register_advantage("group_mean")
def group_mean(rewards: Sequence[float], eps: float = 1e-6) -> list[float] | None:
    """Dr. GRPO's ``r_i − mean``: no division by the std, which up-weights near-unanimous groups."""
    if _no_signal(rewards, eps):
        return None
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


@register_advantage("rloo")
def rloo(rewards: Sequence[float], eps: float = 1e-6) -> list[float] | None:
    """REINFORCE leave-one-out: ``r_i − mean_{j≠i} r_j`` (the baseline does not depend on the sample,
    so the estimate is unbiased); equals ``n/(n−1) · (r_i − mean)``."""
    if _no_signal(rewards, eps):
        return None
    n, total = len(rewards), sum(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]


BUILTIN_ADVANTAGES = tuple(_ADVANTAGES)
