"""Learning benchmark (``legorl bench learn``): does the held-out solve rate go up, and can the
number be trusted?

Two training runs of one run config (default ``configs/learn.json``: the one-line-fix family,
harness ``line-fix``, the embedded SmolLM2), each a plain ``legorl train`` with the config's
``eval`` section (held-out suite, N samples per task, before and after):

* ``policy`` — as configured;
* ``control`` — the same with ``trainer.flip_advantages`` (the gradient pushes away from what the
  reward favours): it must not improve, so a gain of the policy run is the reward's doing, not an
  artefact of training as such (format drift, evaluation noise). Both start from the same weights,
  so the control reuses the policy run's "before" evaluation.

``--harness NAME`` learns *through* that harness instead (default config
``configs/learn-multiturn.json``: the multi-turn fix family, where the issue names no file or line,
so the agent looks, edits and may run the tests over several turns), with the harness's own options
from :data:`HARNESS_RUNS` (they slim its system prompt and tool list to fit the model's context,
through the harness's own settings, never a patch). Before training, one scripted rollout through
the harness measures its first prompt: when that and one turn's tokens do not fit the model's
context, the bench reports the numbers (``fits_context: false``) and trains nothing. Per harness it
adds, over every rollout of the policy run (training and evaluation, :mod:`legorl.bench.harness_stats`):
mean model turns, the share of rollouts that yielded more than one sample, alignment kinds and
fork kinds, env-failure rate by cause, the first prompt's tokens.

``init``: a warm start (``legorl sft --out``) both arms start from instead of the config's model; the
before-evaluation then scores it, so the measured gain is RL's alone.

An interrupted bench resumes: an arm whose after-evaluation exists is done, an arm with a
checkpoint continues from it, the before-evaluation is never run twice.

Reported: held-out solve rates before/after (pass@1 over valid samples; env failures are not
counted), their difference, the two-sided two-proportion p-value, a 95% bootstrap interval of the
difference over held-out tasks (tasks resampled with replacement), the valid-line rate (the
answer changed the named line into one Python statement: what a pure format gain would move) and
the solve rate among the answers in that format (what it would not), the control's after rate,
the training reward curve (``reward_curve.png`` in the output directory when matplotlib is
installed: ``pip install 'legorl[bench]'``), steps and wall time.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legorl.bench.harness_stats import harness_stats
from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.loop.eval import phase_report_path
from legorl.loop.eval_stats import EvalReport, two_proportion_test
from legorl.observe.plots import plot_reward_curves

if TYPE_CHECKING:
    from legorl.observe.progress import RichPhaseProgress

__all__ = ["HARNESS_RUNS", "bootstrap_diff", "run_learn_bench", "solved_among_valid", "valid_line_rate"]

# mini-swe-agent's own config keys (``-c agent.system_template=...``), no patch of the program
MINI_SWE_AGENT_SLIM = (
    "agent.system_template=You are a helpful assistant that can interact with a computer.\n"
    "Reply with a short THOUGHT, then exactly ONE bash command in a ```mswea_bash_command block.\n",
    "agent.instance_template=Please solve this issue: {{task}}\n\n"
    "Each reply runs one command in a new shell at the repository root. "
    "When the fix is done, submit with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` alone.\n",
)

# Per harness: the run-config overrides ``bench learn --harness`` applies on top of the config.
# SmolLM2-135M has 8192 positions; each harness's own options keep its prompt and tools small.
HARNESS_RUNS: dict[str, dict[str, Any]] = {
    "minimal": {"rollout.harness": "minimal"},
    # text-based config (one bash block per reply, no tool schema in the prompt) with mini's own
    # template settings shortened: its stock templates (~1,000 tokens of workflow advice and sed
    # examples) fit the context but triple every rollout's prefill and every training step on CPU
    "mini-swe-agent": {
        "rollout.harness": "mini-swe-agent",
        "rollout.harness_options": {"tool_calling": False, "extra_config": list(MINI_SWE_AGENT_SLIM)},
    },
    "opencode": {"rollout.harness": "opencode", "rollout.harness_options": {"tools": ["bash", "read", "edit"]}},
    "openhands": {"rollout.harness": "openhands", "rollout.harness_options": {"tools": ["terminal"]}},
    "claude-code": {"rollout.harness": "claude-code", "rollout.harness_options": {"tools": ["Bash", "Edit"]}},
}


def bootstrap_diff(before: EvalReport, after: EvalReport, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of (after − before) pooled solve rate, resampling held-out tasks with replacement."""
    b = {t.task_id: t for t in before.tasks}
    a = {t.task_id: t for t in after.tasks}
    ids = sorted(set(a) & set(b))
    if not ids:
        return (float("nan"), float("nan"))
    rng = random.Random(seed)
    diffs = []
    for _ in range(draws):
        pick = rng.choices(ids, k=len(ids))
        na, nb = sum(a[i].samples for i in pick), sum(b[i].samples for i in pick)
        if na and nb:
            diffs.append(sum(a[i].correct for i in pick) / na - sum(b[i].correct for i in pick) / nb)
    diffs.sort()
    if not diffs:
        return (float("nan"), float("nan"))
    return (diffs[int(0.025 * len(diffs))], diffs[min(len(diffs) - 1, int(0.975 * len(diffs)))])


