"""One rollout: task → sandbox → harness (pointed at the gateway) → diff → grader → Rollout record.

A bad rollout is data, not a crash: every failure ends up as a status with its cause — a failure of
the grader's own code on this rollout's diff too (``grader_error``: out of the gradient, counted by
the batch; :func:`legorl.grading.grader.grade_isolated`). Only a failure the policy could not have
caused is kept out of the gradient: a harness crash or an undiffable workspace after the gateway served
the session an answer is graded (:func:`policy_answered`), and so is an engine failure in a session
whose traffic its harness would not make (``SessionReport.beyond_its_harness``; docs/reward-integrity.md).

The rollout's :class:`Budget` is enforced by the gateway too: the session is opened with
``SessionBudget.from_budget(ctx.budget, declared_concurrency=...)``, so every call made with its
token — by the harness or by any other program in the sandbox — spends it. When the gateway
refused calls because the budget was spent, the harness ending becomes ``budget`` (a harness that
exits non-zero because its model stopped answering did not crash), the rollout keeps status ``ok``
and is graded as usual, ``cause`` says what was spent, and the session report's Flags
(``gateway_budget_exhausted``, ``gateway_concurrency``, ``gateway_foreign_client``; severity info)
join ``flag_details``. The declared concurrency is the harness's ``max_concurrency`` attribute when
it has one, else 1 for a harness without side requests (one agent loop, one call at a time) and
unchecked for one with them.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from legorl.config import GradingConfig
from legorl.errors import SandboxError, WorkspaceDiffError
from legorl.gateway.app import ENGINE_FAILURE_CODES
from legorl.gateway.sessions import SessionBudget, SessionReport
from legorl.grading.grader import grade_isolated
from legorl.grading.impossible import agent_view
from legorl.grading.monitor import RolloutMonitor, check_isolation
from legorl.harnesses.base import Budget, Harness, HarnessResult, run_harness
from legorl.harnesses.install import harness_layer, harness_mounts
from legorl.loop.truncation import truncation_flag
from legorl.sandbox.base import Sandbox, SandboxBackend
from legorl.tasks.environment import sandbox_spec
from legorl.tasks.model import Task
from legorl.trajectory.builder import build_samples
from legorl.trajectory.records import Flag, GraderReport, Rollout, RolloutStatus, Turn

GATEWAY_PORT_IN_SANDBOX = 8000


class SessionHost(Protocol):
    """The gateway's session API a rollout uses: the :class:`~legorl.gateway.app.Gateway` itself
    in its process, :class:`~legorl.gateway.control.RemoteGateway` from a rollout worker elsewhere."""

    def open_session(
        self, rollout_id: str, *, token: str | None = None, budget: SessionBudget | None = None, seed: int | None = None
    ) -> str: ...

    def session_id(self, token: str) -> str: ...

    def session_turns(self, token: str) -> list[Turn]: ...

    def session_report(self, token: str) -> SessionReport: ...

    def close_session(self, token: str) -> list[Turn]: ...


@dataclass
class RolloutContext:
    gateway: SessionHost
    gateway_socket: str  # Unix socket the sandboxes bind-mount
    backend: SandboxBackend
    harness: Harness
    budget: Budget
    grading: GradingConfig = field(default_factory=GradingConfig)  # RunConfig.grading
    memory_mb: int = 2048  # RunConfig.sandbox.memory_mb: the agent's sandbox
    max_pids: int = 256  # RunConfig.sandbox.max_pids
    trace_dir: str | None = None  # keep each rollout's host-side strace here (<sandbox>.strace); None: discard


def declared_concurrency(harness: Harness) -> int | None:
    """Calls the harness is known to make at once (None: not checked); see the module doc."""
    declared = getattr(harness, "max_concurrency", None)
    if declared is not None:
        return int(declared)
    return None if getattr(harness, "side_requests", False) else 1


def session_budget(ctx: RolloutContext) -> SessionBudget:
    return SessionBudget.from_budget(ctx.budget, declared_concurrency=declared_concurrency(ctx.harness))


def new_rollout_id() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"


def rollout_seed(run_seed: int, step: int, task_id: str, group_index: int) -> int:
    """The sampling seed of one rollout of a run: fixed by what the rollout is, not by when or where
    it runs (its calls sample with seeds derived from it: :meth:`legorl.gateway.sessions.Session.call_seed`)."""
    digest = hashlib.sha256(f"{run_seed}:{step}:{task_id}:{group_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


async def run_rollout(
    ctx: RolloutContext,
    task: Task,
    step: int = 0,
    group_index: int = 0,
    *,
    rollout_id: str | None = None,
    token: str | None = None,
    seed: int | None = None,
) -> Rollout:
    """One rollout of ``task``. ``rollout_id`` and the session ``token``: chosen by the caller when
    it must be able to close the session itself (a rollout worker that may be lost). ``seed``: the
    session's sampling seed (:func:`rollout_seed`; None: each call's own or random)."""
    rollout_id = rollout_id or new_rollout_id()
    token = ctx.gateway.open_session(rollout_id, token=token, budget=session_budget(ctx), seed=seed)
    session_id = ctx.gateway.session_id(token)
    rollout = Rollout(
        rollout_id=rollout_id,
        session_id=session_id,
        task_id=task.instance_id,
        harness=ctx.harness.name,
        sandbox=ctx.backend.name,
        step=step,
        group_index=group_index,
    )
    t0 = time.perf_counter()
    try:
        outcome = await _run_in_sandbox(ctx, task, token)
        outcome.write_to(rollout)
    finally:
        turns = ctx.gateway.session_turns(token)
        ctx.gateway.close_session(token)
        rollout.samples = build_samples(turns, rollout_id)
        rollout.duration_s = time.perf_counter() - t0
    return rollout


@dataclass
class RolloutOutcome:
    """What a rollout came to: the stages below return it, :meth:`write_to` puts it on the Rollout."""

    status: RolloutStatus
    cause: str | None = None
    result: HarnessResult | None = None  # None: the harness never ended (its sandbox failed first)
    diff: str = ""
    grader: GraderReport | None = None
    flag_details: list[Flag] = field(default_factory=list)  # every flag, blocking and info
    reward: float = 0.0

    def write_to(self, rollout: Rollout) -> None:
        rollout.status, rollout.cause, rollout.reward = self.status, self.cause, self.reward
        if self.result is not None:
            rollout.harness_exit_code = self.result.exit_code
            rollout.harness_log_tail = (self.result.log_tail or self.result.transcript)[-2000:]
        rollout.diff, rollout.grader = self.diff, self.grader
        # Rollout.flags: the blocking flags only (what flagged_policy acts on); flag_details: all of them.
        rollout.flag_details = list(self.flag_details)
        rollout.flags = list(dict.fromkeys(f.label for f in self.flag_details if f.severity == "blocking"))


@dataclass(frozen=True)
class RolloutRun:
    """A rollout past its sandbox (destroyed by now) on its way to a grade; a stage returns it
    updated (:func:`dataclasses.replace`) or the :class:`RolloutOutcome` that ends it."""

    result: HarnessResult
    diff: str
    monitor: RolloutMonitor
    turns: list[Turn] = field(default_factory=list)  # the gateway's record of the session
    during: list[Flag] = field(default_factory=list)  # the monitor's flags and the gateway's
    ending: str = ""  # the harness's own, or "budget" when the gateway's spent budget ended it
    budget_cause: str | None = None
    undiffable: str | None = None  # why the workspace's diff could not be taken (WorkspaceDiffError)
    sandbox_failed: str | None = None  # the harness's exec raised SandboxError (its result is a crash)
    scored_failure: str | None = None  # a failure within the agent's reach, graded all the same
    own_traffic: str | None = None  # the session's calls its harness would not make (SessionReport)

    def outcome(
        self,
        status: RolloutStatus,
        cause: str | None,
        *,
        grader: GraderReport | None = None,
        flag_details: list[Flag] | None = None,
        reward: float = 0.0,
    ) -> RolloutOutcome:
        return RolloutOutcome(status, cause, self.result, self.diff, grader, list(flag_details or []), reward)


async def _run_in_sandbox(ctx: RolloutContext, task: Task, token: str) -> RolloutOutcome:
    try:  # the harness program: a cached read-only layer (built once, never at rollout time when warm)
        layer = await asyncio.to_thread(harness_layer, ctx.harness.install, getattr(ctx.backend, "cache", None), True)
    except SandboxError as exc:  # ImageBuildError included
        return RolloutOutcome("env_failure", f"harness layer: {exc}")
    layers = harness_mounts(ctx.harness.install, layer)
    try:
        return await _run_with_layers(ctx, task, token, layers)
    finally:
        if layer is not None and layer.lease is not None:
            layer.lease.release()


async def _run_with_layers(
    ctx: RolloutContext, task: Task, token: str, layers: tuple[tuple[str, str], ...]
) -> RolloutOutcome:
    """Sandbox and harness → what the gateway saw → grade → verdict; the first stage that fails ends it."""
    # an impossible variant (legorl.grading.canaries) is graded; the agent's side sees its original
    graded, task = task, agent_view(task)
    run = await _harness_in_sandbox(ctx, task, token, layers)
    if isinstance(run, RolloutOutcome):  # the environment failed: no verdict on the agent
        return run
    turns = _session_turns(ctx, token)
    run = _with_session(ctx, token, run, turns)
    engine_cause = engine_failure(turns)
    if engine_cause is not None:
        if run.own_traffic is None:  # the model stopped answering its harness: no verdict, no gradient
            return run.outcome("env_failure", engine_cause)
        # other calls with the session's token loaded the engine: the failure may be the agent's doing
        run = _scored_failure(run, "engine_failed_under_own_traffic", f"{engine_cause} ({run.own_traffic})")
    # nothing the policy wrote has run before its first answer: a failure then is the environment's
    if run.sandbox_failed is not None and not policy_answered(turns):
        return run.outcome("env_failure", run.sandbox_failed, flag_details=run.during)
    if run.undiffable is not None:
        if not policy_answered(turns):
            return run.outcome("env_failure", f"workspace diff: {run.undiffable}", flag_details=run.during)
        run = _scored_failure(run, "workspace_undiffable", run.undiffable)  # graded as no change
    if run.ending == "crashed":
        if not policy_answered(turns):
            return run.outcome("harness_error", _crash_cause(run.result), flag_details=run.during)
        run = _scored_failure(run, "harness_crashed", _crash_cause(run.result))
    report = await _grade(ctx, graded, run)
    if report.status != "ok":
        return run.outcome(report.status, report.cause, grader=report, flag_details=report.flag_details)
    return _graded(ctx, run, report)


async def _harness_in_sandbox(
    ctx: RolloutContext, task: Task, token: str, layers: tuple[tuple[str, str], ...]
) -> RolloutRun | RolloutOutcome:
    """The agent's sandbox: created, checked for isolation, the harness run in it under the monitor,
    its diff taken; destroyed on every path. A SandboxError on the way is an environment failure."""
    try:
        spec = sandbox_spec(
            task,
            ctx.backend,
            gateway_socket=Path(ctx.gateway_socket),
            gateway_port=GATEWAY_PORT_IN_SANDBOX,
            memory_mb=ctx.memory_mb,
            max_pids=ctx.max_pids,
            extra_layers=layers,
        )
        sandbox = await asyncio.to_thread(ctx.backend.create, spec)
    except SandboxError as exc:
        return RolloutOutcome("env_failure", f"sandbox create: {exc}")
    monitor = RolloutMonitor.for_task(task, trace_dir=ctx.trace_dir)
    result: HarnessResult | None = None
    failed: str | None = None  # the harness's exec failed: judged with the turns (_run_with_layers)
    try:
        # before: the agent's sandbox must be isolated (history cut, hidden tests absent, no network)
        breaches = await asyncio.to_thread(check_isolation, sandbox, task)
        if breaches:
            return RolloutOutcome("env_failure", "isolation: " + "; ".join(breaches))
        try:
            result = await _monitored_harness(ctx, task, token, sandbox, monitor)
        except SandboxError as exc:  # what bwrap's exit looked like can be the agent's doing (its stderr)
            failed = f"sandbox crashed during the harness: {exc}"
            result = HarnessResult("crashed", None, "", str(exc)[-3000:], summary={"cause": failed})
        try:
            diff = await asyncio.to_thread(sandbox.diff)
        except WorkspaceDiffError as exc:  # the workspace as the agent left it (judged with the turns)
            return RolloutRun(result, "", monitor, undiffable=str(exc), sandbox_failed=failed)
    except SandboxError as exc:  # the harness's exit code and log are kept when it had ended
        return RolloutOutcome("env_failure", failed or f"sandbox crashed during the harness: {exc}", result)
    finally:
        await asyncio.to_thread(sandbox.destroy)
    return RolloutRun(result, diff, monitor, sandbox_failed=failed)


def policy_answered(turns: list[Turn]) -> bool:
    """Whether the gateway served this session an answer: from then on the policy's commands may have
    run in the sandbox, and whatever fails in there may be their doing."""
    return any(not t.failed for t in turns)


def _scored_failure(run: RolloutRun, kind: str, cause: str) -> RolloutRun:
    """``run`` graded in spite of a failure the agent could have caused (its commands share the
    sandbox with the harness, the workspace's git repository and the harness's files): kept out of
    the gradient, such a failure would hide the policy's own failures (docs/reward-integrity.md)."""
    flag = Flag(kind=kind, severity="info", stage="during", evidence={"source": "rollout", "detail": cause[:500]})
    causes = f"{run.scored_failure}; {cause}" if run.scored_failure else cause  # an undiffable crash: both
    return replace(run, during=[*run.during, flag], scored_failure=causes)


