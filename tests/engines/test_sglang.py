"""The SGLang adapter against SGLang's own HTTP contract (SGLang has no CPU build: the real server
runs in ``scripts/gpu_check.sh``).

The server here is a test double at the transport: every request the adapter sends is decoded by
SGLang's generated contract types (``GenerateRequest``, ``SamplingParams`` with unknown keys
refused, ``AbortRequest``) and every answer is encoded by them (``GenerateResponse``), so a field we
misname or a shape we misread fails here. The control routes that the contract file does not cover
(pause, weights, version) are checked against the fields of SGLang 0.5's ``io_struct``."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from sglang_contract import api_types

from legorl.config import EngineConfig
from legorl.engines.base import Engine, SamplingParams
from legorl.engines.sglang import SGLangEngine, SGLangServer
from legorl.errors import ConfigError, ContextLengthError, EngineError, EngineOverloadedError
from legorl.loop.stack import load_engine
from legorl.models.registry import resolve_model

URL = "http://sglang.test"
# the fields of SGLang 0.5's control requests (sglang/srt/managers/io_struct.py), besides `rid`
PAUSE_FIELDS = {"mode"}
CONTINUE_FIELDS = {"torch_empty_cache"}
UPDATE_FROM_DISK_FIELDS = {
    "model_path",
    "load_format",
    "abort_all_requests",
    "weight_version",
    "is_async",
    "torch_empty_cache",
    "keep_pause",
    "recapture_cuda_graph",
    "token_step",
    "flush_cache",
    "manifest",
}
UPDATE_VERSION_FIELDS = {"new_version", "abort_all_requests"}


class SGLangDouble:
    """Answers as an SGLang 0.5 server does; ``script`` says what each ``/generate`` gets."""

    def __init__(self) -> None:
        self.api = api_types()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.script: list[Callable[[dict[str, Any]], httpx.Response]] = []
        self.version = "default"
        self.fail_update = False

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        path = request.url.path
        self.requests.append((path, body))
        if path == "/generate":
            self.api.GenerateRequest.from_json_value(body)  # SGLang's contract gate
            self.api.SamplingParams.from_json_value(body["sampling_params"])  # unknown keys refused
            behave = self.script.pop(0) if self.script else answer([5, 6], [-0.5, -0.25])
            result = behave(body)
            if asyncio.iscoroutine(result):
                result = await result
            return result
        if path == "/abort_request":
            self.api.AbortRequest.from_json_value(body)
            return httpx.Response(200)
        fields = {
            "/pause_generation": PAUSE_FIELDS,
            "/continue_generation": CONTINUE_FIELDS,
            "/update_weights_from_disk": UPDATE_FROM_DISK_FIELDS,
            "/update_weight_version": UPDATE_VERSION_FIELDS,
        }.get(path)
        if fields is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        assert set(body) <= fields | {"rid"}, (path, body)
        if path == "/update_weights_from_disk":
            if self.fail_update:
                return httpx.Response(
                    400, json={"success": False, "message": "Failed to update weights: boom", "num_paused_requests": 0}
                )
            self.version = body["weight_version"]
            return httpx.Response(200, json={"success": True, "message": "Succeeded", "num_paused_requests": 0})
        if path == "/update_weight_version":
            self.version = body["new_version"]
            return httpx.Response(200, json={"success": True, "new_version": body["new_version"]})
        return httpx.Response(200, json={"message": "ok", "status": "ok"})

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]


def answer(
    tokens: list[int],
    logprobs: list[float],
    *,
    finish: dict[str, Any] | None = None,
    version: str | None = "default",
    spans: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
    sampling_logprobs: list[float] | None = None,
    cached: int = 0,
    logprob_ids: list[int] | None = None,
) -> Callable[[dict[str, Any]], httpx.Response]:
    """A finished generation encoded by SGLang's ``GenerateResponse``."""

    def respond(body: dict[str, Any]) -> httpx.Response:
        api = api_types()
        meta = api.GenerateMetaInfo(
            id=body["rid"],
            prompt_tokens=len(body["input_ids"]),
            completion_tokens=len(tokens),
            finish_reason=api.decode_FinishReason(finish or {"type": "length", "length": len(tokens)}),
            output_token_logprobs=[
                api.LogprobEntry(logprob=lp, token_id=t) for lp, t in zip(logprobs, logprob_ids or tokens, strict=True)
            ],
            cached_tokens=cached,
            weight_version=version,
            weight_versions=[api.WeightVersionSpan(version=v, start=s, end=e) for v, s, e in spans],
        )
        payload = api.GenerateResponse(text="", meta_info=meta, output_ids=tokens).to_json_value()
        if sampling_logprobs is not None:  # beside the contract's fields (tokenizer_manager adds it)
            payload["meta_info"]["output_token_sampling_logprobs"] = sampling_logprobs
            payload["meta_info"]["output_token_sampling_mask"] = [[t] for t in tokens]
        return httpx.Response(200, json=payload)

    return respond


