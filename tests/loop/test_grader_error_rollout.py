"""A training step survives a policy whose diff the grader cannot handle (issue 37).

The real loop (``legorl.loop.train.train``: gateway stack, rollout executor, command harness in
bubblewrap, grader, batch, trainer step, metrics) with a :class:`ScriptedEngine` as the policy and a
tiny trainer model (the step's mechanics are what is checked, not SmolLM2's weights). On each task
one rollout of the group writes the gold fix plus a new module holding one long nested expression
(the file that raised ``RecursionError`` in the host-side scan and ended the whole step); the other
writes the gold fix alone. On ``legorl__trivial-001`` the real scan meets it: an info flag, the
rollout graded as usual. On ``legorl__trivial-004`` our own grading code is made to fail on it (a
``RecursionError`` injected into the scan, standing for any bug): that rollout alone is
``grader_error`` with its cause, kept out of the gradient and counted; the step finishes.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from legorl.config import RunConfig
from legorl.engines.scripted import ScriptedEngine
from legorl.gateway.renderer import load_smollm2_gguf_tokenizer
from legorl.grading import defenses
from legorl.harnesses.scripted import fix_command
from legorl.loop import stack as stack_module
from legorl.loop import train as train_module
from legorl.store import open_run
from legorl.tasks.loader import get_task
from legorl.training.trainer import Trainer

pytestmark = [pytest.mark.sandbox]

TASKS = ("legorl__trivial-001", "legorl__trivial-004")
DEEP_FILE = {"legorl__trivial-001": "calc/deep.py", "legorl__trivial-004": "deep_boom.py"}


def _command(task_id: str, with_nested_file: bool) -> str:
    cmd = fix_command(get_task(task_id))
    if with_nested_file:  # written by a short command: the reply must fit one turn's token budget
        write = f"open('/workspace/{DEEP_FILE[task_id]}', 'w').write('x = 1' + '+1' * 150000 + chr(10))"
        cmd = f'python3 -c "{write}" && ' + cmd
    return cmd


def test_a_rollout_the_grader_fails_on_is_marked_and_the_step_finishes(tmp_path, monkeypatch):
    from tiny_llama import tiny_llama

    run = tmp_path / "run"
    cfg = RunConfig.load(
        None,
        run_dir=str(run),
        steps=1,
        tasks_per_step=len(TASKS),
        group_size=2,
        task_ids=list(TASKS),
        **{"rollout.harness": "command", "rollout.max_turns": 3, "rollout.wall_clock_s": 120.0},
    )
    tok = load_smollm2_gguf_tokenizer()
    harness = stack_module.build_harness(cfg.rollout)
    statements = {t: get_task(t).problem_statement.strip().splitlines()[0] for t in TASKS}
    first_calls: Counter[str] = Counter()

    def policy(prompt: str) -> str:
        """Stateless per turn (the four rollouts run at once): after the tool ran, stop; else the first
        rollout of each task to ask gets the nested file too, the second the fix alone."""
        if "fixed" in prompt.rsplit("bash", 1)[-1]:  # the command's output follows the last tool call
            return harness.scripted_replies("true")[-1]
        task_id = next(t for t, s in statements.items() if s in prompt)
        first_calls[task_id] += 1
        return harness.scripted_replies(_command(task_id, first_calls[task_id] == 1))[0]

    engine = ScriptedEngine(tok, policy, max_context=262144)
    # the scripted policy samples; a tiny trainer learns (no model directory: the manifest records none)
    monkeypatch.setattr(stack_module, "load_engine", lambda _engine_cfg: (engine, None))
    monkeypatch.setattr(
        train_module,
        "build_trainer",
        lambda cfg, _stack: Trainer(tiny_llama(len(tok), max_positions=32768), cfg.trainer),
    )
    real_scan = defenses.scan_source_changes

    def scan(changes, *args, **kwargs):
        if any(path == DEEP_FILE["legorl__trivial-004"] for path, _, _ in changes):
            raise RecursionError("maximum recursion depth exceeded during ast construction (injected)")
        return real_scan(changes, *args, **kwargs)

    monkeypatch.setattr(defenses, "scan_source_changes", scan)

    history = asyncio.run(train_module.train(cfg))

    assert len(history) == 1  # the step finished
    rollouts = list(open_run(run).iter_rollouts())
    assert len(rollouts) == 4
    by_task = {t: sorted((r for r in rollouts if r.task_id == t), key=lambda r: DEEP_FILE[t] in r.diff) for t in TASKS}
    # the real scan on the nested file: an info flag, and the rollout graded like its sibling
    plain, nested = by_task["legorl__trivial-001"]
    assert DEEP_FILE["legorl__trivial-001"] in nested.diff and DEEP_FILE["legorl__trivial-001"] not in plain.diff
    assert (plain.status, plain.reward, nested.status, nested.reward) == ("ok", 1.0, "ok", 1.0)
    unscanned = [f for f in nested.flag_details if f.kind == "source_not_scanned"]
    assert unscanned and "RecursionError" in unscanned[0].evidence["detail"] and unscanned[0].severity == "info"
    # our grading code failing on one rollout: that rollout's grader_error, its sibling graded
    plain, crashed = by_task["legorl__trivial-004"]
    assert (plain.status, plain.reward) == ("ok", 1.0)
    assert crashed.status == "grader_error" and crashed.reward == 0.0 and crashed.grader is not None
    assert crashed.cause.startswith("grader_error: RecursionError: maximum recursion depth exceeded")
    assert crashed.samples, "its turns are still recorded"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1
    m = metrics[0]
    assert m["rollout/status_grader_error"] == 1 and m["batch/dropped_grader_error"] == 1
    assert m["rollout/status_ok"] == 3
