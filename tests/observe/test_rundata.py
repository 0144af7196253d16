"""The read side of the UI without a browser: the store's rollout index and its filters, turns of every
dialect as the harness saw them, the trainer-logprob sidecar, the token heat colour."""

from __future__ import annotations

from legorl.observe.rundata import RunData, reply_message, request_messages
from legorl.observe.token_logprobs import TrainerLogprobs
from legorl.observe.ui.pages import heat_style
from legorl.trajectory.records import Flag, GraderReport, Rollout, Sample
from legorl.trajectory.store import RunStore


def _rollout(i: int, *, status: str = "ok", flag: str | None = None, step: int = 0) -> Rollout:
    flags = [Flag(kind=flag, evidence={"path": "tests/t.py", "source": "diff"})] if flag else []
    s = Sample(
        rollout_id=f"r{i}",
        thread_id="main",
        segment_index=0,
        token_ids=[1, 2, 3],
        loss_mask=[0, 1, 1],
        rollout_logprobs=[0.0, -0.5, -1.0],
    )
    return Rollout(
        rollout_id=f"r{i}",
        task_id=f"t{i % 2}",
        harness="command",
        sandbox="bwrap",
        step=step,
        status=status,
        reward=float(i % 2),
        flags=[f.label for f in flags],
        flag_details=flags,
        grader=GraderReport(resolved=bool(i % 2), reward=float(i % 2), flag_details=flags),
        samples=[s],
    )


def test_rollout_index_filters_and_the_last_row_of_an_id(tmp_path):
    store = RunStore(tmp_path)
    for i in range(6):
        store.append_rollout(
            _rollout(
                i, status="env_failure" if i == 2 else "ok", flag="modified_test_file" if i == 3 else None, step=i // 3
            )
        )
    store.append_rollout(_rollout(0, step=5))  # appended again: readers take the last row
    rows = store.rollout_index(limit=-1)
    assert [r["rollout_id"] for r in rows] == ["r0", "r5", "r4", "r3", "r2", "r1"] and rows[0]["step"] == 5
    assert [r["rollout_id"] for r in store.rollout_index(status="env_failure")] == ["r2"]
    flagged = store.rollout_index(flag="modified_test_file")
    assert [r["rollout_id"] for r in flagged] == ["r3"] and flagged[0]["flag_kinds"] == ["modified_test_file"]
    assert [r["rollout_id"] for r in store.rollout_index(flag="*")] == ["r3"]
    assert [r["rollout_id"] for r in store.rollout_index(task_id="t1", step=1)] == ["r5", "r3"]
    assert {r["rollout_id"] for r in store.rollout_index(step=1)} == {"r3", "r4", "r5"}
    newest = rows[0]["row"]
    store.append_rollout(_rollout(9))
    assert [r["rollout_id"] for r in store.rollout_index(after_row=newest)] == ["r9"]
    page = store.rollout_index(limit=2, offset=2)
    assert [r["rollout_id"] for r in page] == ["r5", "r4"]
    store.close()


def test_trainer_logprobs_make_the_heat_map(tmp_path):
    store = RunStore(tmp_path)
    store.append_rollout(_rollout(1))
    store.close()
    TrainerLogprobs(tmp_path).record("r1", 0, [0.0, -0.25, -3.5], step=0, weight_version=0)
    t = RunData(tmp_path).trajectory("r1")
    assert t is not None and t.has_trainer_logprobs
    diffs = [c.diff for c in t.samples[0].tokens]
    assert diffs == [None, -0.25, 2.5]  # masked tokens carry no difference
    assert heat_style(None) == "" and "220,38,38" in heat_style(2.5) and "37,99,235" in heat_style(-0.25)


def test_turns_of_every_dialect_show_tool_calls_and_results():
    chat = request_messages(
        {
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "fix"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            ]
        }
    )
    assert [m.role for m in chat] == ["system", "user", "assistant", "tool"]
    assert chat[2].tool_calls[0]["name"] == "bash" and '"ls"' in chat[2].tool_calls[0]["arguments"]
    anthropic = request_messages(
        {
            "system": "sys",
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
            ],
        }
    )
    assert [m.role for m in anthropic] == ["system", "assistant", "tool"]
    assert anthropic[1].text == "look" and anthropic[1].tool_calls[0]["name"] == "Bash"
    assert anthropic[2].text == "a.py" and anthropic[2].tool_call_id == "t1"
    responses = request_messages(
        {
            "instructions": "sys",
            "input": [
                {"role": "user", "content": "fix"},
                {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "x"},
                {"type": "function_call_output", "call_id": "x", "output": "done"},
            ],
        }
    )
    assert [m.role for m in responses] == ["system", "user", "assistant", "tool"]
    reply = reply_message(
        {
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                {"type": "function_call", "name": "shell", "arguments": "{}"},
            ]
        }
    )
    assert reply.text == "ok" and reply.tool_calls[0]["name"] == "shell"
    assert (
        reply_message({"content": [{"type": "tool_use", "name": "Edit", "input": {}}]}).tool_calls[0]["name"] == "Edit"
    )
