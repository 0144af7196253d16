"""Embedded engine on the real SmolLM2-135M (fp32, CPU)."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from tiny_llama import tiny_llama

from legorl.engines.base import Engine, SamplingParams
from legorl.engines.embedded import EmbeddedEngine, sample_token
from legorl.errors import (
    ContextLengthError,
    EngineError,
    EngineOverloadedError,
    InvalidRequestError,
)
from legorl.training.logprobs import compute_token_logprobs

pytestmark = pytest.mark.slow

QUESTIONS = [
    "Write a python function that adds two numbers.",
    "What is 2+2?",
    "Explain recursion briefly.",
    "Fix this bug: def add(a, b): return a - b",
]


@pytest.fixture(scope="module")
def engine():
    eng = EmbeddedEngine.from_pretrained("smollm2-135m", max_batch_size=16)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def noeos(engine):
    """A second engine on the same weights: eos ignored, small context (cheap overflow tests)."""
    eng = EmbeddedEngine(engine.model, engine.tokenizer, model_name="noeos", max_context=96, eos_token_ids=())
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def prompts(engine):
    tok = engine.tokenizer
    return [
        list(
            tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)[
                "input_ids"
            ]
        )
        for q in QUESTIONS
    ]


def test_protocol(engine):
    assert isinstance(engine, Engine)
    assert engine.max_context == 8192
    h = engine.health()
    assert h.ok and h.model == "smollm2-135m"


async def test_fidelity_concurrent_logprobs_match_recompute(engine, prompts):
    reqs = [(prompts[i % len(prompts)], 8 + (i * 29) % 89) for i in range(32)]  # max_tokens 8..96
    t = time.perf_counter()
    results = await asyncio.gather(
        *[
            engine.generate(p, SamplingParams(max_tokens=m, temperature=1.0, top_p=1.0, seed=1000 + i))
            for i, (p, m) in enumerate(reqs)
        ]
    )
    gen_s = time.perf_counter() - t
    a, b = [], []
    with torch.no_grad():
        for (p, m), r in zip(reqs, results):
            assert 1 <= len(r.token_ids) <= m and len(r.logprobs) == len(r.token_ids)
            assert r.finish_reason in ("stop", "length")
            lp = compute_token_logprobs(engine.model, p + r.token_ids)
            a += r.logprobs
            b += lp[len(p) :].tolist()
    a_t, b_t = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    pearson = torch.corrcoef(torch.stack([a_t, b_t]))[0, 1].item()
    maxd = (a_t - b_t).abs().max().item()
    print(
        f"\nfidelity: {len(a)} tokens in {gen_s:.1f}s, pearson={pearson:.7f} max|d|={maxd:.2e} mean|d|={(a_t - b_t).abs().mean():.2e}"
    )
    assert pearson >= 0.9999
    assert maxd <= 1e-3


async def test_seed_reproducible_alone_and_in_batch(engine, prompts):
    sp = SamplingParams(max_tokens=20, temperature=1.0, seed=42)
    alone = await engine.generate(prompts[0], sp)
    again = await engine.generate(prompts[0], sp)
    others = [engine.generate(prompts[i % 4], SamplingParams(max_tokens=30, seed=i)) for i in range(1, 6)]
    batched, *_ = await asyncio.gather(engine.generate(prompts[0], sp), *others)
    assert alone.token_ids == again.token_ids == batched.token_ids
    assert max(abs(x - y) for x, y in zip(alone.logprobs, batched.logprobs)) < 1e-4
    other_seed = await engine.generate(prompts[0], SamplingParams(max_tokens=20, temperature=1.0, seed=43))
    assert other_seed.token_ids != alone.token_ids


def test_sample_token_filters():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    g = torch.Generator().manual_seed(0)
    toks = {sample_token(logits, 1.0, top_k=2, generator=g)[0] for _ in range(200)}
    assert toks == {0, 1}
    tok, lp = sample_token(logits, 1.0, top_k=1, generator=g)
    assert tok == 0 and lp == pytest.approx(0.0)
    # top_p: p(0)=0.644, p(0)+p(1)=0.881 -> top_p 0.7 keeps {0, 1}
    toks = {sample_token(logits, 1.0, top_p=0.7, generator=g)[0] for _ in range(200)}
    assert toks == {0, 1}
    _, lp = sample_token(logits, 1.0, top_p=0.7, generator=torch.Generator().manual_seed(1))
    kept = torch.log_softmax(torch.tensor([3.0, 2.0]), -1)
    assert any(abs(lp - float(k)) < 1e-6 for k in kept)
    tok, lp = sample_token(logits, 0.0)  # greedy: logprob of the unscaled distribution
    assert tok == 0 and lp == pytest.approx(float(torch.log_softmax(logits, -1)[0]), abs=1e-6)
    _, lp = sample_token(logits, 0.5, generator=torch.Generator().manual_seed(3))
    assert any(abs(lp - float(x)) < 1e-5 for x in torch.log_softmax(logits / 0.5, -1))


async def test_prefix_cache_hit_matches_cold(engine, prompts):
    first = await engine.generate(prompts[1], SamplingParams(max_tokens=16, seed=5))
    follow = prompts[1] + first.token_ids + prompts[2][3:]  # a multi-turn style continuation
    sp = SamplingParams(max_tokens=24, seed=6)
    warm = await engine.generate(follow, sp)
    assert warm.cached_prompt_tokens >= len(prompts[1])
    engine.clear_prefix_cache()
    cold = await engine.generate(follow, sp)
    assert cold.cached_prompt_tokens == 0
    assert warm.token_ids == cold.token_ids
    assert max(abs(x - y) for x, y in zip(warm.logprobs, cold.logprobs)) <= 1e-4


async def test_stop_tokens_and_length(engine, prompts):
    greedy = await engine.generate(prompts[0], SamplingParams(max_tokens=12, temperature=0))
    assert greedy.finish_reason == "length" and len(greedy.token_ids) == 12
    stop = greedy.token_ids[5]
    first = greedy.token_ids.index(stop)
    r = await engine.generate(prompts[0], SamplingParams(max_tokens=12, temperature=0, stop_token_ids=(stop,)))
    assert r.finish_reason == "stop"
    assert r.token_ids == greedy.token_ids[: first + 1]  # the stop token is included
    # eos stops too
    eos = engine.tokenizer.eos_token_id
    r = await engine.generate(prompts[1], SamplingParams(max_tokens=200, temperature=0))
    assert r.finish_reason == "stop" and r.token_ids[-1] == eos


async def test_context_overflow(noeos):
    with pytest.raises(ContextLengthError, match="96"):
        await noeos.generate(list(range(100, 196)), SamplingParams(max_tokens=1))
    r = await noeos.generate(list(range(100, 190)), SamplingParams(max_tokens=50, seed=1))
    assert r.finish_reason == "length" and len(r.token_ids) == 6  # capped to what fits


async def test_invalid_requests_fail_only_the_caller(engine, noeos, prompts, monkeypatch):
    valid = asyncio.create_task(engine.generate(prompts[0], SamplingParams(max_tokens=16, seed=1)))
    await asyncio.sleep(0.05)
    with pytest.raises(InvalidRequestError, match="out of vocabulary"):
        await engine.generate([1, 2, engine.vocab_size], SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError, match="out of vocabulary"):
        await engine.generate([-1], SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError, match="empty prompt"):
        await engine.generate([], SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError):
        await engine.generate([1, 2.5], SamplingParams(max_tokens=4))
    with pytest.raises(InvalidRequestError):
        SamplingParams(top_p=0)
    r = await valid
    assert len(r.token_ids) >= 1

    # an exception inside the worker for one request fails only that request
    orig = noeos._prefill

    def flaky(req, *kv_rows):
        if req.prompt[0] == 999:
            raise RuntimeError("boom")
        return orig(req, *kv_rows)

    monkeypatch.setattr(noeos, "_prefill", flaky)
    good = noeos.generate([5, 6, 7], SamplingParams(max_tokens=8, seed=1))
    bad = noeos.generate([999, 6, 7], SamplingParams(max_tokens=8, seed=1))
    res = await asyncio.gather(good, bad, return_exceptions=True)
    assert len(res[0].token_ids) == 8
    assert isinstance(res[1], EngineError) and "boom" in str(res[1])
    assert noeos.health().ok


async def test_cancellation_frees_the_slot(noeos):
    task = asyncio.create_task(noeos.generate([5, 6, 7], SamplingParams(max_tokens=80, seed=1)))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if noeos.stats["decode_steps"] and noeos._rows:
            break
    assert noeos.health().active_requests == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(300):
        if noeos.health().active_requests == 0:
            break
        await asyncio.sleep(0.01)
    assert noeos.health().active_requests == 0
    r = await noeos.generate([5, 6, 7], SamplingParams(max_tokens=3, seed=1))
    assert len(r.token_ids) == 3


async def test_update_weights(engine, prompts):
    sp = SamplingParams(max_tokens=10, temperature=0)
    before = await engine.generate(prompts[0], sp)
    await engine.generate(prompts[0], sp)  # fills the prefix cache
    assert engine._prefix.total > 0
    name = "model.layers.0.mlp.down_proj.weight"
    orig = dict(engine.model.named_parameters())[name].detach().clone()
    v0 = engine.weight_version
    try:
        g = torch.Generator().manual_seed(0)
        v1 = await engine.update_weights({name: orig + 0.5 * torch.randn(orig.shape, generator=g)})
        assert v1 == v0 + 1 == engine.weight_version
        assert engine._prefix.total == 0
        after = await engine.generate(prompts[0], sp)
        assert after.weight_version == v1 and after.cached_prompt_tokens == 0
        assert (
            after.token_ids != before.token_ids
            or max(abs(x - y) for x, y in zip(after.logprobs, before.logprobs)) > 1e-3
        )
        with pytest.raises(EngineError, match="unknown parameter"):
            await engine.update_weights({"nope": orig})
    finally:
        v2 = await engine.update_weights({name: orig}, version=v0 + 10)
    assert v2 == v0 + 10
    restored = await engine.generate(prompts[0], sp)
    assert restored.token_ids == before.token_ids


async def test_close_fails_pending():

    eng = _tiny_engine(max_positions=4096, max_batch_size=2)
    tasks = [asyncio.create_task(eng.generate([1, 2, 3], SamplingParams(max_tokens=3000, seed=i))) for i in range(4)]
    await asyncio.sleep(0.2)
    await eng.close()
    res = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, EngineOverloadedError) for r in res), res
    assert not eng.health().ok
    with pytest.raises(EngineOverloadedError):
        await eng.generate([1, 2], SamplingParams(max_tokens=2))


def _tiny_engine(max_positions: int = 1024, **kwargs) -> EmbeddedEngine:
    """An engine on a random 2-layer Llama, sharing nothing with the module fixture; eos ignored."""
    return EmbeddedEngine(
        tiny_llama(64, max_positions=max_positions), None, model_name="tiny", eos_token_ids=(), **kwargs
    )


async def test_a_colocated_trainer_changes_the_served_weights_while_generation_waits():
    from legorl.engines.base import ColocatedEngine

    eng = _tiny_engine()
    try:
        assert isinstance(eng, ColocatedEngine)
        module = eng.served_module()
        assert module is eng.model
        sp = SamplingParams(max_tokens=6, temperature=1.0, seed=3)
        before = await eng.generate([1, 2, 3, 4], sp)
        assert eng._prefix.total > 0
        pause = eng.paused()
        await asyncio.to_thread(pause.__enter__)  # entered off the event loop, as the training loop does
        try:
            assert eng._prefix.total == 0  # KV of the old weights is gone
            waiting = asyncio.create_task(eng.generate([1, 2, 3, 4], sp))
            await asyncio.sleep(0.3)
            assert not waiting.done()  # nothing runs while the weights change
            with torch.no_grad():
                for p in module.parameters():
                    p.add_(0.05 * torch.randn_like(p))
        finally:
            await asyncio.to_thread(pause.__exit__, None, None, None)
        during = await waiting
        # the sync: the engine's own tensors, so nothing is copied and the version moves
        version = await eng.update_weights({k: v.detach() for k, v in module.state_dict().items()})
        after = await eng.generate([1, 2, 3, 4], sp)
        assert version == after.weight_version == before.weight_version + 1
        assert during.token_ids == after.token_ids and during.logprobs == pytest.approx(after.logprobs)
        assert max(abs(x - y) for x, y in zip(after.logprobs, before.logprobs)) > 1e-4
        # and the engine samples from the changed weights: its logprobs are the module's
        lp = compute_token_logprobs(module, [1, 2, 3, 4, *after.token_ids])[4:]
        assert after.logprobs == pytest.approx(lp.tolist(), abs=1e-4)
    finally:
        eng.shutdown()


def test_kv_capacity_never_exceeds_what_the_rows_can_still_generate():
    from legorl.engines.embedded import _capacity

    assert _capacity(400, [31, 22]) == 400 + 31  # short answers: no half-width headroom
    assert _capacity(400, [4095]) == 400 + 200  # long ones grow geometrically
    assert _capacity(10, [1000]) == 10 + 64
    assert _capacity(10, [0]) == 11  # done rows still get one column
