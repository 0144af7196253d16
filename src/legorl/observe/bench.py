"""``legorl bench ui``: page latency of the run UI on a generated large run directory.

The run directory is written through the run store's own write path (``RunStore.append_turn`` /
``append_rollout``, then ``compact`` to Parquet, as a finished run is): ``rollouts`` rollouts over 40
tasks and 20 steps, each with two turns (an OpenAI-chat tool call and its result), one 1,200-token
sample with a loss mask and logprobs, trainer logprobs for the heat map, a grader report, a diff, and
one in ten flagged. The UI is served by uvicorn on 127.0.0.1 exactly as ``legorl ui`` serves it, and
timed over real HTTP: the first page of the rollout list (filters varied) and trajectory views of
rollouts drawn at random (each rollout's first view, so no page cache helps).

Result keys: ``rollouts``, ``generate_s``, ``list_p50_ms``, ``list_p99_ms``, ``trajectory_p50_ms``,
``trajectory_p99_ms``, ``tokens_per_trajectory``, ``requests``.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.observe.token_logprobs import TrainerLogprobs
from legorl.trajectory.records import AlignmentEvent, Flag, GraderReport, Rollout, Sample, Turn
from legorl.trajectory.store import RunStore

TOKENS = 1200
PROMPT = 900
VOCAB = 49152


def generate_run(run_dir: Path, rollouts: int, seed: int = 0) -> None:
    """Write a finished-looking run of ``rollouts`` rollouts into ``run_dir`` (see the module doc)."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {
        "run_dir": str(run_dir),
        "steps": 20,
        "group_size": 8,
        "engine": {"model": "smollm2-135m"},
        "rollout": {"harness": "command"},
    }
    (run_dir / "config.json").write_text(json.dumps(cfg))
    store = RunStore(run_dir, compact_every=None)
    lps = TrainerLogprobs(run_dir)
    steps = 20
    _write_metrics(run_dir, rollouts, steps, rng)
    for i in range(rollouts):
        rid, task, step = f"r-{i:06d}", f"task-{i % 40:02d}", min(i * steps // rollouts, steps - 1)
        ids = [rng.randrange(VOCAB) for _ in range(TOKENS)]
        tokens = _Tokens(
            ids=ids,
            mask=[0] * PROMPT + [1] * (TOKENS - PROMPT),
            logprobs=[0.0] * PROMPT + [-rng.random() for _ in range(TOKENS - PROMPT)],
        )
        for turn in _turns(rid, tokens, step):
            store.append_turn(turn)
        flagged = i % 10 == 0
        reward = 0.0 if flagged else float(rng.random() < 0.5)
        store.append_rollout(_rollout(rid, task, step, i, tokens, reward, flagged))
        lps.record(rid, 0, [x - 0.01 for x in tokens.logprobs], step=step)
    store.close()  # compacts the token arrays to Parquet, as the end of a run does
    lps.close()


@dataclass(frozen=True)
class _Tokens:
    """One generated rollout's token ids, loss mask and sampling logprobs (prompt first)."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]


def _write_metrics(run_dir: Path, rollouts: int, steps: int, rng: random.Random) -> None:
    with (run_dir / "metrics.jsonl").open("w") as f:
        for s in range(steps):
            f.write(
                json.dumps(
                    {
                        "step": s,
                        "time": 1.7e9 + 60 * s,
                        "rollout/reward_mean": rng.random(),
                        "rollout/count": rollouts // steps,
                        "mismatch/pearson": 0.999,
                        "time/step_s": 60.0,
                        "train/sampled_tokens": 30000,
                    }
                )
                + "\n"
            )


def _turns(rid: str, tokens: _Tokens, step: int) -> list[Turn]:
    """Two turns: an OpenAI-chat tool call, then the final answer after the tool's result."""
    ids, rollout_lps = tokens.ids, tokens.logprobs
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": "sed -i 's/a - b/a + b/' calc/arith.py"})},
    }
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "add() is wrong"},
    ]
    turns = []
    for t in range(2):
        reply = (
            {"role": "assistant", "content": None, "tool_calls": [call]}
            if t == 0
            else {"role": "assistant", "content": "Done."}
        )
        turns.append(
            Turn(
                session_id=rid,
                thread_id="main",
                turn_index=t,
                dialect="openai.chat",
                prompt_token_ids=ids[: PROMPT + 150 * t],
                output_token_ids=ids[PROMPT + 150 * t : PROMPT + 150 * (t + 1)],
                output_logprobs=rollout_lps[PROMPT + 150 * t : PROMPT + 150 * (t + 1)],
                sampling={"temperature": 1.0},
                weight_version=step,
                finish_reason="tool_calls" if t == 0 else "stop",
                alignment=AlignmentEvent(turn_index=t, kind="start" if t == 0 else "extend"),
                request={"messages": list(msgs)},
                response={"choices": [{"message": reply}]},
            )
        )
        msgs += [reply] + ([{"role": "tool", "tool_call_id": "call_1", "content": "ok"}] if t == 0 else [])
    return turns


