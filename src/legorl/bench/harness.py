"""A harness under real model traffic: N rollouts of a model through one harness (``legorl bench harness``).

``run_harness_bench("mini-swe-agent", rollouts=100, out=Path("runs/bench-harness"))`` → JSON-able dict.
Each rollout is a real one (:func:`legorl.loop.rollout.run_rollout`: sandbox, the unmodified harness,
gateway, grader) of a task of ``suite`` (default: the built-in ``trivial`` tier, cycled in order),
with the embedded engine (the model of ``engine``, SmolLM2-135M by default) or a scripted one. What it
measures is the machinery around the model, so a model that solves nothing is fine; what must not
happen is the environment failing, a harness program crashing by itself, or a harness hanging.

Per rollout (one JSON line appended to ``out/<harness>.jsonl`` as soon as it ends, so an interrupted
bench resumes: a rerun with the same ``out`` skips the indices already there; a bigger ``rollouts``
extends it): status, cause, reward, wall time, the harness program's own window, its model calls and
their time, and two classifications that need the gateway's record:

* **runtime crash**: the harness program died of a fault signal it raised on itself
  (:func:`legorl.harnesses.common.fault_signal`: a Bun/JavaScriptCore trap, a segfault), not the model's doing;
* **hang**: the harness ran into its wall clock while *no model call was in flight* — it sat idle after
  its last call instead of calling again or exiting. A call in flight at the kill (a slow model) is
  a model timeout, not a hang. A hang's record keeps the idle time, the last call's finish reason
  and the start of its reply, so it can be explained (e.g. the model asked for a command that never ends).

The summary (the documented keys, :data:`legorl.bench.schema.RESULT_KEYS` ``"harness"``):
``statuses`` (count by rollout status), ``env_failures_by_cause`` (status ``env_failure``, by the
cause's kind), ``env_failure_rate_not_model`` (rollouts failed by something other than the model's
own output: every ``env_failure`` — the runner and the grader charge what the model did to the agent:
a diff that breaks the tests is reward 0, a spent budget is ``ok`` — plus runtime crashes and
hangs, over all rollouts), ``hangs``, ``runtime_crashes``, ``wall_s_p50``/``wall_s_p95`` (rollout wall
time, sandbox and grading included), ``gateway_share`` (the part of all rollouts' wall time some model
call of theirs was inside the gateway, engine included; overlapping calls count once),
``engine_share`` (of it, generation), ``model_calls_mean``, ``resolved_rate``, ``wall_s`` (this
invocation's wall time), ``hang_details`` and ``results`` (the JSON-lines file).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.errors import ConfigError
from legorl.gateway.app import CLIENT_DISCONNECTED
from legorl.harnesses.base import Budget, Harness, HarnessResult
from legorl.harnesses.common import fault_signal
from legorl.loop.rollout import rollout_seed, run_rollout
from legorl.loop.single import single_rollout_config
from legorl.loop.stack import GatewayStack, build_harness, open_gateway_stack, rollout_context, sandbox_backend
from legorl.sandbox.base import ExecResult, Sandbox
from legorl.tasks.model import Task
from legorl.trajectory.records import Rollout, Turn

DEFAULT_SUITE = "trivial"
ENGINES = ("embedded", "scripted-gold", "scripted-wrong")  # scripted: the smoke, where the model is not the point
# A call that ended this close to the harness's kill was still being answered when the clock ran out
# (its response was on the wire); the harness was waiting on the model, not hanging.
IN_FLIGHT_SLACK_S = 1.0
# A call recorded as cut off (client_disconnected) this close to the end of the harness's exec was cut
# by the kill (the exec returns after the sandbox's processes are reaped, which takes a moment); an
# earlier one was the harness's own abort and says nothing about the end.
CUT_SLACK_S = 10.0
# The bench runs the embedded model: a rollout without a config file gets the single-rollout
# defaults (6 agent steps, 600 s); a bench over many rollouts wants a shorter clock by default.
BENCH_DEFAULTS: dict[str, object] = {"rollout.wall_clock_s": 300.0}


@dataclass
class _Window:
    """When the harness program ran, and how it ended (filled by :class:`_TimedHarness`)."""

    start: float | None = None
    end: float | None = None
    exec_result: ExecResult | None = None
    result: HarnessResult | None = None


class _TimedHarness:
    """The rollout's harness, unchanged, with the wall-clock window of its program recorded: the
    runner's own record has the rollout's start and length only (sandbox and grading included)."""

    def __init__(self, inner: Harness) -> None:
        self._inner = inner
        self.window = _Window()
        self.name = inner.name
        self.dialect = inner.dialect
        self.install = inner.install

    def __getattr__(self, attr: str) -> Any:  # max_concurrency, side_requests... as the harness says
        return getattr(self._inner, attr)

    def launch(self, task: Task, sandbox: Sandbox, gateway_url: str, session_token: str, budget: Budget) -> ExecResult:
        self.window.start = time.time()
        try:
            res = self._inner.launch(task, sandbox, gateway_url, session_token, budget)
        finally:
            self.window.end = time.time()
        self.window.exec_result = res
        return res

    def collect(self, sandbox: Sandbox, result: ExecResult, budget: Budget) -> HarnessResult:
        out = self._inner.collect(sandbox, result, budget)
        self.window.result = out
        return out


def call_interval(turn: Turn) -> tuple[float, float]:
    """(start, end) of one gateway call in wall-clock seconds. ``Turn.started_at`` is stamped when the
    Turn is built, i.e. after generation, so it is the call's *end*; its length is in ``timings``."""
    t = turn.timings
    length = t.get("total_s") or t.get("cancelled_after_s") or (t.get("align_s", 0.0) + t.get("generate_s", 0.0))
    return turn.started_at - float(length), turn.started_at