def _line_outcomes(eval_run_dir: Path) -> list[tuple[bool, bool]]:
    """(valid line, solved) of every graded evaluation rollout: valid when its diff replaced one
    line by one Python statement."""
    from legorl.harnesses.line_agent import is_statement
    from legorl.trajectory.store import open_run

    store = open_run(eval_run_dir)
    try:
        rollouts = [r for r in store.iter_rollouts() if r.status in ("ok", "timeout")]
    finally:
        store.close(compact=False)

    def valid(diff: str) -> bool:
        added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        return len(added) == 1 and is_statement(added[0])

    return [(valid(r.diff), r.reward > 0) for r in rollouts]


def valid_line_rate(eval_run_dir: Path) -> float | None:
    """Share of graded evaluation rollouts whose diff replaced one line by one Python statement."""
    outcomes = _line_outcomes(eval_run_dir)
    return sum(v for v, _ in outcomes) / len(outcomes) if outcomes else None


def solved_among_valid(eval_run_dir: Path) -> tuple[int, int]:
    """(solved, valid): of the answers in the right format, how many fixed the bug. A gain here is
    not the format's doing."""
    outcomes = _line_outcomes(eval_run_dir)
    return sum(1 for v, ok in outcomes if v and ok), sum(1 for v, _ in outcomes if v)


def _share(solved_of: tuple[int, int]) -> float | None:
    return solved_of[0] / solved_of[1] if solved_of[1] else None


def _rate(report: EvalReport) -> float:
    return report.correct / report.samples if report.samples else float("nan")


@dataclass(frozen=True)
class _Bench:
    """What every stage of one learning bench shares: the loaded config and where it writes."""

    cfg: RunConfig
    out_dir: Path
    harness: str | None
    init: Path | None
    t0: float


def run_learn_bench(
    config: Path,
    out_dir: Path,
    overrides: dict[str, Any] | None = None,
    control: bool = True,
    harness: str | None = None,
    init: Path | None = None,
) -> dict[str, Any]:
    cfg = _load_config(config, overrides, harness)
    from legorl.observe.progress import RichPhaseProgress

    phases = RichPhaseProgress()  # on stderr: stdout carries the JSON; a run of hours must not be silent
    bench = _Bench(cfg=cfg, out_dir=Path(out_dir), harness=harness, init=init, t0=time.perf_counter())
    fit = _context_fit(cfg, bench.out_dir / "preflight") if harness is not None else None
    if fit is not None and not fit["fits_context"]:
        return _write_unfit(bench, fit, phases)
    arms = {"policy": False, **({"control": True} if control else {})}
    walls: dict[str, float] = {}
    for name, flip in arms.items():
        wall = _run_arm(bench, name, flip, phases)
        if wall is not None:  # None: the arm was done before
            walls[name] = wall
    before, after = _report(bench.out_dir, "policy", "before"), _report(bench.out_dir, "policy", "after")
    result = _result(bench, arms, before, after, walls)
    if harness is not None:
        result.update(_harness_result(bench, fit))
    result["warm_start"] = str(init) if init is not None else None
    if control:
        result.update(_control_result(bench.out_dir, before))
    (bench.out_dir / "bench_learn.json").write_text(json.dumps(result, indent=2))
    phases.console.print(
        f"held-out {result['heldout_before']:.3f} → {result['heldout_after']:.3f} (p = {result['p_value']:.3g})"
        + (f", control {result['control_after']:.3f}" if control else "")
        + f"; results, runs and plot in {bench.out_dir}"
    )
    return result


def _load_config(config: Path, overrides: dict[str, Any] | None, harness: str | None) -> RunConfig:
    """The run config with the harness's own options and the caller's overrides on top."""
    if harness is not None and harness not in HARNESS_RUNS:
        raise ConfigError(f"bench learn --harness: unknown harness {harness!r}; known: {', '.join(HARNESS_RUNS)}")
    cfg = RunConfig.load(config, **{**(HARNESS_RUNS[harness] if harness else {}), **(overrides or {})})
    if cfg.eval.suite is None:
        raise ConfigError(f"{config}: bench learn needs an eval section with a held-out suite (eval.suite)")
    return cfg