def status(code: int, message: str = "busy") -> Callable[[dict[str, Any]], httpx.Response]:
    def respond(body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(code, json={"error": {"message": message, "type": "x", "code": code}})

    return respond


def make_engine(double: SGLangDouble, tmp_path: Path, **kwargs: Any) -> SGLangEngine:
    return SGLangEngine(
        kwargs.pop("urls", [URL]),
        model_name="smollm2-135m",
        tokenizer=None,
        max_context=2048,
        weights_dir=tmp_path / "weights",
        transport=double.transport(),
        backoff_s=0.01,
        **kwargs,
    )


def generate_bodies(double: SGLangDouble) -> list[dict[str, Any]]:
    return [b for p, b in double.requests if p == "/generate"]


async def test_tokens_logprobs_and_version_from_sglangs_answer(tmp_path):
    double = SGLangDouble()
    double.script = [answer([11, 12, 13], [-0.1, -0.2, -0.3], finish={"type": "stop", "matched": 13}, cached=4)]
    engine = make_engine(double, tmp_path)
    assert isinstance(engine, Engine)
    sampling = SamplingParams(max_tokens=8, temperature=0.7, seed=3, stop_token_ids=(13,))
    result = await engine.generate([1, 2, 3, 4, 5], sampling)
    assert result.token_ids == [11, 12, 13] and result.logprobs == [-0.1, -0.2, -0.3]
    assert result.finish_reason == "stop" and result.cached_prompt_tokens == 4
    assert result.weight_version == 0  # "default": the weights it loaded, ours until a sync
    (body,) = generate_bodies(double)
    assert body["input_ids"] == [1, 2, 3, 4, 5] and body["return_logprob"] is True and body["stream"] is False
    assert body["rid"].startswith("legorl-")
    assert body["sampling_params"] == {
        "max_new_tokens": 8,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": -1,
        "sampling_seed": 3,
        "stop_token_ids": [13],
    }
    assert "return_sampling_mask" not in body  # nothing truncates: SGLang's logprobs are the sampled ones
    await engine.close()


async def test_truncated_sampling_takes_the_sampling_distributions_logprobs(tmp_path):
    double = SGLangDouble()
    double.script = [answer([7, 8], [-2.0, -3.0], sampling_logprobs=[-0.4, -0.6])]
    engine = make_engine(double, tmp_path)
    result = await engine.generate([1, 2], SamplingParams(max_tokens=2, top_p=0.9, top_k=20))
    # top-p / top-k: SGLang's output_token_logprobs are before the cut; the selected behaviour
    # logprobs are under the distribution the token was drawn from
    assert result.logprobs == [-0.4, -0.6]
    (body,) = generate_bodies(double)
    assert body["return_sampling_mask"] is True and body["sampling_logprobs_mode"] == "selected"
    assert body["sampling_params"]["top_k"] == 20 and body["sampling_params"]["top_p"] == 0.9
    await engine.close()


@pytest.mark.parametrize(
    ("finish", "expected"),
    [({"type": "length", "length": 2}, "length"), ({"type": "abort", "message": "x"}, "cancelled"), (None, "stop")],
)
async def test_finish_reasons(tmp_path, finish, expected):
    double = SGLangDouble()
    double.script = [answer([7, 8], [-1.0, -1.0], finish=finish)]
    if finish is None:  # a finished generation always has one; an old server might omit it
        double.script = [lambda body: _without_finish(answer([7, 8], [-1.0, -1.0])(body))]
    engine = make_engine(double, tmp_path)
    assert (await engine.generate([1], SamplingParams(max_tokens=2))).finish_reason == expected
    await engine.close()


def _without_finish(response: httpx.Response) -> httpx.Response:
    payload = response.json()
    payload["meta_info"]["finish_reason"] = None
    return httpx.Response(200, json=payload)


async def test_logprobs_of_other_tokens_or_a_broken_shape_is_an_engine_error(tmp_path):
    double = SGLangDouble()
    double.script = [
        answer([7, 8], [-1.0, -1.0], logprob_ids=[7, 9]),
        lambda body: httpx.Response(200, json={"meta_info": {}}),
    ]
    engine = make_engine(double, tmp_path)
    with pytest.raises(EngineError, match="other tokens"):
        await engine.generate([1], SamplingParams(max_tokens=2))
    with pytest.raises(EngineError, match="unexpected shape"):
        await engine.generate([1], SamplingParams(max_tokens=2))
    await engine.close()


async def test_503_and_429_are_retried_400_is_not(tmp_path):
    double = SGLangDouble()
    double.script = [status(503), status(429), answer([9], [-0.5])]
    engine = make_engine(double, tmp_path)
    assert (await engine.generate([1, 2], SamplingParams(max_tokens=1))).token_ids == [9]
    assert engine.stats["retries"] == 2

    double.script = [status(429)] * 5
    with pytest.raises(EngineOverloadedError, match="overloaded after 5 tries"):
        await engine.generate([1, 2], SamplingParams(max_tokens=1))

    # SGLang's wording for a prompt beyond its context length
    too_long = "The input (5000 tokens) is longer than the model's context length (4096 tokens)."
    double.script = [status(400, too_long)]
    with pytest.raises(ContextLengthError):
        await engine.generate([1, 2], SamplingParams(max_tokens=1))
    assert len(double.script) == 0 and not engine.health().ok  # the failure shows until a success
    await engine.close()


async def test_a_cancelled_generation_is_aborted_by_its_rid(tmp_path):
    double = SGLangDouble()
    started = asyncio.Event()

    async def hang(body: dict[str, Any]) -> httpx.Response:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError("not reached")

    double.script = [hang]
    engine = make_engine(double, tmp_path)
    task = asyncio.ensure_future(engine.generate([1, 2, 3], SamplingParams(max_tokens=50)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rid = generate_bodies(double)[0]["rid"]
    assert ("/abort_request", {"rid": rid}) in double.requests
    assert engine.stats["aborts"] == 1
    await engine.close()


async def test_weight_sync_pauses_loads_a_model_directory_and_continues(tmp_path):
    double = SGLangDouble()
    model_dir = tmp_path / "model"  # the served model as sharded checkpoints come: its old weights must not follow
    shutil.copytree(resolve_model("smollm2-135m"), model_dir)
    (model_dir / "model.safetensors").rename(model_dir / "model-00001-of-00001.safetensors")
    (model_dir / "model.safetensors.index.json").write_text("{}")
    engine = make_engine(double, tmp_path, model_dir=model_dir)
    state = {"model.norm.weight": torch.full((576,), 1.5)}
    assert await engine.update_weights(state) == 1
    control = [(p, b) for p, b in double.requests if p != "/generate"]
    assert [p for p, _ in control] == ["/pause_generation", "/update_weights_from_disk", "/continue_generation"]
    assert control[0][1] == {"mode": "retract"}  # requests in flight are recomputed, not lost
    update = control[1][1]
    assert update["weight_version"] == "1" and update["abort_all_requests"] is False
    target = Path(update["model_path"])
    files = {f.name for f in target.iterdir()}
    assert {"config.json", "model.safetensors"} <= files  # a model directory with the new weights only
    assert not {"model-00001-of-00001.safetensors", "model.safetensors.index.json"} & files
    # a generation that began before the update and finished after it: the newest span's version
    double.script = [answer([3, 4], [-1.0, -1.0], version="1", spans=[("default", 0, 1), ("1", 1, 2)])]
    assert (await engine.generate([1], SamplingParams(max_tokens=2))).weight_version == 1

    double.fail_update = True
    with pytest.raises(EngineError, match="boom"):
        await engine.update_weights(state)
    assert double.paths()[-1] == "/continue_generation"  # never left paused
    assert engine.weight_version == 1
    await engine.set_version(7)
    assert double.requests[-1] == ("/update_weight_version", {"new_version": "7", "abort_all_requests": False})
    await engine.close()


def test_the_config_builds_an_sglang_engine_or_says_what_it_needs(tmp_path):
    engine, path = load_engine(EngineConfig(type="sglang", urls=["http://127.0.0.1:9"]))
    assert isinstance(engine, SGLangEngine) and engine.base_urls == ["http://127.0.0.1:9"]
    asyncio.run(engine.close())
    with pytest.raises(ConfigError, match="sglang_python"):
        load_engine(EngineConfig(type="sglang"))


def test_server_command_line(tmp_path):
    server = SGLangServer(model=tmp_path / "m", python=Path("/x/python"), log_path=tmp_path / "log", port=31000)
    argv = server.command()
    assert argv[:3] == ["/x/python", "-m", "sglang.launch_server"]
    assert "--skip-tokenizer-init" in argv  # token ids in and out
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "31000"
