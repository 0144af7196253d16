"""Every ``legorl ... list`` and ``legorl bench ...`` command takes ``--json`` and prints the keys its
``--help`` and docs/cli.md document. Each command is run here with cheap settings and its output parsed;
the benches that need a sandbox or the embedded model carry the ``sandbox`` / ``slow`` markers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from legorl.bench.schema import RESULT_KEYS
from legorl.cli import app
from legorl.cli.models import MODEL_JSON_KEYS, MODELS_JSON_KEYS
from legorl.sandbox.cli import LAYER_JSON_KEYS, LIST_JSON_KEYS
from legorl.tasks.cli import SUITES_JSON_KEYS, TASK_JSON_KEYS
from legorl.tasks.loader import BUILTIN_SUITES_DIR

runner = CliRunner()
DOCS = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
ONE_TASK = str(BUILTIN_SUITES_DIR / "trivial" / "legorl__trivial-001")


def _commands() -> dict[str, typer.main.TyperCommand]:
    """Every command of the CLI by its path ("tasks list", "bench engine", ...)."""
    out = {}

    def walk(prefix: str, group) -> None:
        for name, cmd in group.commands.items():
            path = f"{prefix} {name}".strip()
            if hasattr(cmd, "commands"):
                walk(path, cmd)
            else:
                out[path] = cmd

    walk("", typer.main.get_command(app))
    return out


JSON_COMMANDS = sorted(p for p in _commands() if p.split()[-1] == "list" or p.startswith("bench "))


def test_the_command_list_is_not_empty():
    assert {
        "tasks list",
        "images list",
        "models list",
        "bench engine",
        "bench gateway",
        "bench sandbox",
        "bench grader",
        "bench rollout",
    } <= set(JSON_COMMANDS)


@pytest.mark.parametrize("path", JSON_COMMANDS)
def test_every_list_and_bench_command_takes_json(path):
    cmd = _commands()[path]
    assert any("--json" in p.opts for p in cmd.params), f"`legorl {path}` has no --json option"
    assert f"legorl {path}" in DOCS, f"docs/cli.md does not document `legorl {path}`"


@pytest.mark.parametrize("bench", [p.split()[1] for p in JSON_COMMANDS if p.startswith("bench ")])
def test_bench_keys_are_documented(bench):
    assert bench in RESULT_KEYS, f"add the JSON keys of `legorl bench {bench}` to legorl.bench.schema.RESULT_KEYS"
    [opt] = [p for p in _commands()[f"bench {bench}"].params if "--json" in p.opts]
    section = DOCS.split(f"legorl bench {bench}", 1)[1].split("\n#", 1)[0]
    for key in RESULT_KEYS[bench]:
        assert key in opt.help, f"`legorl bench {bench} --help` does not name the key {key!r}"
        assert f"`{key}`" in section, f"docs/cli.md does not name the key {key!r} of `legorl bench {bench}`"


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_tasks_list_json():
    out = _json(["tasks", "list", "--json"])
    assert set(SUITES_JSON_KEYS) <= set(out)
    names = {s["name"]: s["tasks"] for s in out["suites"]}
    assert {"trivial", "easy", "medium"} <= set(names) and out["total"] == sum(names.values())
    out = _json(["tasks", "list", "trivial", "--json"])
    assert out["suite"] == "trivial" and len(out["tasks"]) == names["trivial"]
    for t in out["tasks"]:
        assert set(TASK_JSON_KEYS) == set(t) and t["tier"] == "trivial" and t["fail_to_pass"] >= 1


def test_models_list_json():
    out = _json(["models", "list", "--json"])
    assert set(MODELS_JSON_KEYS) <= set(out)
    [m] = [m for m in out["models"] if m["name"] == "smollm2-135m"]
    assert set(MODEL_JSON_KEYS) == set(m) and isinstance(m["prepared"], bool)


def test_images_list_json(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    out = _json(["images", "list", "--json"])
    assert set(LIST_JSON_KEYS) <= set(out) and out["layers"] == [] and out["total_bytes"] == 0
    assert Path(out["root"]).is_relative_to(tmp_path)


@pytest.mark.sandbox
def test_images_list_json_has_layer_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    res = runner.invoke(app, ["images", "build", "--source", ONE_TASK, "--json"])
    assert res.exit_code == 0, res.output
    out = _json(["images", "list", "--json"])
    assert out["layers"] and all(set(LAYER_JSON_KEYS) <= set(x) for x in out["layers"])
    assert out["total_bytes"] == sum(x["bytes"] for x in out["layers"]) > 0


def _bench(name: str, args: list[str]) -> dict:
    out = _json(["bench", name, *args, "--json"])
    missing = [k for k in RESULT_KEYS[name] if k not in out]
    assert not missing, f"`legorl bench {name} --json` lacks {missing}"
    return out


@pytest.mark.sandbox
def test_bench_sandbox_json():
    out = _json(["bench", "sandbox", "--n", "2", "--concurrency", "2", "--no-podman", "--json"])
    assert set(out) == {"bwrap"}
    assert set(RESULT_KEYS["sandbox"]) <= set(out["bwrap"]) and out["bwrap"]["runs"] == 2


@pytest.mark.sandbox
def test_bench_grader_json():
    out = _bench("grader", ["--suite", ONE_TASK, "--workers", "1"])
    assert out["rollouts"] == 1 and out["resolved"] == 1


@pytest.mark.slow
def test_bench_gateway_json():
    out = _bench("gateway", ["--requests", "10", "--concurrency", "2", "--output-tokens", "4", "--store-turns", "10"])
    assert out["setup"]["requests"] == 10


@pytest.mark.slow
@pytest.mark.sandbox
def test_bench_rollout_json():
    out = _bench("rollout", ["--no-cold", "--rollouts", "1"])
    assert len(out["rollouts"]) == 1 and out["cold_layer_build_s"] is None


@pytest.mark.slow
def test_bench_engine_json():
    args = ["--max-tokens", "4", "--concurrency", "2", "--repeats", "1", "--prefill-tokens", "16"]
    out = _bench("engine", [*args, "--context-tokens", "64"])
    assert out["context_tokens"] == 64 and out["decode_tokens_per_s_long_context"] > 0
    assert out["max_tokens"] == 4 and out["gen_tokens_per_s_2"] == out["gen_tokens_per_s_concurrent"]
    assert out["engine"] == "embedded" and out["recompute_tokens"] == 8 and out["recompute_pearson"] > 0.999
    assert 0 < out["ttfc_fraction"] < 1  # the first chunk leaves before the last token is sampled


def test_bench_ui_json():
    out = _bench("ui", ["--rollouts", "30", "--requests", "2"])
    assert out["rollouts"] == 30


def test_no_json_prints_figures_not_a_dict_repr(capsys):
    from legorl.cli.bench import _print_result

    _print_result({"a": 1, "b": {"c": [1, 2], "d": None}, "e": {}}, as_json=False)
    assert capsys.readouterr().out.splitlines() == ["a: 1", "b.c: [1, 2]", "b.d: null", "e: {}"]


@pytest.mark.slow
def test_bench_trainer_json():
    args = ["--samples", "2", "--tokens", "48", "--prompt-tokens", "40", "--group-size", "2", "--steps", "1"]
    out = _bench("trainer", args)
    assert out["samples"] == 2 and len(out["ours_steps_s"]) == 1 and out["ours_s"] > 0
    # one prompt for both samples: ours runs it once (40 + 2 × 8 tokens fed), TRL twice
    assert out["group_size"] == 2 and out["last_step"]["train/fed_tokens"] == 56
    # the TRL baseline ran the same step: same batch, same weights, so the same gradient
    assert len(out["trl_steps_s"]) == 1 and out["trl_s"] > 0
    assert out["ratio"] == pytest.approx(out["ours_s"] / out["trl_s"])
    assert out["grad_norm_ours"] > 0 and out["grad_norm_rel_diff"] < 1e-3


@pytest.mark.slow
def test_bench_trainer_lora_json():
    args = ["--samples", "2", "--tokens", "48", "--prompt-tokens", "40", "--steps", "1", "--set", "lora.rank=4"]
    out = _bench("trainer", args)
    assert out["trainer"]["lora"]["rank"] == 4 and out["ours_s"] > 0 and out["peak_rss_mb"] > 0
    lora = out["lora"]
    assert lora["rank"] == 4 and lora["lora_s"] > 0 and lora["full_s"] > 0
    # the adapters' gradients and optimiser state are a sliver of the model's
    assert lora["lora_trainable_params"] < 0.02 * lora["full_trainable_params"]
    assert lora["memory_ratio"] == pytest.approx(lora["lora_peak_rss_mb"] / lora["full_peak_rss_mb"])
    assert lora["memory_ratio"] < 1  # on this tiny batch the model's gradients and AdamW state dominate
    # TRL trained the same adapters from the same start: the same gradient
    assert out["grad_norm_rel_diff"] < 1e-3


@pytest.mark.slow
@pytest.mark.sandbox
def test_bench_async_json(tmp_path):
    """The CI smoke of the async benchmark: 2 small steps, synchronous then asynchronous."""
    out = _bench(
        "async",
        ["--out", str(tmp_path), "--set", "steps=2", "--set", "tasks_per_step=2", "--set", "group_size=2"],
    )
    assert out["steps"] == 2 and out["max_staleness"] == 1 and out["dropped_stale"] == 0
    assert out["async_speedup"] == pytest.approx(out["sync_wall_s"] / out["async_wall_s"], rel=1e-2)
    assert sum(out["lag_histogram"].values()) > 0 and set(out["lag_histogram"]) <= {"0", "1"}
    sync_cfg = json.loads((tmp_path / "sync" / "config.json").read_text())
    async_cfg = json.loads((tmp_path / "async" / "config.json").read_text())
    assert sync_cfg["max_staleness"] is None and async_cfg["max_staleness"] == 1
    assert {k: v for k, v in sync_cfg.items() if k not in ("run_dir", "max_staleness")} == {
        k: v for k, v in async_cfg.items() if k not in ("run_dir", "max_staleness")
    }


@pytest.mark.slow
@pytest.mark.ray
def test_bench_scale_json(tmp_path):
    """The CI smoke of the scale benchmark: 1 and 4 simulated workers on a local Ray cluster."""
    out = _bench(
        "scale",
        ["--out", str(tmp_path), "--workers", "1", "--workers", "4", "--window", "1.5", "--processes", "2"],
    )
    assert out["workers"] == [1, 4] and out["processes"] == 2 and out["engine"] == "zero-cost"
    for key in ("rollouts_per_s", "gateway_calls_per_s", "rollout_p50_ms", "coordinator_cpu_ms_per_rollout"):
        assert set(out[key]) == {"1", "4"} and all(v > 0 for v in out[key].values()), key
    assert out["gateway_calls_per_s"]["1"] == pytest.approx(4 * out["rollouts_per_s"]["1"], rel=0.01)
    assert out["saturates_at_workers"] in (None, 4)
    # every simulated rollout is on the coordinator's disk, with its samples
    from legorl.store import open_run

    stored = list(open_run(tmp_path / "run").iter_rollouts())
    assert stored and all(r.samples for r in stored)


@pytest.mark.slow
@pytest.mark.sandbox
def test_bench_learn_json(tmp_path):
    """The CI smoke of the learning benchmark: 2 steps of both runs, a tiny held-out evaluation."""
    out = _bench(
        "learn",
        [
            "--out",
            str(tmp_path),
            "--set",
            "steps=2",
            "--set",
            "tasks_per_step=1",
            "--set",
            "group_size=2",
            "--set",
            "eval.samples=2",
            "--set",
            'eval.task_ids=["legorl__oneline-heldout-001", "legorl__oneline-heldout-002"]',
        ],
    )
    assert out["steps"] == 2 and [s for s, _ in out["reward_curve"]] == [0, 1]
    assert out["heldout_samples_before"] == out["heldout_samples_after"] == 4
    assert out["heldout_diff"] == pytest.approx(out["heldout_after"] - out["heldout_before"])
    assert 0.0 <= out["p_value"] <= 1.0 and 0.0 <= out["control_after"] <= 1.0
    assert 0.0 <= out["solved_among_valid_p_value"] <= 1.0
    assert (tmp_path / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    control = json.loads((tmp_path / "control" / "config.json").read_text())
    assert control["trainer"]["flip_advantages"] is True and control["eval"]["before"] is False
    for arm, phases in (("policy", ("before", "after")), ("control", ("after",))):
        for phase in phases:
            assert (tmp_path / arm / "eval" / f"{phase}.json").is_file()
    assert json.loads((tmp_path / "bench_learn.json").read_text())["steps"] == 2


@pytest.mark.slow
@pytest.mark.sandbox
def test_bench_learn_through_a_harness_json(tmp_path):
    """The CI smoke of learning through a harness: the pre-flight, 2 steps of the policy run through
    the minimal harness on the multi-turn family, per-harness statistics; then a rerun resumes."""
    args = [
        "--harness",
        "minimal",
        "--no-control",
        "--out",
        str(tmp_path),
        *("--set", "steps=2", "--set", "tasks_per_step=1", "--set", "group_size=2"),
        *("--set", "rollout.max_turns=2", "--set", "rollout.max_tokens_per_turn=24"),  # decoding is the cost
        *("--set", "eval.samples=1", "--set", 'eval.task_ids=["legorl__multiturn-heldout-001"]'),
    ]
    out = _bench("learn", args)
    assert out["harness"] == "minimal" and out["fits_context"] is True
    assert 0 < out["first_prompt_tokens"] < out["model_context"]
    assert out["rollouts"] == 2 * 2 + 2  # training rollouts and the two evaluations
    assert out["mean_turns"] >= 1 and 0.0 <= out["multi_sample_share"] <= 1.0
    assert out["alignment"].get("start", 0) >= out["valid"] and 0.0 <= out["env_failure_rate"] <= 1.0
    # a second run finds the arm done and reports the same figures
    again = _bench("learn", args)
    assert again["heldout_after"] == out["heldout_after"] and again["rollouts"] == out["rollouts"]


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.swebench_data
def test_bench_swebench_json(tmp_path):
    one = ["--suite", "swebench-verified", "--instances", "sympy__sympy-12096"]
    first = _bench("swebench", [*one, "--report", str(tmp_path / "a.jsonl")])
    assert first["instances"] == 1 and first["validated"] == 1, first["failed"]
    # a second check of the same instance builds no environment
    second = _bench("swebench", [*one, "--report", str(tmp_path / "b.jsonl")])
    assert second["env_layers_built"] == 0 and second["env_cache_hit_rate"] == 1.0
    assert second["env_layers"]["sympy/sympy@1.0"]["bytes"] > 0