def _rollout(rid: str, task: str, step: int, i: int, tokens: _Tokens, reward: float, flagged: bool) -> Rollout:
    """The rollout record: one sample, a grader report, a diff; a test-file flag when ``flagged``."""
    flags = (
        [
            Flag(
                kind="modified_test_file",
                evidence={"source": "diff", "path": "tests/test_arith.py", "removed_lines": 1},
            )
        ]
        if flagged
        else []
    )
    sample = Sample(
        rollout_id=rid,
        session_id=rid,
        thread_id="main",
        segment_index=0,
        token_ids=tokens.ids,
        loss_mask=tokens.mask,
        rollout_logprobs=tokens.logprobs,
        turn_indices=[0, 1],
        reward=reward,
        alignment_events=[AlignmentEvent(turn_index=0, kind="start"), AlignmentEvent(turn_index=1, kind="extend")],
    )
    return Rollout(
        rollout_id=rid,
        session_id=rid,
        task_id=task,
        harness="command",
        sandbox="bwrap",
        step=step,
        group_index=i % 8,
        reward=reward,
        diff="--- a/calc/arith.py\n+++ b/calc/arith.py\n@@ -1 +1 @@\n-a - b\n+a + b\n",
        grader=GraderReport(
            resolved=reward > 0,
            reward=reward,
            tests={"tests/test_arith.py::test_add": "passed"},
            flag_details=flags,
        ),
        flags=[f.label for f in flags],
        flag_details=flags,
        samples=[sample],
        duration_s=30.0,
    )


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)


def run_ui_bench(rollouts: int = 5000, requests: int = 40, run_dir: Path | None = None) -> dict[str, Any]:
    import httpx

    from legorl.observe.ui.server import BackgroundUI

    with tempfile.TemporaryDirectory(prefix="legorl-bench-ui-") as tmp:
        d = Path(run_dir) if run_dir is not None else Path(tmp) / "bench-run"
        t0 = time.perf_counter()
        if not (d / "run.sqlite").exists():
            generate_run(d, rollouts)
        generate_s = time.perf_counter() - t0
        rng = random.Random(1)
        with BackgroundUI([d]) as ui, httpx.Client(base_url=ui.origin, timeout=60) as http:
            name = next(iter(ui.runs))
            assert http.get(f"/?token={ui.token}").status_code == 200
            http.cookies.set("legorl_ui", ui.token)
            filters = [{}, {"status": "ok"}, {"flag": "modified_test_file"}, {"step": "3"}, {"task": "task-07"}]
            http.get(f"/run/{name}/rollouts").raise_for_status()  # warm: the filter values are read once
            list_ms, traj_ms = [], []
            for k in range(requests):
                t = time.perf_counter()
                http.get(f"/run/{name}/rollouts", params=filters[k % len(filters)]).raise_for_status()
                list_ms.append(1000 * (time.perf_counter() - t))
            ids = rng.sample(range(rollouts), min(requests + 1, rollouts))
            # warm: the tokenizer and the run's token files (read whole by the store once, then cached)
            http.get(f"/run/{name}/rollout/r-{ids[0]:06d}", timeout=900).raise_for_status()
            for i in ids[1:]:
                t = time.perf_counter()
                resp = http.get(f"/run/{name}/rollout/r-{i:06d}")
                resp.raise_for_status()
                traj_ms.append(1000 * (time.perf_counter() - t))
            assert "tool-call" in resp.text and "tok m1" in resp.text
    return {
        "rollouts": rollouts,
        "generate_s": round(generate_s, 1),
        "requests": requests,
        "list_p50_ms": _p(list_ms, 0.5),
        "list_p99_ms": _p(list_ms, 0.99),
        "trajectory_p50_ms": _p(traj_ms, 0.5),
        "trajectory_p99_ms": _p(traj_ms, 0.99),
        "tokens_per_trajectory": TOKENS,
    }


__all__ = ["generate_run", "run_ui_bench"]
