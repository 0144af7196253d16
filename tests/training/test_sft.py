"""`legorl sft` (legorl.training.sft) on trajectories recorded for real: the scripted gold and wrong
policies through the minimal harness, gateway, bubblewrap sandbox and grader. A tiny random Llama
over SmolLM2's vocabulary learns them (the real model is not the point here).

Proved: the loss is the NLL of the sampled tokens only (the prompt's and tool outputs' logprobs get
exactly zero gradient, and the step's gradient equals an independent computation of that loss but
not of the all-token one); only resolved, unflagged rollouts are selected and held-out tasks are
refused; the fine-tune is deterministic given its seed and lowers the loss; its output is a run
directory that `legorl eval --checkpoint` and `legorl train --resume` accept, RL starting from the
fine-tuned weights.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_llama import tiny_llama

from legorl.config import RunConfig, SFTConfig
from legorl.errors import ConfigError
from legorl.loop.single import rollout_once, single_rollout_config
from legorl.models.registry import resolve_model
from legorl.store import open_run
from legorl.training.checkpoint import latest_checkpoint
from legorl.training.logprobs import compute_token_logprobs
from legorl.training.sft import masked_nll, select_samples, sequence_logprobs, sft_backward, sft_train

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

VOCAB = 49152  # SmolLM2's tokenizer, which recorded the samples
GOLD = ("legorl__trivial-001", "legorl__trivial-002")
WRONG = "legorl__trivial-003"


def _model(seed: int = 0):
    return tiny_llama(VOCAB, max_positions=8192, seed=seed)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A run directory with two resolved rollouts (scripted gold) and one failed one (scripted wrong)."""
    run = tmp_path_factory.mktemp("recorded") / "run"
    for task, engine in [(GOLD[0], "scripted-gold"), (GOLD[1], "scripted-gold"), (WRONG, "scripted-wrong")]:
        cfg = single_rollout_config(None, {"rollout.harness": "minimal", "run_dir": str(run)}, engine=engine)
        single = asyncio.run(rollout_once(cfg, task, engine=engine))
        assert single.rollout.status == "ok", single.summary()
        assert single.rollout.reward == (1.0 if engine == "scripted-gold" else 0.0), single.summary()
    return run


@pytest.fixture(scope="module")
def samples(recorded):
    got, _ = select_samples([recorded])
    return got


def test_only_resolved_unflagged_rollouts_are_selected(recorded):
    got, (source,) = select_samples([recorded])
    store = open_run(recorded)
    by_id = {r.rollout_id: r for r in store.iter_rollouts()}
    assert sorted(by_id[i].task_id for i in source.rollouts) == sorted(GOLD)
    assert source.skipped == {"reward < 1": 1}
    # the run store's own samples, token for token
    expected = [s for i in source.rollouts for s in store.samples(i) if s.num_sampled]
    assert [s.token_ids for s in got] == [s.token_ids for s in expected]
    assert [s.loss_mask for s in got] == [s.loss_mask for s in expected]
    # a lower bar takes the failed rollout too
    assert len(select_samples([recorded], min_reward=0.0)[1][0].rollouts) == 3
    with pytest.raises(ConfigError, match="held-out task legorl__trivial-002"):
        select_samples([recorded], exclude_tasks={GOLD[1]})


def test_prompt_tokens_carry_no_gradient(samples):
    model = _model()
    cfg = SFTConfig()
    prompt_tokens = sum(len(s.loss_mask) - s.num_sampled for s in samples)
    assert prompt_tokens > 0 and all(s.num_sampled > 0 for s in samples)
    lps = sequence_logprobs(model, samples, cfg)
    for lp in lps:
        lp.retain_grad()
    masked_nll(lps, samples).backward()
    for lp, s in zip(lps, samples):
        mask = torch.tensor(s.loss_mask, dtype=torch.bool)
        assert lp.grad is not None
        assert torch.count_nonzero(lp.grad[~mask]) == 0  # prompt, tool output, template: exactly zero
        assert torch.equal(lp.grad[mask], torch.full((s.num_sampled,), -1.0))  # each sampled token once


def _reference_grad(samples, only_sampled: bool) -> torch.Tensor:
    """The mean NLL gradient computed independently: the model's own logits, one sample at a time."""
    model = _model()
    n = sum(s.num_sampled if only_sampled else len(s.token_ids) - 1 for s in samples)
    for s in samples:
        ids = torch.tensor(s.token_ids)[None]
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
        token_lp = logp.gather(-1, ids[0, 1:, None])[:, 0]
        keep = torch.tensor(s.loss_mask[1:], dtype=torch.bool) if only_sampled else torch.ones_like(token_lp).bool()
        (-token_lp[keep].sum() / n).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_the_step_gradient_is_the_sampled_tokens_nll_and_not_the_all_token_one(samples):
    model = _model()
    loss, fed = sft_backward(model, samples, SFTConfig(forward_tokens=1))  # one sample per pass: accumulation too
    got = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert fed == sum(len(s.token_ids) for s in samples) and loss > 0
    want = _reference_grad(samples, only_sampled=True)
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-4)
    everything = _reference_grad(samples, only_sampled=False)
    assert not torch.allclose(got, everything, atol=1e-6, rtol=1e-4)  # the test can tell the two apart
    # the reported loss is the mean NLL of the sampled tokens
    with torch.no_grad():
        base = _model()
        nll = -sum(
            float(compute_token_logprobs(base, s.token_ids)[torch.tensor(s.loss_mask).bool()].sum()) for s in samples
        )
    assert loss == pytest.approx(nll / sum(s.num_sampled for s in samples), rel=1e-5)