def union_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """Length of the union of ``intervals`` (concurrent calls — a sub-agent, a title — count once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def cause_kind(rollout: Rollout) -> str:
    """The kind of an ``env_failure``'s cause: the grader's typed cause (``sandbox_crash``...), else the
    runner's prefix (``sandbox create``, ``harness layer``, ``isolation``, ``engine``...)."""
    if rollout.grader is not None and rollout.grader.status == "env_failure":
        kind = rollout.grader.cause_kind
        return f"grader: {str(kind) if kind is not None else (rollout.cause or '').split(':', 1)[0]}"
    cause = rollout.cause or "unknown"
    if cause.startswith("engine failed"):
        return "engine"
    if cause.startswith("sandbox crashed"):
        return "sandbox crashed during the harness"
    return cause.split(":", 1)[0].strip() or "unknown"


def classify(rollout: Rollout, window: _Window, turns: list[Turn], index: int, task: str) -> dict[str, Any]:
    """One rollout's JSON line (module doc: runtime crash, hang)."""
    calls = [call_interval(t) for t in turns]
    answered = [t for t in turns if not t.failed]
    res = window.exec_result
    timed_out = bool(res is not None and res.timed_out)
    fault = fault_signal(res) if res is not None and not timed_out else None
    hang = False
    idle_s = None
    if timed_out and window.end is not None:
        # a call the kill cut off is recorded as failed with client_disconnected; one that ended
        # just before the kill was still being delivered
        cut = any(
            t.failed
            and (t.error or "").startswith(CLIENT_DISCONNECTED)
            and call_interval(t)[1] >= window.end - CUT_SLACK_S
            for t in turns
        )
        last_end = max((e for _, e in calls), default=window.start or window.end)
        idle_s = round(window.end - last_end, 2)
        hang = not cut and idle_s > IN_FLIGHT_SLACK_S
    record: dict[str, Any] = {
        "i": index,
        "task": task,
        "rollout_id": rollout.rollout_id,
        "status": rollout.status,
        "cause": rollout.cause,
        "cause_kind": cause_kind(rollout) if rollout.status == "env_failure" else None,
        "reward": rollout.reward,
        "resolved": bool(rollout.grader is not None and rollout.grader.resolved),
        "ending": window.result.ending if window.result is not None else None,
        "harness_exit_code": rollout.harness_exit_code,
        "wall_s": round(rollout.duration_s, 3),
        "harness_s": round(window.end - window.start, 3) if window.start and window.end else None,
        "harness_window": [round(window.start, 3), round(window.end, 3)] if window.start and window.end else None,
        "model_calls": len(turns),
        "model_calls_answered": len(answered),
        "call_s": round(union_seconds(calls), 3),
        "generate_s": round(sum(float(t.timings.get("generate_s", 0.0)) for t in turns), 3),
        "runtime_crash": fault,
        "hang": hang,
        "idle_s": idle_s,
    }
    if hang and turns:
        last = max(turns, key=lambda t: call_interval(t)[1])
        record["last_call"] = {"finish_reason": last.finish_reason, "reply": _reply_text(last)[:300]}
        record["log_tail"] = rollout.harness_log_tail[-500:]
    return record


def _reply_text(turn: Turn) -> str:
    """What the model answered in ``turn`` (its recorded response), as text: enough to explain a hang."""
    return json.dumps(turn.response)[:2000] if turn.response else ""