def _write_unfit(bench: _Bench, fit: dict[str, Any], phases: RichPhaseProgress) -> dict[str, Any]:
    """The result of a harness whose first prompt does not fit the model's context: nothing trained."""
    cfg, out_dir = bench.cfg, bench.out_dir
    phases.console.print(
        f"[bold red]{bench.harness}[/]: its first prompt has {fit['first_prompt_tokens']} tokens; with "
        f"{cfg.rollout.max_tokens_per_turn} to sample that is past the model's {fit['model_context']}: not trained"
    )
    unfit: dict[str, Any] = {"harness": bench.harness, **fit, "heldout_before": None, "heldout_after": None}
    unfit.update(p_value=None, control_after=None, mean_turns=None, wall_s=time.perf_counter() - bench.t0)
    unfit["out_dir"] = str(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_learn.json").write_text(json.dumps(unfit, indent=2))
    return unfit


def _run_arm(bench: _Bench, name: str, flip: bool, phases: RichPhaseProgress) -> float | None:
    """Train one arm (resuming it when it has a checkpoint); its wall time, or None when it was
    done before."""
    from legorl.loop.train import train
    from legorl.observe.progress import StepClock
    from legorl.training.checkpoint import latest_checkpoint

    cfg, out_dir, init, progress = bench.cfg, bench.out_dir, bench.init, phases.console
    arm = cfg.model_copy(
        update={
            "run_dir": out_dir / name,
            "trainer": cfg.trainer.model_copy(update={"flip_advantages": flip}),
            "eval": cfg.eval.model_copy(update={"before": not flip}),  # the same start as the policy's
        }
    )
    if phase_report_path(out_dir / name, "after").is_file():
        progress.print(f"[bold]{name}[/] run: done before (its after-evaluation exists)")
        return None
    resume = latest_checkpoint(out_dir / name) is not None
    if init is not None and not resume:
        _start_from(init, arm)
        resume = True
    t_arm = time.perf_counter()
    progress.print(
        f"[bold]{name}[/] run{' (resumed)' if resume else ''}"
        + (f" from the warm start {init}" if init is not None else "")
        + f": {cfg.steps} steps × "
        f"{cfg.tasks_per_step * cfg.group_size} rollouts"
        + (f" through {bench.harness}" if bench.harness else "")
        + (f", held-out evaluation of {cfg.eval.suite} before" if arm.eval.before else "")
        + f" and after → {out_dir / name}"
    )
    clock = StepClock(cfg.steps)

    def on_step(step: int, m: dict[str, Any]) -> None:
        eta = clock.eta_s(step, m["time/step_s"])
        progress.print(
            f"  {name} step {step + 1}/{cfg.steps}: reward {m['rollout/reward_mean']:.3f}, "
            f"groups with signal {m['batch/groups_with_signal']}/{m['batch/groups']}, "
            f"{m['time/step_s']:.0f} s/step, training ETA {eta / 60:.1f} min"
        )

    with phases:
        asyncio.run(train(arm, on_step=on_step, resume=resume, progress=phases))
    return time.perf_counter() - t_arm


def _report(out_dir: Path, arm: str, phase: str) -> EvalReport:
    path = phase_report_path(out_dir / arm, phase)
    if not path.is_file():
        raise ConfigError(f"{path}: missing (the {arm} run ended before its last step?)")
    return EvalReport.from_dict(json.loads(path.read_text()))


def _result(
    bench: _Bench, arms: dict[str, bool], before: EvalReport, after: EvalReport, walls: dict[str, float]
) -> dict[str, Any]:
    """The policy run's held-out figures, reward curves and plot (control figures left None)."""
    from legorl.observe.metrics import read_metrics

    cfg, out_dir = bench.cfg, bench.out_dir
    z, p = two_proportion_test(after.correct, after.samples, before.correct, before.samples)
    curves = {
        arm: [(int(row["step"]), float(row["rollout/reward_mean"])) for row in read_metrics(out_dir / arm)]
        for arm in arms
    }
    plot_path = out_dir / "reward_curve.png"
    plot_skipped = plot_reward_curves(curves, plot_path, "legorl bench learn")
    valid_before = solved_among_valid(out_dir / "policy" / "eval" / "before")
    valid_after = solved_among_valid(out_dir / "policy" / "eval" / "after")
    result: dict[str, Any] = {
        "heldout_before": _rate(before),
        "heldout_after": _rate(after),
        "heldout_diff": _rate(after) - _rate(before),
        "p_value": p,
        "z": z,
        "bootstrap_diff_95": list(bootstrap_diff(before, after)),
        "heldout_samples_before": before.samples,
        "heldout_samples_after": after.samples,
        "heldout_tasks": len(after.tasks),
        "heldout_env_failures": before.env_failures + after.env_failures,
        "valid_line_before": valid_line_rate(out_dir / "policy" / "eval" / "before"),
        "valid_line_after": valid_line_rate(out_dir / "policy" / "eval" / "after"),
        "solved_among_valid_before": _share(valid_before),
        "solved_among_valid_after": _share(valid_after),
        "solved_among_valid_p_value": two_proportion_test(*valid_after, *valid_before)[1],
        "control_after": None,
        "control_p_value": None,
        "steps": cfg.steps,
        "rollouts_per_step": cfg.tasks_per_step * cfg.group_size,
        "train_suite": cfg.suite,
        "heldout_suite": cfg.eval.suite,
        "reward_curve": curves["policy"],
        "control_reward_curve": curves.get("control"),
        "plot": None if plot_skipped else str(plot_path),
        "wall_s": time.perf_counter() - bench.t0,
        "wall_s_per_run": walls,
        "out_dir": str(out_dir),
    }
    if plot_skipped:
        result["plot_skipped"] = plot_skipped
    return result


def _harness_result(bench: _Bench, fit: dict[str, Any] | None) -> dict[str, Any]:
    """The harness's options, its context fit and its rollout statistics over the policy run."""
    out_dir = bench.out_dir
    stats = harness_stats([out_dir / "policy", *(out_dir / "policy" / "eval" / p for p in ("before", "after"))])
    extra: dict[str, Any] = {"harness": bench.harness, "harness_options": bench.cfg.rollout.harness_options}
    extra.update(fit or {})
    extra.update({k: v for k, v in stats.to_dict().items() if k != "first_prompt_tokens" or v is not None})
    return extra


def _control_result(out_dir: Path, before: EvalReport) -> dict[str, Any]:
    """The control run's after rate, its p-value against the shared before, its valid-line rate."""
    ctrl = _report(out_dir, "control", "after")
    return {
        "control_after": _rate(ctrl),
        "control_p_value": two_proportion_test(ctrl.correct, ctrl.samples, before.correct, before.samples)[1],
        "valid_line_control_after": valid_line_rate(out_dir / "control" / "eval" / "after"),
    }


def _context_fit(cfg: RunConfig, run_dir: Path) -> dict[str, Any]:
    """One scripted rollout through the harness on the first training task: its first prompt's
    tokens, and whether that plus one turn's sampling budget fits the model's context."""
    from legorl.loop.single import rollout_once
    from legorl.models.registry import resolve_model
    from legorl.tasks.loader import run_tasks
    from legorl.trajectory.store import open_run

    task = run_tasks(cfg, training=True)[0]
    probe = cfg.model_copy(update={"run_dir": run_dir})
    asyncio.run(rollout_once(probe, task.instance_id, engine="scripted-gold"))
    store = open_run(run_dir)
    try:
        turns = sorted(store.iter_turns(), key=lambda t: t.turn_index)
    finally:
        store.close(compact=False)
    model_cfg = json.loads((resolve_model(cfg.engine.model) / "config.json").read_text())
    context = int(model_cfg.get("max_position_embeddings", 2048))
    first = len(turns[0].prompt_token_ids) if turns else None
    fits = first is not None and first + cfg.rollout.max_tokens_per_turn <= context
    return {"first_prompt_tokens": first, "model_context": context, "fits_context": fits}


def _start_from(init: Path, arm: RunConfig) -> None:
    """The arm's run directory as a copy of the warm start ``init`` (``legorl sft --out``: a run
    directory whose checkpoint is the state before step 0), with the arm's own config."""
    import shutil

    from legorl.training.checkpoint import checkpoint_step, latest_checkpoint

    ckpt = latest_checkpoint(init)
    if ckpt is None or checkpoint_step(ckpt) >= 0:
        raise ConfigError(f"{init}: not a warm start (legorl sft --out writes one: a checkpoint before step 0)")
    run_dir = Path(arm.run_dir)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # no checkpoint of its own yet: nothing of this arm is lost
    shutil.copytree(init, run_dir)
    (run_dir / "config.json").write_text(arm.model_dump_json(indent=2))
