"""SGLang's own HTTP contract, for testing our SGLang adapter where SGLang cannot run (this CPU).

SGLang ships its JSON API as generated msgspec types (``sglang/api/v1/api_types.py``; the Python
server refuses a ``/generate`` body that ``GenerateRequest.from_json_value`` rejects). That one file
needs only ``msgspec``: it is taken from the pinned SGLang wheel (downloaded from PyPI once, no
dependencies, cached under ``$LEGORL_HOME/cache``), so the adapter's requests are checked, and the
answers the tests give it are built, by SGLang's own schema rather than by our reading of it."""

from __future__ import annotations

import fcntl
import importlib.util
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from types import ModuleType

from needs import unavailable

from legorl.settings import legorl_home

SGLANG_VERSION = "0.5.23"
MEMBER = "sglang/api/v1/api_types.py"

_MODULE: ModuleType | None = None


def api_types() -> ModuleType:
    """The ``sglang.api.v1.api_types`` module of :data:`SGLANG_VERSION`."""
    global _MODULE
    if _MODULE is None:
        path = _fetch()
        spec = importlib.util.spec_from_file_location("sglang_api_types", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # msgspec resolves the annotations through the module
        spec.loader.exec_module(module)
        _MODULE = module
    return _MODULE


def _fetch() -> Path:
    cache = legorl_home() / "cache" / f"sglang-{SGLANG_VERSION}"
    target = cache / "api_types.py"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if target.is_file():
            return target
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={SGLANG_VERSION}", "-d", tmp],
                capture_output=True,
                text=True,
                timeout=600,
            )
            wheels = list(Path(tmp).glob("sglang-*.whl"))
            if p.returncode != 0 or not wheels:
                unavailable(f"cannot download sglang=={SGLANG_VERSION} from the package index: {p.stderr[-500:]}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                text = wheel.read(MEMBER)
        partial = target.with_suffix(".part")
        partial.write_bytes(text)
        partial.rename(target)
    return target