def harness_options(harness: str) -> dict[str, object]:
    """The harness options the learning bench runs the small model with (``legorl.bench.learn.HARNESS_RUNS``:
    a slim prompt and tool list, so the first prompt fits SmolLM2's 8192 positions); ``--set
    rollout.harness_options=...`` replaces them. The Responses variant of OpenCode takes OpenCode's."""
    from legorl.bench.learn import HARNESS_RUNS

    run = HARNESS_RUNS.get("opencode" if harness == "opencode-responses" else harness, {})
    return {k: v for k, v in run.items() if k == "rollout.harness_options"}


def pick_tasks(suite: str, tasks: Sequence[str] = ()) -> list[Task]:
    from legorl.tasks.loader import get_task, load_suite

    if tasks:
        return [get_task(t) for t in tasks]
    picked = load_suite(suite)
    if not picked:
        raise ConfigError(f"suite {suite!r} has no tasks")
    return picked


def read_done(path: Path) -> dict[int, dict[str, Any]]:
    """Records already in the results file by rollout index (a torn last line — the bench was killed
    while writing it — is skipped: that rollout runs again)."""
    done: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("i"), int):
            done[rec["i"]] = rec
    return done


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, -(-len(ordered) * q // 100) - 1))
    return ordered[int(k)]


def summarize(harness: str, engine: str, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    env = [r for r in records if r["status"] == "env_failure"]
    crashes = [r for r in records if r.get("runtime_crash")]
    hangs = [r for r in records if r.get("hang")]
    not_model = {r["i"] for r in (*env, *crashes, *hangs)}
    walls = [float(r["wall_s"]) for r in records]
    total_wall = sum(walls)
    return {
        "harness": harness,
        "engine": engine,
        "rollouts": n,
        "statuses": dict(Counter(r["status"] for r in records)),
        "endings": dict(Counter(str(r.get("ending")) for r in records)),
        "env_failures_by_cause": dict(Counter(r.get("cause_kind") or "unknown" for r in env)),
        "env_failure_rate_not_model": round(len(not_model) / n, 4) if n else None,
        "hangs": len(hangs),
        "runtime_crashes": len(crashes),
        "runtime_crash_signals": dict(Counter(r["runtime_crash"] for r in crashes)),
        "wall_s_p50": percentile(walls, 50),
        "wall_s_p95": percentile(walls, 95),
        "gateway_share": round(sum(float(r["call_s"]) for r in records) / total_wall, 4) if total_wall else None,
        "engine_share": round(sum(float(r["generate_s"]) for r in records) / total_wall, 4) if total_wall else None,
        "model_calls_mean": round(statistics.fmean(r["model_calls"] for r in records), 2) if n else None,
        "resolved_rate": round(sum(bool(r["resolved"]) for r in records) / n, 4) if n else None,
        "reward_mean": round(statistics.fmean(float(r["reward"]) for r in records), 4) if n else None,
        "hang_details": [
            {k: r.get(k) for k in ("i", "task", "rollout_id", "idle_s", "model_calls", "last_call")} for r in hangs
        ],
    }


@contextlib.asynccontextmanager
async def _shared_stack(cfg: RunConfig, run_dir: Path) -> AsyncIterator[Callable[[Task, Harness], Any]]:
    """``stack_for(task, harness)``: the gateway stack a rollout of ``task`` runs against. The embedded
    model is loaded once for all rollouts; a scripted engine's policy is the task's, so it gets a
    stack of its own per rollout (cheap: no weights)."""
    async with open_gateway_stack(cfg.engine, rollout=cfg.rollout, run_dir=run_dir) as stack:

        @contextlib.asynccontextmanager
        async def same(task: Task, harness: Harness) -> AsyncIterator[GatewayStack]:
            yield stack

        yield same


@contextlib.asynccontextmanager
async def _scripted_stacks(cfg: RunConfig, run_dir: Path, engine: str) -> AsyncIterator[Callable[[Task, Harness], Any]]:
    from legorl.engines.scripted import ScriptedEngine
    from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
    from legorl.harnesses.scripted import gold_policy

    tok = load_smollm2_gguf_tokenizer()

    @contextlib.asynccontextmanager
    async def per_task(task: Task, harness: Harness) -> AsyncIterator[GatewayStack]:
        policy = gold_policy(harness, task, wrong=engine == "scripted-wrong")
        scripted = ScriptedEngine(tok, policy, max_context=262144)
        async with open_gateway_stack(
            cfg.engine, rollout=cfg.rollout, run_dir=run_dir, engine_instance=scripted, tokenizer=tok
        ) as stack:
            yield stack

    yield per_task


async def _run(
    cfg: RunConfig,
    engine: str,
    plan: list[tuple[int, Task]],
    run_dir: Path,
    results: Path,
    on_record: Callable[[dict[str, Any]], None],
    concurrency: int = 1,
) -> None:
    backend = sandbox_backend(cfg.sandbox)
    stacks = _shared_stack(cfg, run_dir) if engine == "embedded" else _scripted_stacks(cfg, run_dir, engine)
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int, task: Task, stack_for: Callable[[Task, Harness], Any]) -> None:
        async with slots:
            harness = _TimedHarness(build_harness(cfg.rollout))  # its own window per rollout
            async with stack_for(task, harness._inner) as stack:
                ctx = rollout_context(cfg, stack, backend, harness)
                seed = rollout_seed(cfg.seed, 0, task.instance_id, i)
                rollout = await run_rollout(ctx, task, group_index=i, seed=seed)
                store = stack.run_store()
                store.append_rollout(rollout)
                turns = list(store.iter_turns(rollout.session_id))
            record = classify(rollout, harness.window, turns, i, task.instance_id)
            with results.open("a", encoding="utf-8") as fh:  # one line per rollout, flushed: resumable
                fh.write(json.dumps(record) + "\n")
            on_record(record)

    async with stacks as stack_for, asyncio.TaskGroup() as group:  # a failure cancels the rest
        for i, task in plan:
            group.create_task(one(i, task, stack_for))


def run_harness_bench(
    harness: str = "minimal",
    rollouts: int = 100,
    out: Path = Path("runs/bench-harness"),
    *,
    suite: str = DEFAULT_SUITE,
    tasks: Sequence[str] = (),
    engine: str = "embedded",
    overrides: dict[str, object] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    concurrency: int = 1,
) -> dict[str, Any]:
    """``rollouts`` rollouts of ``harness`` (module doc). ``overrides``: dotted RunConfig keys (``--set``).
    ``on_start(total, already_done)`` and ``on_record(record)``: progress hooks. ``concurrency``:
    rollouts at a time (the engine batches their calls; each rollout's wall time then includes
    waiting for the others' tokens)."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if rollouts < 1:
        raise ConfigError("--rollouts must be at least 1")
    if concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / f"{harness}-run"
    given = {
        **BENCH_DEFAULTS,
        **(harness_options(harness) if engine == "embedded" else {}),
        **(overrides or {}),
        "rollout.harness": harness,
        "run_dir": str(run_dir),
    }
    cfg = single_rollout_config(None, given, engine=engine)
    build_harness(cfg.rollout)  # an unknown harness or bad option: refused before anything runs
    picked = pick_tasks(suite, tasks)
    results = out / f"{harness}.jsonl"
    done = read_done(results)
    for rec in done.values():  # the same file must not mix engines: its figures would mean nothing
        if rec.get("engine", engine) != engine:
            raise ConfigError(f"{results} holds rollouts of engine {rec.get('engine')!r}, not {engine!r}")
    plan = [(i, picked[i % len(picked)]) for i in range(rollouts) if i not in done]
    if on_start is not None:
        on_start(rollouts, rollouts - len(plan))

    def record(rec: dict[str, Any]) -> None:
        rec["engine"] = engine
        done[rec["i"]] = rec
        if on_record is not None:
            on_record(rec)

    if plan:
        asyncio.run(_run(cfg, engine, plan, run_dir, results, record, concurrency))
    records = [done[i] for i in sorted(done) if i < rollouts]
    summary = summarize(harness, engine, records)
    summary.update(
        {
            "suite": ",".join(tasks) if tasks else suite,
            "ran_now": len(plan),
            "concurrency": concurrency,
            "wall_s": round(time.perf_counter() - t0, 2),
            "results": str(results),
            "run_dir": str(run_dir),
        }
    )
    return summary


@dataclass
class Progress:
    """A rich progress bar on stderr (stdout is the JSON): rollouts done, and what they came to."""

    harness: str
    counts: Counter = field(default_factory=Counter)
    _bar: Any = None
    _task: Any = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def start(self, total: int, done: int) -> None:
        # the bar appears once the plan is known: a refused command prints its error line alone
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._bar.__enter__()
        self._task = self._bar.add_task(self._describe(), total=total, completed=done)

    def record(self, rec: dict[str, Any]) -> None:
        self.counts[rec["status"]] += 1
        for what in ("hang", "runtime_crash"):
            if rec.get(what):
                self.counts[what] += 1
        self._bar.update(self._task, advance=1, description=self._describe())
        line = f"#{rec['i']} {rec['task']}: {rec['status']} reward {rec['reward']} {rec['wall_s']:.0f}s"
        extra = rec.get("cause") or ("HANG" if rec.get("hang") else "")
        self._bar.console.print(line + (f" ({str(extra)[:100]})" if extra else ""))

    def _describe(self) -> str:
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        return f"{self.harness} {counts}".strip()
