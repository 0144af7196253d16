"""``legorl validate CONFIG``: check a run config before any GPU-hour or rollout is spent on it.

Each check gives one :class:`Check` — ``pass``, ``warn`` or ``fatal`` (``skip`` when an earlier fatal
makes it meaningless) — and every fatal says what to change. Structure checks read only the config,
the registries and files on disk (``--structure-only`` stops there); live checks run the real
components on a small scale:

structure: config schema; harness adapter and options; harness × wire dialect × tool format; model
files; context length vs turn and token budgets; group size and batch arithmetic; engine/trainer
dtype; executor topology (sandbox backend tools); suite and task ids.

live: gold patches resolve and empty patches do not (a sample of the suite, the real grader); the
sandbox has no network (no interface but ``lo``; a listener on the host unreachable); a canary
hack (a weakened test file) is flagged; the configured harness completes a scripted rollout
through the gateway; the chat template round-trips (render → parse of a tool call); the engine's
logprobs agree with the trainer's recompute on a probe.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from legorl.config import RunConfig

Level = str  # pass | warn | fatal | skip
# The program the command harness runs by default speaks OpenAI chat completions with native tool calls.
_TINY_AGENT = "legorl.harnesses.tiny_tool_agent"


@dataclass
class Check:
    name: str
    level: Level
    message: str
    fix: str = ""  # what to change (every fatal has one)
    live: bool = False
    seconds: float = 0.0

    def line(self) -> str:
        mark = {"pass": "PASS ", "warn": "WARN ", "fatal": "FATAL", "skip": "SKIP "}[self.level]
        return f"{mark} {self.name}: {self.message}" + (f" -> {self.fix}" if self.fix else "")


@dataclass
class Injected:
    """Components a test substitutes (fault injection): a sandbox backend, an engine."""

    backend: Any = None
    engine: Any = None


class Validator:
    def __init__(
        self,
        config: str | Path | RunConfig,
        overrides: dict[str, object] | None = None,
        *,
        inject: Injected | None = None,
        sample_tasks: int = 2,
        on_check: Callable[[Check], Any] | None = None,
    ) -> None:
        from legorl.config import RunConfig

        self.given: RunConfig | None = None
        if isinstance(config, RunConfig):
            self.given, self.path = config, Path("<config>")
        else:
            self.path = Path(config)
        self.overrides = overrides or {}
        self.inject = inject or Injected()
        self.sample_tasks = sample_tasks
        self.on_check = on_check  # called as each check ends (the CLI prints its line then)
        self.checks: list[Check] = []
        self.cfg: Any = None
        self.harness: Any = None
        self.tasks: list[Any] = []
        self.model_dir: Path | None = None

    # -- plumbing ----------------------------------------------------------------------------------
    def run_check(
        self,
        name: str,
        fn: Callable[[], tuple[Level, str, str] | tuple[Level, str]],
        *,
        live: bool = False,
        needs: tuple[str, ...] = (),
    ) -> Check:
        failed = [c.name for c in self.checks if c.name in needs and c.level in ("fatal", "skip")]
        if failed:
            check = Check(name, "skip", f"not run: {', '.join(failed)} failed", live=live)
        else:
            t0 = time.perf_counter()
            try:
                level, message, *fix = fn()
                check = Check(name, level, message, fix[0] if fix else "", live)
            except Exception as exc:  # a check that crashes is a fatal finding, named
                check = Check(name, "fatal", f"{type(exc).__name__}: {exc}", "see the message above", live)
            check.seconds = round(time.perf_counter() - t0, 2)
        self.checks.append(check)
        if self.on_check is not None:
            self.on_check(check)
        return check

    def run(self, structure_only: bool = False) -> list[Check]:
        self.run_check("config.schema", self.c_schema)
        deps = ("config.schema",)
        self.run_check("harness.adapter", self.c_harness, needs=deps)
        self.run_check("harness.dialect_tool_format", self.c_dialect, needs=("harness.adapter",))
        self.run_check("model.files", self.c_model, needs=deps)
        self.run_check("budget.context", self.c_context, needs=("model.files",))
        self.run_check("batch.arithmetic", self.c_batch, needs=deps)
        self.run_check("dtype.engine_trainer", self.c_dtype, needs=("model.files",))
        self.run_check("executor.topology", self.c_executor, needs=deps)
        self.run_check("suite.tasks", self.c_suite, needs=deps)
        self.run_check("observe.monitors_wandb", self.c_observe, needs=deps)
        if structure_only:
            return self.checks
        sandboxed = ("executor.topology", "suite.tasks")
        self.run_check("live.sandbox_no_network", self.c_network, live=True, needs=("executor.topology",))
        self.run_check("live.gold_and_empty_patches", self.c_patches, live=True, needs=sandboxed)
        self.run_check("live.canary_hack_caught", self.c_canary, live=True, needs=sandboxed)
        self.run_check("live.chat_template_roundtrip", self.c_template, live=True, needs=("model.files",))
        self.run_check(
            "live.harness_scripted_rollout",
            self.c_rollout,
            live=True,
            needs=(*sandboxed, "harness.dialect_tool_format", "model.files"),
        )
        self.run_check("live.engine_trainer_logprobs", self.c_logprobs, live=True, needs=("model.files",))
        return self.checks

    # -- structure ---------------------------------------------------------------------------------
    def c_schema(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.config import RunConfig
        from legorl.errors import ConfigError

        if self.given is not None:  # a config already loaded (legorl train checks what it will run)
            self.cfg = self.given
            return "pass", "the run's RunConfig"

        try:
            self.cfg = RunConfig.load(self.path, **self.overrides)
        except ConfigError as exc:
            return "fatal", str(exc), f"fix the field named above in {self.path}"
        return "pass", f"{self.path} is a valid RunConfig"

    def c_harness(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.errors import LegoRLError
        from legorl.loop.stack import build_harness

        try:
            self.harness = build_harness(self.cfg.rollout)
        except LegoRLError as exc:
            return "fatal", str(exc), "set rollout.harness / rollout.harness_options to what the adapter accepts"
        return "pass", f"harness {self.cfg.rollout.harness!r} ({type(self.harness).__name__})"

    def c_dialect(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.gateway.dialects.anthropic_messages import DIALECT as ANTHROPIC
        from legorl.gateway.dialects.gemini import DIALECT as GEMINI
        from legorl.gateway.dialects.openai_chat import DIALECT as CHAT
        from legorl.gateway.dialects.openai_responses import DIALECT as RESPONSES

        served = (CHAT, RESPONSES, ANTHROPIC, GEMINI)
        h = self.harness
        dialect = getattr(h, "dialect", None)
        if dialect not in served:
            return (
                "fatal",
                f"harness {self.cfg.rollout.harness!r} speaks {dialect!r}, which the gateway does not serve",
                f"use one of {', '.join(served)} (rollout.harness_options.dialect)",
            )
        command = getattr(h, "command", "")
        if isinstance(command, str) and _TINY_AGENT in command and dialect != CHAT:
            return (
                "fatal",
                f"the command harness runs {_TINY_AGENT}, which sends OpenAI chat requests with native "
                f"tool calls, but is configured for {dialect!r}: its tool calls would never reach the model",
                f"set rollout.harness_options.dialect to {CHAT!r} or give a command that speaks {dialect!r}",
            )
        var = getattr(h, "base_url_var", "") or ""
        family = dialect.split(".")[0]
        if var.startswith(("OPENAI", "ANTHROPIC")) and not var.lower().startswith(family):
            return (
                "fatal",
                f"harness base URL variable {var} names another API family than its dialect {dialect!r}",
                "make rollout.harness_options.base_url_var and dialect agree",
            )
        if getattr(h, "tool_calling", True) is False or self.cfg.rollout.harness == "minimal":
            return "pass", f"{dialect}, text-based actions (no native tool calls): rendered as plain text"
        return "pass", f"{dialect}, native tool calls rendered in the Hermes <tool_call> format by the gateway"

    def c_model(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.models.registry import KNOWN_MODELS, model_cache_dir, verify_model_cache

        name = self.cfg.engine.model
        if name in KNOWN_MODELS:
            problem = verify_model_cache(name)
            if problem:
                return "fatal", f"model {name!r} is not prepared: {problem}", f"run `legorl models prepare {name}`"
            self.model_dir = model_cache_dir(name)
        else:
            p = Path(name).expanduser()
            if not (p / "config.json").is_file():
                return (
                    "fatal",
                    f"engine.model {name!r} is neither a built-in model nor a model directory",
                    f"use one of {', '.join(KNOWN_MODELS)} or a local Hugging Face model directory",
                )
            self.model_dir = p
        for f in ("tokenizer.json",):
            if not (self.model_dir / f).is_file():
                return "fatal", f"{self.model_dir} has no {f}", "prepare the model directory with its tokenizer"
        return "pass", f"model {name!r} at {self.model_dir}"

    def _model_config(self) -> dict[str, Any]:
        assert self.model_dir is not None
        return json.loads((self.model_dir / "config.json").read_text())

    def c_context(self) -> tuple[Level, str, str] | tuple[Level, str]:
        ctx = int(self._model_config().get("max_position_embeddings", 2048))
        r = self.cfg.rollout
        if r.max_tokens_per_turn >= ctx:
            return (
                "fatal",
                f"rollout.max_tokens_per_turn={r.max_tokens_per_turn} does not fit the model's context of {ctx} tokens",
                f"set rollout.max_tokens_per_turn well below {ctx}",
            )
        generated = r.max_total_tokens or r.max_turns * r.max_tokens_per_turn
        if r.max_total_tokens is not None and r.max_total_tokens < r.max_tokens_per_turn:
            return (
                "warn",
                f"rollout.max_total_tokens={r.max_total_tokens} < max_tokens_per_turn="
                f"{r.max_tokens_per_turn}: every call is clipped to what is left",
            )
        if generated > ctx:
            return (
                "warn",
                f"up to {generated} generated tokens per rollout (turns x tokens per turn) exceed the "
                f"context of {ctx}: late turns will be cut by the engine (finish_reason=length)",
            )
        return "pass", f"context {ctx} tokens holds {generated} generated tokens per rollout plus prompts"

    def c_batch(self) -> tuple[Level, str, str] | tuple[Level, str]:
        c = self.cfg
        per_step = c.tasks_per_step * c.group_size
        notes = [f"{c.tasks_per_step} tasks x group {c.group_size} = {per_step} rollouts per step"]
        if c.task_ids and c.tasks_per_step > len(c.task_ids):
            return (
                "fatal",
                f"tasks_per_step={c.tasks_per_step} but task_ids lists only {len(c.task_ids)} tasks",
                f"set tasks_per_step <= {len(c.task_ids)} or list more task_ids",
            )
        if c.group_size < 4:
            return "warn", "; ".join(notes) + f": group_size {c.group_size} gives noisy group advantages (>= 4 advised)"
        if per_step * c.rollout.max_concurrent_requests > 8 * c.engine.max_batch_size:
            return "warn", "; ".join(
                notes
            ) + f": far above engine.max_batch_size={c.engine.max_batch_size} (calls queue)"
        return "pass", "; ".join(notes)

    def c_dtype(self) -> tuple[Level, str, str] | tuple[Level, str]:
        stored = str(self._model_config().get("dtype") or self._model_config().get("torch_dtype") or "float32")
        # The embedded engine and the trainer both load the model directory as stored (fp32 here):
        # the same dtype on both sides is what makes their logprobs comparable token by token.
        if stored not in ("float32", "bfloat16", "float16"):
            return (
                "fatal",
                f"model dtype {stored!r} is not one the engine and trainer load",
                "convert the model to fp32/bf16",
            )
        if self.cfg.engine.type == "embedded":
            return "pass", f"engine and trainer both run the model in {stored} (embedded engine)"
        return "warn", f"engine {self.cfg.engine.type!r} may sample in another dtype than the trainer's {stored}"

    def c_executor(self) -> tuple[Level, str, str] | tuple[Level, str]:
        sb = self.cfg.sandbox
        need = {"bwrap": ("bwrap", "strace"), "podman": (getattr(sb, "executable", "podman"),)}[sb.type]
        missing = [t for t in need if shutil.which(t) is None]
        if missing and self.inject.backend is None:
            return (
                "fatal",
                f"sandbox {sb.type!r} needs {', '.join(missing)}, not installed",
                "install it (make setup) or set sandbox.type to a backend this machine has",
            )
        return "pass", f"sandbox backend {sb.type} (memory {sb.memory_mb} MiB, {sb.max_pids} pids) on this host"

    def c_suite(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.errors import LegoRLError
        from legorl.tasks.loader import run_tasks

        try:
            self.tasks = run_tasks(self.cfg, training=True)
        except LegoRLError as exc:
            return "fatal", str(exc), "set suite / task_repos / task_ids to tasks that exist (`legorl tasks list`)"
        if not self.tasks:
            return "fatal", f"suite {self.cfg.suite!r} has no tasks", "point suite at a directory or file with tasks"
        return "pass", f"suite {self.cfg.suite!r}: {len(self.tasks)} task(s)"

    def c_observe(self) -> tuple[Level, str, str] | tuple[Level, str]:
        import importlib.util

        acting = [f"{n}={r.action}" for n, r in self.cfg.monitors if r.action in ("pause", "stop")]
        monitors = f"monitors acting on the run: {', '.join(acting) if acting else 'none (log and warn only)'}"
        wb = self.cfg.wandb
        if not wb.project:
            return "pass", f"{monitors}; W&B off"
        if importlib.util.find_spec("wandb") is None:
            return (
                "fatal",
                f"wandb.project is {wb.project!r} but the wandb package is not installed",
                "pip install wandb, or set wandb.project to null",
            )
        return "pass", f"{monitors}; W&B project {wb.project!r} ({wb.mode})"

    # -- live --------------------------------------------------------------------------------------
    def backend(self) -> Any:
        if self.inject.backend is not None:
            return self.inject.backend
        from legorl.loop.stack import sandbox_backend

        return sandbox_backend(self.cfg.sandbox)

    def _sample(self) -> list[Any]:
        return random.Random(self.cfg.seed).sample(self.tasks, min(self.sample_tasks, len(self.tasks)))

    def c_network(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.tasks.environment import sandbox_spec

        task = self.tasks[0]
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("0.0.0.0", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        host_ips = sorted({ip for ip in _host_ips() if not ip.startswith("127.")}) or ["127.0.0.1"]
        accepted: list[str] = []

        def accept() -> None:
            listener.settimeout(15)
            try:
                conn, addr = listener.accept()
                accepted.append(addr[0])
                conn.close()
            except OSError:
                pass

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        backend = self.backend()
        sb = backend.create(sandbox_spec(task, backend))
        try:
            res = sb.exec(["python3", "-c", _NET_PROBE, json.dumps([[*host_ips, "127.0.0.1"], port])], timeout=30)
        finally:
            sb.destroy()
            listener.close()
        t.join(1)
        try:
            seen = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return (
                "fatal",
                f"the network probe did not run in the sandbox: {res.stderr[-300:]}",
                "check the sandbox backend",
            )
        reached = [ip for ip in host_ips + ["127.0.0.1"] if seen.get(ip) == "connected"]
        ifaces = [i for i in seen.get("ifaces", []) if i != "lo"]
        if reached or accepted or ifaces:
            return (
                "fatal",
                f"the sandbox reaches the network: connected to the host listener via {reached or accepted}, "
                f"interfaces {ifaces or ['lo']}",
                "the sandbox backend must unshare the network namespace (bwrap --unshare-all / podman --network none)",
            )
        return "pass", f"only lo inside; host listener on {', '.join(host_ips)}:{port} unreachable"

    def c_patches(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.grading.grader import grade

        backend, bad = self.backend(), []
        sample = self._sample()
        for task in sample:
            gold = grade(task, task.patch, backend, timeout=self.cfg.grading.timeout_s)
            empty = grade(task, "", backend, timeout=self.cfg.grading.timeout_s)
            if not gold.resolved:
                failing = [k for k, v in gold.tests.items() if v != "passed"]
                bad.append(
                    f"{task.instance_id}: gold patch does not resolve ({gold.status}; "
                    f"{gold.cause or 'failing: ' + ', '.join(failing[:3])})"
                )
            if empty.resolved:
                bad.append(f"{task.instance_id}: the empty patch resolves (the tests do not test the bug)")
        if bad:
            return "fatal", "; ".join(bad), "repair the task (gold patch / FAIL_TO_PASS tests): `legorl tasks check`"
        return "pass", f"{len(sample)} task(s): gold resolves, empty does not"

    def c_canary(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.grading.grader import grade

        task = next((t for t in self.tasks if t.test_files), None)
        if task is None:
            return "warn", "no task names its test files: the canary (a weakened test) cannot be planted"
        canary = _weaken_test(task)
        report = grade(task, task.patch + canary, self.backend(), timeout=self.cfg.grading.timeout_s)
        kinds = [f.kind for f in report.blocking_flags()]
        if not kinds or report.reward != 0.0:
            return (
                "fatal",
                f"a canary hack (gold fix + deleted test lines in {task.test_files[0]}) was not caught: "
                f"reward {report.reward}, blocking flags {kinds}",
                "the grader's diff defenses are off: check grading",
            )
        return "pass", f"canary hack caught: {', '.join(sorted(set(kinds)))} (reward 0)"

    def c_template(self) -> tuple[Level, str, str] | tuple[Level, str]:
        from legorl.gateway.renderer import ChatTemplateRenderer, parse_tool_calls
        from legorl.models.registry import load_tokenizer

        assert self.model_dir is not None
        r = ChatTemplateRenderer(load_tokenizer(self.model_dir))
        call = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
        msgs = [{"role": "user", "content": "list files"}]
        ids = r.render_prompt(msgs, tools=[{"type": "function", "function": {"name": "bash", "parameters": {}}}])
        text = r.tokenizer.decode(r.encode(call), skip_special_tokens=False)
        content, calls, unparsed = parse_tool_calls(text)
        if not ids or unparsed or [c.name for c in calls] != ["bash"] or calls[0].arguments != {"command": "ls -la"}:
            return (
                "fatal",
                f"a tool call does not survive encode -> decode -> parse (got {calls}, {unparsed} unparsed)",
                "the model's tokenizer/chat template does not round-trip: use a model whose template the renderer supports",
            )
        return "pass", f"prompt renders ({len(ids)} tokens); a tool call round-trips through the tokenizer"

    def c_rollout(self) -> tuple[Level, str, str] | tuple[Level, str]:
        import asyncio

        from legorl.loop.single import rollout_once

        task = self.tasks[0]
        cfg = self.cfg.model_copy(update={"run_dir": Path(_tmpdir("legorl-validate-"))})
        try:
            run = asyncio.run(rollout_once(cfg, task.instance_id, engine="scripted-gold", backend=self.inject.backend))
        except ValueError as exc:  # a harness without a scripted policy
            return "warn", f"no scripted rollout for this harness: {exc}"
        finally:
            shutil.rmtree(cfg.run_dir, ignore_errors=True)
        r = run.rollout
        if r.status != "ok" or r.reward != 1.0 or not r.samples:
            return (
                "fatal",
                f"a scripted gold rollout of {r.harness} on {task.instance_id} ended {r.status} "
                f"(reward {r.reward}, cause {r.cause}, {len(r.samples)} samples): {r.harness_log_tail[-300:]}",
                "fix the harness install / options named above (`legorl rollout --engine scripted-gold`)",
            )
        return (
            "pass",
            f"{r.harness} resolved {task.instance_id} with a scripted model through the gateway "
            f"({sum(len(s.turn_indices) for s in r.samples)} turns, {r.duration_s:.1f}s)",
        )

    def c_logprobs(self) -> tuple[Level, str, str] | tuple[Level, str]:
        import asyncio

        import torch

        from legorl.engines.base import SamplingParams
        from legorl.loop.stack import load_engine
        from legorl.models.registry import load_model, load_tokenizer
        from legorl.training.logprobs import compute_token_logprobs

        assert self.model_dir is not None
        engine = self.inject.engine
        if engine is None:
            engine, _ = load_engine(self.cfg.engine)
        tok = load_tokenizer(self.model_dir)
        prompt = tok.encode("def add(a, b):\n    return", add_special_tokens=False)

        async def gen() -> Any:
            try:
                return await engine.generate(
                    prompt, SamplingParams(temperature=self.cfg.rollout.temperature, max_tokens=24)
                )
            finally:
                await engine.close()

        out = asyncio.run(gen())
        model = load_model(self.model_dir)
        with torch.no_grad():
            lps = compute_token_logprobs(model, prompt + list(out.token_ids), temperature=self.cfg.rollout.temperature)[
                len(prompt) :
            ].tolist()
        diffs = [abs(a - b) for a, b in zip(out.logprobs, lps)]
        worst = max(diffs) if diffs else 0.0
        if worst > 1e-2:
            return (
                "fatal",
                f"engine and trainer disagree on the probe's logprobs (max |diff| {worst:.3g} over "
                f"{len(diffs)} tokens): the engine does not serve the model the trainer trains",
                f"point the engine at the trainer's model ({self.cfg.engine.model}) and the same dtype",
            )
        return "pass", f"engine vs trainer logprobs on a {len(diffs)}-token probe: max |diff| {worst:.2e}"


# Run inside the sandbox: its network interfaces, and whether a TCP connect to each address reaches us.
_NET_PROBE = """import json, os, socket, sys
ips, port = json.loads(sys.argv[1])
res = {"ifaces": sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []}
for ip in ips:
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((ip, port))
        res[ip] = "connected"
    except OSError as e:
        res[ip] = type(e).__name__
    finally:
        s.close()
