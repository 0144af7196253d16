"""The documented top-level keys of each ``legorl bench ...`` JSON result (a light module: the CLI builds
each command's ``--help`` from it; ``docs/cli.md`` lists the same keys and ``tests/test_cli_json.py``
checks that every bench prints them). Nested values are described in each bench module's docstring."""

from __future__ import annotations

RESULT_KEYS: dict[str, tuple[str, ...]] = {
    # legorl.bench.engine.run_engine_bench (plus "gen_tokens_per_s_<concurrency>", the same figure as
    # gen_tokens_per_s_concurrent under a name that says the concurrency)
    "engine": (
        "engine",
        "model",
        "device",
        "dtype",
        "torch_threads",
        "platform",
        "max_tokens",
        "prompt_tokens",
        "concurrency",
        "repeats",
        "load_s",
        "gen_tokens_per_s_1",
        "gen_tokens_per_s_concurrent",
        "batching_speedup",
        "prefill_tokens",
        "prefill_tokens_per_s",
        "context_tokens",
        "decode_tokens_per_s_long_context",
        "recompute_tokens_per_s",
        "recompute_pearson",
        "recompute_mean_abs_diff",
        "recompute_tokens",
        "ttfc_fraction",
        "peak_rss_mb",
    ),
    # legorl.bench.gateway.run_gateway_bench
    "gateway": ("setup", "engine_in_process_us", "nonstream", "throughput", "stream", "store_append_turn_ms"),
    # legorl.bench.sandbox.run_sandbox_bench: one object per backend ("bwrap", "podman"), each with these
    # keys, or {"skipped": why} when the backend is not installed
    "sandbox": ("runs", "hit_latency_ms", "phase_p50_ms", "cold_instance_build_s", "throughput", "cache", "cpus"),
    # legorl.bench.grader.run_grader_bench
    "grader": (
        "suite",
        "workers",
        "rollouts",
        "wall_s",
        "rollouts_per_min",
        "grade_s",
        "stages",
        "resolved",
        "status",
        "blocking_flags",
        "behaviour",
    ),
    # legorl.observe.bench.run_ui_bench (``legorl bench ui``)
    "ui": ("rollouts", "list_p50_ms", "list_p99_ms", "trajectory_p50_ms", "trajectory_p99_ms", "tokens_per_trajectory"),
    # legorl.bench.trainer.run_trainer_bench
    "trainer": (
        "model",
        "samples",
        "tokens",
        "sampled_tokens_per_sample",
        "group_size",
        "steps",
        "ours_s",
        "ours_steps_s",
        "threads",
        "trainer",
        "last_step",
        "peak_rss_mb",
        "lora",  # null without trainer.lora; else LoRA against full fine-tuning (memory, step time)
        # with TRL (the default; --no-trl leaves these out)
        "trl_s",
        "trl_steps_s",
        "ratio",
        "trl_version",
        "grad_norm_ours",
        "grad_norm_trl",
        "grad_norm_rel_diff",
    ),
    # legorl.bench.learn.run_learn_bench
    # legorl.bench.async_rollouts.run_async_bench
    "async": (
        "steps",
        "max_staleness",
        "engine",
        "cpu_count",
        "sync_wall_s",
        "async_wall_s",
        "async_speedup",
        "lag_histogram",
        "dropped_stale",
        "sync_reward_mean",
        "async_reward_mean",
        "runs",
    ),
    # legorl.bench.scale.run_scale_bench
    "scale": (
        "engine",
        "cpu_count",
        "processes",
        "calls_per_rollout",
        "window_s",
        "workers",
        "rollouts_per_s",
        "gateway_calls_per_s",
        "rollout_p50_ms",
        "coordinator_cpu_ms_per_rollout",
        "saturates_at_workers",
    ),
    "learn": (
        "heldout_before",
        "heldout_after",
        "heldout_diff",
        "p_value",
        "bootstrap_diff_95",
        "heldout_samples_before",
        "heldout_samples_after",
        "valid_line_before",
        "valid_line_after",
        "solved_among_valid_before",
        "solved_among_valid_after",
        "solved_among_valid_p_value",
        "control_after",
        "control_p_value",
        "steps",
        "reward_curve",
        "plot",
        "wall_s",
    ),
    # legorl.bench.swebench.run_swebench_bench
    "swebench": (
        "instances",
        "validated",
        "failed",
        "env_cache_hit_rate",
        "env_layers_built",
        "instances_per_min",
        "env_layers",
        "by_repo",
        "wall_s",
        "report",
        "cache",
    ),
    # legorl.bench.mine.run_mine_bench
    "mine": (
        "validated",
        "verdicts",
        "kept_share",
        "tasks_per_hour",
        "verdicts_per_hour",
        "cpu_s",
        "tasks_per_cpu_hour",
        "tasks_per_hour_2_cores",
        "cache",
        "by_method",
        "by_source",
        "sources",
        "workers",
        "cpus",
        "wall_s",
        "errors",
    ),
    # legorl.bench.rollout.run_rollout_bench
    "rollout": (
        "harness",
        "task",
        "sandbox",
        "install",
        "layer_bytes",
        "cold_layer_build_s",
        "warm_layer_lookup_s",
        "cold_start_s",
        "warm_start_s",
        "rollouts",
    ),
    # legorl.bench.harness.run_harness_bench
    "harness": (
        "harness",
        "engine",
        "suite",
        "rollouts",
        "ran_now",
        "statuses",
        "endings",
        "env_failures_by_cause",
        "env_failure_rate_not_model",
        "hangs",
        "runtime_crashes",
        "runtime_crash_signals",
        "wall_s_p50",
        "wall_s_p95",
        "gateway_share",
        "engine_share",
        "model_calls_mean",
        "resolved_rate",
        "reward_mean",
        "hang_details",
        "wall_s",
        "results",
        "run_dir",
    ),
}


def keys_help(bench: str) -> str:
    """The ``--json`` help of ``legorl bench <bench>``: what the JSON holds."""
    keys = ", ".join(RESULT_KEYS[bench])
    if bench == "sandbox":
        return f'Print JSON (default): {{"<backend>": {{{keys}}} or {{"skipped"}}}}. --no-json: one line per backend.'
    return f"Print JSON (default) with the keys {keys}. --no-json: the same figures as 'key: value' lines."
