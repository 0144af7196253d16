"""Checkpoints: exact resume, atomic writes, Hugging Face export (tiny random Llama)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from scored_samples import scored_sample
from tiny_llama import tiny_llama
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from legorl.config import TrainerConfig
from legorl.training import checkpoint as ck
from legorl.training.trainer import Trainer


def _model(seed: int) -> LlamaForCausalLM:
    return tiny_llama(53, max_positions=128, seed=seed)


def _samples(model, n=4):
    g = torch.Generator().manual_seed(3)
    return [
        scored_sample(model, f"r{i}", torch.randint(0, 53, (10 + i,), generator=g).tolist(), 2, (-1.0) ** i, reward=0.0)
        for i in range(n)
    ]


def _weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_resume_gives_the_same_next_step_as_an_uninterrupted_run(tmp_path):
    cfg = TrainerConfig(lr=1e-3, ppo_epochs=2, minibatch_size=2, lr_warmup_steps=2)
    a = Trainer(_model(0), cfg, total_steps=4, seed=7)
    data = _samples(a.model)
    a.step(data)
    # through the methods the loop calls (legorl.training.interface.LoopTrainer)
    path = a.save_checkpoint(ck.CheckpointRequest(tmp_path, 0, {"next_step": 1}, metrics={"train/loss": 0.5}))
    expected_rand = torch.rand(3)
    ref = a.step(data)  # the uninterrupted run's next step

    b = Trainer(_model(1), cfg, total_steps=4, seed=7)  # other weights: everything must come from disk
    meta = b.load_checkpoint(ck.latest_checkpoint(tmp_path))
    assert meta["loop"] == {"next_step": 1} and meta["metrics"]["train/loss"] == 0.5 and meta["step"] == 0
    assert torch.equal(torch.rand(3), expected_rand)  # the RNG continues where it was
    got = b.step(data)
    assert got["train/loss"] == ref["train/loss"] and got["train/lr"] == ref["train/lr"]
    assert torch.equal(_weights(a.model), _weights(b.model))
    assert b.version == a.version == 2
    assert path.name == "step-000000" and (tmp_path / "checkpoints" / "latest").read_text() == "step-000000"


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    t = Trainer(_model(0), TrainerConfig(lr=1e-3))
    ck.save_checkpoint(tmp_path, 0, t, {"next_step": 1})
    real_replace = os.replace

    def crash(src, dst):
        if str(dst).endswith("step-000001"):
            raise KeyboardInterrupt("killed before the rename")
        return real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(tmp_path, 1, t, {"next_step": 2})
    monkeypatch.setattr(ck.os, "replace", real_replace)
    (tmp_path / "checkpoints" / "step-000002").mkdir()  # a directory without meta.json is never chosen
    latest = ck.latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step-000000"
    assert ck.load_checkpoint(latest, Trainer(_model(1), TrainerConfig(lr=1e-3)))["loop"] == {"next_step": 1}


def test_export_to_a_hugging_face_directory(tmp_path):
    base = tmp_path / "base"
    _model(0).save_pretrained(base)
    t = Trainer(_model(0), TrainerConfig(lr=1e-2))
    t.step(_samples(t.model))
    path = ck.save_checkpoint(tmp_path / "run", 0, t, {}, base_model=str(base))
    out = ck.export_hf(path, tmp_path / "hf")
    assert (out / "model.safetensors").is_file() and json.loads((out / "config.json").read_text())["vocab_size"] == 53
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(_weights(loaded), _weights(t.model))
    assert not torch.equal(_weights(loaded), _weights(_model(0)))