def test_fine_tuning_is_deterministic_and_lowers_the_loss(samples):
    cfg = SFTConfig(lr=1e-2, epochs=4, batch_samples=1, seed=5)
    a, b = _model(), _model()
    losses_a, steps, _ = sft_train(a, samples, cfg)
    losses_b, _, _ = sft_train(b, samples, cfg)
    assert steps == 4 * len(samples)
    assert losses_a == losses_b and torch.equal(_weights(a), _weights(b))
    assert all(x > y for x, y in zip(losses_a, losses_a[1:])) and losses_a[-1] < losses_a[0] * 0.8, losses_a
    c = _model()
    sft_train(c, samples, cfg.model_copy(update={"seed": 6}))  # another order, other weights
    assert not torch.equal(_weights(a), _weights(c))


def _tiny_model_dir(path: Path) -> Path:
    """The tiny Llama as a Hugging Face directory with SmolLM2's tokenizer and chat template."""
    _model().save_pretrained(path)
    for f in resolve_model("smollm2-135m").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy2(f, path / f.name)
    return path


def _cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "legorl.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_sft_command_writes_a_run_that_eval_and_train_resume_accept(recorded, samples, tmp_path):
    model_dir = _tiny_model_dir(tmp_path / "tiny")
    out = tmp_path / "rl"
    config = tmp_path / "rl.json"
    cfg = RunConfig.load(
        None,
        run_dir=str(tmp_path / "elsewhere"),
        suite="trivial",
        task_ids=[GOLD[0]],
        steps=1,
        tasks_per_step=1,
        group_size=2,
        **{
            "engine.model": str(model_dir),
            "rollout.harness": "minimal",
            "rollout.max_turns": 1,
            "rollout.max_tokens_per_turn": 8,
            "sft.lr": 3e-3,
            "sft.batch_samples": 1,
        },
    )
    config.write_text(cfg.model_dump_json())

    # a field given with --set holds when its own option (--epochs) is left out
    res = _cli("sft", str(recorded), "--out", str(out), "--config", str(config), "--set", "sft.epochs=2")
    assert res.returncode == 0, res.stderr
    assert f"sft: step {2 * len(samples)}/{2 * len(samples)}, loss" in res.stderr  # progress, not a terminal
    report = json.loads((out / "sft.json").read_text())
    assert report["samples"] == len(samples) and report["optimizer_steps"] == 2 * len(samples)
    assert report["epoch_loss"][1] < report["epoch_loss"][0]
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and ckpt.name == "step--00001"
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["step"] == -1 and meta["loop"]["next_step"] == 0 and meta["trainer"] == {"version": 0, "step_index": 0}
    assert RunConfig.load(out / "config.json").run_dir == out
    # the checkpoint's weights are the fine-tuned ones: export them and compare with an in-process fine-tune
    exported = tmp_path / "hf"
    assert _cli("export-hf", str(out), "--out", str(exported)).returncode == 0
    from legorl.models.registry import load_model

    tuned, same = load_model(exported), _model()
    sft_train(same, samples, cfg.sft.model_copy(update={"epochs": 2}))
    # another process (another thread count): equal up to float reduction order, which Adam's
    # normalised steps carry into the weights; that noise is far below what the fine-tune moved
    noise = float((_weights(tuned) - _weights(same)).abs().max())
    moved = float((_weights(tuned) - _weights(_model())).abs().max())
    assert noise < 1e-4 and moved > 100 * noise, (noise, moved)
    # nothing can be written over it
    again = _cli("sft", str(recorded), "--out", str(out), "--config", str(config))
    assert again.returncode == 2 and "already holds a run" in again.stderr

    # legorl eval --checkpoint: the SFT checkpoint, exported and served by the embedded engine
    res = _cli(
        "eval", "--config", str(config), "--checkpoint", str(out), "-n", "1", "--json",
        "--set", f"run_dir={tmp_path / 'eval'}",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    ev = json.loads(res.stdout)
    assert ev["meta"]["checkpoint"] == str(ckpt) and ev["samples"] + ev["env_failures"] == 1

    # legorl train --resume: RL step 0 starts from the fine-tuned weights
    res = _cli("train", "--resume", str(out))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (out / "manifest-resume-000000.json").is_file()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]
    after = latest_checkpoint(out)
    assert after is not None and after.name == "step-000000"
    # the engine sampled step 0's rollouts from the SFT weights: their logprobs are the tuned model's
    store = open_run(out)
    rl = [s for r in store.iter_rollouts() for s in r.samples]
    assert rl
    for s in rl:
        mask = torch.tensor(s.loss_mask).bool()
        rollout_lp = torch.tensor(s.rollout_logprobs)[mask]
        tuned_lp = compute_token_logprobs(tuned, s.token_ids, temperature=cfg.rollout.temperature)[mask]
        base_lp = compute_token_logprobs(_model(), s.token_ids, temperature=cfg.rollout.temperature)[mask]
        assert torch.allclose(rollout_lp, tuned_lp, atol=1e-3)
        assert not torch.allclose(rollout_lp, base_lp, atol=1e-3)