async def _monitored_harness(
    ctx: RolloutContext, task: Task, token: str, sandbox: Sandbox, monitor: RolloutMonitor
) -> HarnessResult:
    """The harness, pointed at the gateway; an exception of its adapter (not the sandbox's) is its crash."""
    base_url = f"http://127.0.0.1:{GATEWAY_PORT_IN_SANDBOX}/v1"
    monitor.start(sandbox)  # during: host-side strace + workspace scan
    try:
        return await asyncio.to_thread(run_harness, ctx.harness, task, sandbox, base_url, token, ctx.budget)
    except SandboxError:
        raise
    except Exception as exc:  # an adapter bug is this rollout's failure, not the run's
        return HarnessResult(
            ending="crashed",
            exit_code=None,
            transcript="",
            log_tail=f"adapter raised {exc!r}",
            summary={"cause": f"adapter raised {exc!r}"},
        )
    finally:
        monitor.stop(sandbox)


def _session_turns(ctx: RolloutContext, token: str) -> list[Turn]:
    try:
        return ctx.gateway.session_turns(token)
    except Exception:  # the gateway's record is evidence, not a precondition
        return []


def _with_session(ctx: RolloutContext, token: str, run: RolloutRun, turns: list[Turn]) -> RolloutRun:
    """The run with what was seen during it: the monitor's flags and the gateway's, and a spent budget
    (a harness that ended because its model stopped answering then ended by ``budget``)."""
    during, ending, budget_cause, own_traffic = run.monitor.flags(turns), run.result.ending, None, None
    gw_report = _session_report(ctx, token)
    if gw_report is not None:
        during = [*during, *gw_report.flags()]
        own_traffic = gw_report.beyond_its_harness()
        if gw_report.exhausted:
            budget_cause = gw_report.describe()
            if ending in ("finished", "crashed") and run.result.exit_code is not None:
                # the model stopped answering: whatever the harness did then is not a harness failure
                ending = "budget"
                budget_cause += f" (harness exit code {run.result.exit_code})"
    return replace(run, turns=turns, during=during, ending=ending, budget_cause=budget_cause, own_traffic=own_traffic)


