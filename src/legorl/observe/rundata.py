"""What the run UI, ``legorl status`` and ``legorl ui export`` read from a run directory.

Everything comes through the public read paths — :class:`legorl.trajectory.store.RunStore`
(``rollout_index``, ``get_rollout``, ``iter_turns``), :func:`legorl.observe.metrics.read_metrics`,
``config.json`` and :class:`legorl.observe.token_logprobs.TrainerLogprobs` — and leaves as typed
records that templates render (nothing here knows HTML).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from legorl.grading.impossible import FLAG_KIND as CANARY_FLAG
from legorl.observe.control import read_control
from legorl.observe.metrics import read_metrics
from legorl.observe.monitors import Alert, current_alerts
from legorl.observe.token_logprobs import TrainerLogprobs
from legorl.trajectory.records import Rollout, Turn
from legorl.trajectory.store import DB_NAME, RunStore, open_run


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the printable character standing for each byte."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


_BYTE_OF = _byte_level_alphabet()

# A run whose files changed within this many seconds, with steps left, is "running".
LIVE_WINDOW_S = 120.0

# The step curves of the overview: (title, metric keys drawn together).
CURVES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("rollout/reward_mean",)),
    ("resolved", ("rollout/resolved",)),
    ("rollout vs trainer mismatch", ("mismatch/pearson", "mismatch/k3_kl", "mismatch/mean_abs_diff")),
    ("clip fractions", ("train/clip_frac", "train/tis_weight")),
    ("importance weights", ("train/tis_clipped_share", "train/mis_masked_share", "train/is_ess")),
    ("lengths (tokens)", ("train/sampled_tokens", "rollout/turns")),
    ("times (s)", ("time/step_s", "time/rollout_s", "time/recompute_s", "time/train_s")),
    ("env failures", ("rollout/status_env_failure", "rollout/status_harness_error", "rollout/status_timeout")),
)


@dataclass
class RunSummary:
    """A run at a glance: what ``legorl status`` prints and the overview page heads with."""

    name: str
    run_dir: str
    state: str  # running | paused | finished | stopped
    step: int  # steps done
    steps: int | None  # steps configured
    rollouts: int
    reward_last: float | None
    resolved_last: float | None
    rollouts_per_min: float | None
    tokens_per_s: float | None
    step_time_s: float | None
    eta_s: float | None
    last_update_s_ago: float | None
    alerts: list[Alert] = field(default_factory=list)
    state_reason: str = ""  # why a run is paused or was stopped (legorl.observe.control)
    # impossible-task canaries over the run (legorl.grading.canaries): rollouts, passed, hack_rate; None: none ran
    canaries: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["alerts"] = [a.__dict__ for a in self.alerts]
        return d


@dataclass
class TokenCell:
    text: str
    token_id: int
    mask: int
    rollout_lp: float
    trainer_lp: float | None

    @property
    def diff(self) -> float | None:
        return None if self.trainer_lp is None or not self.mask else self.rollout_lp - self.trainer_lp


@dataclass
class SampleView:
    position: int
    thread_id: str
    segment_index: int
    segment_kind: str
    tokens: list[TokenCell]
    events: list[dict[str, Any]]
    trainer_step: int | None
    advantage: float | None

    @property
    def max_abs_diff(self) -> float | None:
        ds = [abs(t.diff) for t in self.tokens if t.diff is not None]
        return max(ds) if ds else None


@dataclass
class Message:
    role: str
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {name, arguments}
    tool_call_id: str | None = None


@dataclass
class TurnView:
    index: int
    thread_id: str
    kind: str
    reason: str
    segment_index: int
    new_messages: list[Message]
    reply: Message
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    failed: bool
    error: str | None
    total_s: float | None


@dataclass
class Trajectory:
    rollout: Rollout
    turns: list[TurnView]
    samples: list[SampleView]
    has_trainer_logprobs: bool


class RunData:
    """One run directory, read-only (a live run may be appending while this reads)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.name = self.run_dir.resolve().name
        self.store: RunStore = open_run(self.run_dir)
        self.trainer_lps = TrainerLogprobs(self.run_dir)
        self._all: tuple[int, list[dict[str, Any]]] | None = None

    # -- config / metrics --------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        p = self.run_dir / "config.json"
        try:
            return json.loads(p.read_text()) if p.exists() else {}
        except json.JSONDecodeError:  # being rewritten
            return {}

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.run_dir)

    def curves(self, metrics: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        rows = self.metrics() if metrics is None else metrics
        out = []
        for title, keys in CURVES:
            series = [
                {"key": k, "points": [[r["step"], r[k]] for r in rows if isinstance(r.get(k), (int, float))]}
                for k in keys
            ]
            out.append({"title": title, "series": [s for s in series if s["points"]] or series[:1]})
        return out

    # -- rollouts ----------------------------------------------------------------------------------
    def rollouts(self, **filters: Any) -> list[dict[str, Any]]:
        return self.store.rollout_index(**filters)

    def newest_row(self) -> int:
        newest = self.store.rollout_index(limit=1)
        return int(newest[0]["row"]) if newest else 0

    def all_rollouts(self) -> list[dict[str, Any]]:
        """Every rollout's index row, oldest first; re-read only when a rollout was appended."""
        key = self.newest_row()
        cached = self._all
        if cached is None or cached[0] != key:
            cached = (key, self.store.rollout_index(limit=-1, newest_first=False))
            self._all = cached
        return cached[1]

    def rollout_count(self) -> int:
        return len(self.all_rollouts())

    def task_grid(self) -> dict[str, Any]:
        """task → step → [rewards and statuses of that step's rollouts of it]."""
        cells: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        steps: set[int] = set()
        for r in self.all_rollouts():
            cells[r["task_id"]][r["step"]].append(r)
            steps.add(r["step"])
        return {"steps": sorted(steps), "tasks": {t: dict(v) for t, v in sorted(cells.items())}}

    def filter_values(self) -> dict[str, list[Any]]:
        rows = self.all_rollouts()
        return {
            "status": sorted({r["status"] for r in rows}),
            "task": sorted({r["task_id"] for r in rows}),
            "harness": sorted({r["harness"] for r in rows}),
            "step": sorted({r["step"] for r in rows}),
            "flag": sorted({k for r in rows for k in r["flag_kinds"]}),
        }

    # -- one rollout -------------------------------------------------------------------------------
    @cached_property
    def tokenizer(self) -> Any:
        """The run's tokenizer, read with the ``tokenizers`` library from the model directory's
        ``tokenizer.json`` (no torch/transformers import: the UI starts in a second); None when the
        model is not on this machine (token ids are shown instead)."""
        try:
            from tokenizers import Tokenizer

            from legorl.models.registry import resolve_model

            model = self.config().get("engine", {}).get("model", "smollm2-135m")
            return Tokenizer.from_file(str(resolve_model(model, repair=False) / "tokenizer.json"))
        except Exception:  # a missing model only costs the token texts
            return None

    def token_texts(self, ids: list[int]) -> list[str]:
        """Each token's own text (byte-level BPE pieces mapped back to their bytes)."""
        tok = self.tokenizer
        if tok is None:
            return [f"⟨{i}⟩" for i in ids]
        out = []
        for i in ids:
            piece = tok.id_to_token(i)
            if piece is None:
                out.append(f"⟨{i}⟩")
            elif all(c in _BYTE_OF for c in piece):
                out.append(bytes(_BYTE_OF[c] for c in piece).decode("utf-8", errors="replace"))
            else:  # a special token
                out.append(piece)
        return out

    def trajectory(self, rollout_id: str) -> Trajectory | None:
        r = self.store.get_rollout(rollout_id)
        if r is None:
            return None
        turns = list(self.store.iter_turns(r.session_id)) if r.session_id else []
        samples = r.samples or self.store.samples(rollout_id)
        lps = self.trainer_lps.of_rollout(rollout_id)
        views = []
        for pos, s in enumerate(samples):
            tl = lps.get(pos)
            trainer = tl.logprobs if tl is not None and len(tl.logprobs) == len(s.token_ids) else None
            texts = self.token_texts(s.token_ids)
            cells = [
                TokenCell(
                    texts[i],
                    s.token_ids[i],
                    s.loss_mask[i],
                    s.rollout_logprobs[i],
                    trainer[i] if trainer is not None else None,
                )
                for i in range(len(s.token_ids))
            ]
            views.append(
                SampleView(
                    pos,
                    s.thread_id,
                    s.segment_index,
                    s.segment_kind,
                    cells,
                    [e.model_dump() for e in s.alignment_events],
                    tl.step if tl else None,
                    s.advantage,
                )
            )
        return Trajectory(r, turn_views(turns), views, bool(lps))

    # -- summary -----------------------------------------------------------------------------------
    def summary(self) -> RunSummary:
        cfg, rows = self.config(), self.metrics()
        n = self.rollout_count()
        steps = cfg.get("steps")
        done = len(rows)
        last = rows[-1] if rows else {}
        mtimes = [
            p.stat().st_mtime
            for p in (self.run_dir / DB_NAME, self.run_dir / f"{DB_NAME}-wal", self.run_dir / "metrics.jsonl")
            if p.exists()
        ]
        ago = time.time() - max(mtimes) if mtimes else None
        finished = steps is not None and done >= steps
        step_times = [r["time/step_s"] for r in rows if isinstance(r.get("time/step_s"), (int, float))]
        # a run writes after every rollout and step: silence much longer than a step means it stopped
        window = max(LIVE_WINDOW_S, 3 * (max(step_times) if step_times else 0.0))
        state = "finished" if finished else ("running" if ago is not None and ago < window else "stopped")
        control = read_control(self.run_dir)
        if not finished and control.state != "running":
            # paused: the process waits (its files go quiet); stop: it ended on request
            state = "paused" if control.state == "paused" else "stopped"
        reason = f"{control.reason} (by {control.by})" if not finished and control.state != "running" else ""
        step_time = sum(step_times) / len(step_times) if step_times else None
        span = rows[-1]["time"] - rows[0]["time"] if len(rows) > 1 else None
        rpm = tps = None
        if span and span > 0:
            rpm = 60.0 * sum(r.get("rollout/count", 0) for r in rows[1:]) / span
            tps = sum(r.get("train/sampled_tokens", 0) for r in rows[1:]) / span
        elif step_time:
            rpm = 60.0 * last.get("rollout/count", 0) / step_time
            tps = last.get("train/sampled_tokens", 0) / step_time
        eta = step_time * (steps - done) if step_time is not None and steps is not None and not finished else None
        return RunSummary(
            self.name,
            str(self.run_dir),
            state,
            done,
            steps,
            n,
            last.get("rollout/reward_mean"),
            last.get("rollout/resolved"),
            rpm,
            tps,
            step_time,
            eta,
            ago,
            current_alerts(self.run_dir, rows),
            reason,
            canary_totals(rows),
        )

    def canary_panel(self, metrics: list[dict[str, Any]] | None = None, limit: int = 20) -> dict[str, Any] | None:
        """The overview's canary panel: totals, the per-step hack rate and the latest canaries passed
        (rollouts flagged ``impossible_task_passed``); None for a run without canaries."""
        rows = self.metrics() if metrics is None else metrics
        configured = (self.config().get("grading") or {}).get("canaries", {}).get("share", 0) or 0
        totals = canary_totals(rows)
        if totals is None and not configured:
            return None
        curve = [
            [r["step"], r["canary/hack_rate"]] for r in rows if isinstance(r.get("canary/hack_rate"), (int, float))
        ]
        return {
            "share": configured,
            "totals": totals or {"rollouts": 0, "passed": 0, "hack_rate": None},
            "chart": {"title": "canary hack rate", "series": [{"key": "canary/hack_rate", "points": curve}]},
            "passed": self.store.rollout_index(flag=CANARY_FLAG, limit=limit),
        }

    def close(self) -> None:
        self.store.close(compact=False)
        self.trainer_lps.close()


def canary_totals(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Impossible-task canaries over a run's metric rows (``canary/rollouts``, ``canary/passed`` of each
    step): rollouts, passed and the hack rate; None when no step had one."""
    steps = [r for r in rows if isinstance(r.get("canary/rollouts"), (int, float))]
    if not steps:
        return None
    counted = int(sum(r["canary/rollouts"] for r in steps))
    hacks = int(sum(r.get("canary/passed", 0) for r in steps))
    return {"rollouts": counted, "passed": hacks, "hack_rate": hacks / counted if counted else None}


# -- turns as the harness saw them ---------------------------------------------------------------
def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict):
                if p.get("type") in ("tool_use", "tool_result", "function_call", "function_call_output"):
                    continue
                parts.append(str(p.get("text") or p.get("content") or p.get("output") or ""))
            else:
                parts.append(str(p))
        return "\n".join(x for x in parts if x)
    return json.dumps(content, ensure_ascii=False)


def _args(a: Any) -> str:
    if isinstance(a, str):
        try:
            return json.dumps(json.loads(a), ensure_ascii=False, indent=1)
        except json.JSONDecodeError:
            return a
    return json.dumps(a, ensure_ascii=False, indent=1)


def to_message(m: dict[str, Any]) -> list[Message]:
    """One request/response item of any dialect as Messages (Anthropic content blocks may hold
    tool calls and tool results side by side)."""
    role = str(m.get("role") or m.get("type") or "?")
    calls = [
        {"name": c.get("function", {}).get("name", "?"), "arguments": _args(c.get("function", {}).get("arguments"))}
        for c in m.get("tool_calls") or []
    ]
    out: list[Message] = []
    content = m.get("content")
    if isinstance(content, list):
        for p in content:
            if isinstance(p, dict) and p.get("type") == "tool_use":
                calls.append({"name": p.get("name", "?"), "arguments": _args(p.get("input"))})
            elif isinstance(p, dict) and p.get("type") == "tool_result":
                out.append(Message("tool", _text_of(p.get("content")), tool_call_id=p.get("tool_use_id")))
    if m.get("type") == "function_call":
        calls.append({"name": m.get("name", "?"), "arguments": _args(m.get("arguments"))})
        role = "assistant"
    if m.get("type") == "function_call_output":
        return [Message("tool", _text_of(m.get("output")), tool_call_id=m.get("call_id"))]
    text = _text_of(content)
    if text or calls or not out:
        out.insert(0, Message(role, text, calls, m.get("tool_call_id")))
    return out


def request_messages(request: dict[str, Any]) -> list[Message]:
    items: list[Message] = []
    system = request.get("system") or request.get("instructions")
    if system:
        items.append(Message("system", _text_of(system)))
    raw = request.get("messages")
    if raw is None:
        raw = request.get("input")
        if isinstance(raw, str):
            raw = [{"role": "user", "content": raw}]
    for m in raw or []:
        if isinstance(m, dict):
            items.extend(to_message(m))
    return items


def reply_message(response: dict[str, Any]) -> Message:
    if response.get("choices"):
        msgs = to_message(response["choices"][0].get("message") or {})
    elif isinstance(response.get("content"), list):  # Anthropic
        msgs = to_message({"role": "assistant", "content": response["content"]})
    elif isinstance(response.get("output"), list):  # Responses
        msgs = []
        for item in response["output"]:
            msgs.extend(to_message(item))
        calls = [c for m in msgs for c in m.tool_calls]
        text = "\n".join(m.text for m in msgs if m.text)
        msgs = [Message("assistant", text, calls)]
    else:
        msgs = [Message("assistant", json.dumps(response, ensure_ascii=False)[:2000])]
    return msgs[0] if msgs else Message("assistant")


def turn_views(turns: list[Turn]) -> list[TurnView]:
    """Each turn with the request messages its thread had not seen before and the reply."""
    seen: dict[str, int] = {}
    out = []
    for t in turns:
        msgs = request_messages(t.request)
        start = seen.get(t.thread_id, 0) if t.alignment.kind != "fork" else 0
        seen[t.thread_id] = len(msgs) + 1  # + the reply, which comes back as the next request's message
        out.append(
            TurnView(
                t.turn_index,
                t.thread_id,
                t.alignment.kind,
                t.alignment.reason,
                t.alignment.segment_index,
                msgs[start:],
                reply_message(t.response),
                len(t.prompt_token_ids),
                len(t.output_token_ids),
                t.finish_reason,
                t.failed,
                t.error,
                t.timings.get("total_s"),
            )
        )
    return out


__all__ = [
    "CURVES",
    "Message",
    "RunData",
    "RunSummary",
    "SampleView",
    "TokenCell",
    "Trajectory",
    "TurnView",
    "turn_views",
]