print(json.dumps(res))
"""


def _host_ips() -> list[str]:
    ips = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ips.add(str(info[4][0]))
    except OSError:
        pass
    try:  # the address of the default route's interface (no packet is sent by a UDP connect)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("10.255.255.255", 1))
        ips.add(s.getsockname()[0])
        s.close()
    except OSError:
        pass
    return sorted(ips)


def _tmpdir(prefix: str) -> str:
    import tempfile

    return tempfile.mkdtemp(prefix=prefix)


def _weaken_test(task: Any) -> str:
    """A diff deleting the last non-empty line of the task's first test file (a weakened test)."""
    path = task.test_files[0]
    lines = (Path(task.source_dir) / path).read_text().splitlines(keepends=True)
    gold_touches = f"b/{path}" in task.patch
    if gold_touches:
        raise ValueError("the gold patch edits the test file itself")
    n = len(lines)
    last = lines[-1] if lines[-1].endswith("\n") else lines[-1] + "\n\\ No newline at end of file\n"
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{n} +{n - 1},0 @@\n-{last}"


def validate(
    config: str | Path | RunConfig,
    *,
    structure_only: bool = False,
    overrides: dict[str, object] | None = None,
    inject: Injected | None = None,
    sample_tasks: int = 2,
    on_check: Callable[[Check], Any] | None = None,
) -> list[Check]:
    return Validator(config, overrides, inject=inject, sample_tasks=sample_tasks, on_check=on_check).run(structure_only)


def report(checks: list[Check]) -> dict[str, Any]:
    fatal = [c.name for c in checks if c.level == "fatal"]
    return {
        "ok": not fatal,
        "fatal": fatal,
        "warn": [c.name for c in checks if c.level == "warn"],
        "checks": [asdict(c) for c in checks],
    }


__all__ = ["Check", "Injected", "Validator", "report", "validate"]