def _crash_cause(result: HarnessResult) -> str:
    detail = result.summary.get("cause") if isinstance(result.summary, dict) else None
    return f"harness exit code {result.exit_code}" + (f": {detail}" if detail else "")


async def _grade(ctx: RolloutContext, graded: Task, run: RolloutRun) -> GraderReport:
    """The grader's report on the diff. A failure of our grading code on it is this rollout's
    grader_error (:func:`grade_isolated`), one of the grader's sandbox an env_failure: not the step's end."""
    g = ctx.grading
    try:
        return await asyncio.to_thread(
            lambda: grade_isolated(
                graded,
                run.diff,
                ctx.backend,
                g.timeout_s,
                extra_flags=run.during,
                flagged_policy=g.flagged_policy,
                reward_mode=g.reward_mode,
                retries=g.retries,
            )
        )
    except SandboxError as exc:
        return GraderReport(
            resolved=False,
            reward=0.0,
            status="env_failure",
            cause=f"grader: {exc}",
            flag_details=run.during,
            flags=[f.label for f in run.during],
        )


def _graded(ctx: RolloutContext, run: RolloutRun, report: GraderReport) -> RolloutOutcome:
    """A rollout the grader passed: its reward; ``timeout`` when the harness ran past its wall clock;
    the truncation flag; the causes worth knowing (the wall clock, a spent budget)."""
    details = list(report.flag_details)
    cut = truncation_flag(run.ending, run.turns)
    if cut is not None:  # what trainer.truncated acts on (legorl.loop.truncation)
        details.append(cut)
    causes = [run.scored_failure] if run.scored_failure else []
    if run.ending == "timeout":
        causes.append(f"harness ran past {ctx.budget.wall_clock_s:.0f}s")
    if run.budget_cause:
        causes.append(run.budget_cause)
    status: RolloutStatus = "timeout" if run.ending == "timeout" else "ok"
    return run.outcome(status, "; ".join(causes) or None, grader=report, flag_details=details, reward=report.reward)


def engine_failure(turns: list[Turn]) -> str | None:
    """The cause, if the engine failed a call of this rollout (after its own retries): whatever the
    harness did next answered a broken model, so the rollout is an environment failure, unless other
    calls with its token may have caused it (:func:`_run_with_layers`)."""
    for turn in turns:
        error = turn.response.get("error") if turn.failed else None
        if isinstance(error, dict) and error.get("code") in ENGINE_FAILURE_CODES:
            return f"engine failed turn {turn.turn_index}: {turn.error}"
    return None


def _session_report(ctx: RolloutContext, token: str) -> SessionReport | None:
    try:
        return ctx.gateway.session_report(token)
    except Exception:  # evidence, not a precondition (e.g. a gateway stand-in without reports)
        return None
