"""Scripted "model" policies that solve (or deliberately fail) a task through a given harness.

For tests and ``legorl rollout --engine scripted-gold`` only: the policy answers the gateway with text
in the renderer's format (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` for tool calls),
and the engine emits it as tokens. The *harness* then really executes the action in the sandbox.

:func:`fix_command` turns the task's gold patch into one shell command that applies it (base64, so
no quoting problems in any harness's tool-call JSON); ``wrong=True`` writes a plausible but wrong edit
instead (the buggy file with a comment appended: a non-empty diff that fails the tests).
Each adapter says how its "model" runs a command and finishes (``harness.scripted_replies(cmd)``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from legorl.diffs import touched_paths
from legorl.engines.scripted import Policy, replies_in_order


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def shell_then_finish(tool: str, shell_command: str, **arguments: Any) -> list[str]:
    """Replies that run ``shell_command`` with a harness's shell tool ``tool`` (arguments
    ``command``, ``description`` and ``arguments``), then finish with a short answer."""
    return [
        tool_call(tool, {"command": shell_command, "description": "apply the fix", **arguments}),
        "The fix is in place.",
    ]


def _patched_files(task: Any) -> dict[str, bytes]:
    """Source files changed by the gold patch, as they are after it (applied to a temp copy)."""
    src = Path(task.source_dir)
    with tempfile.TemporaryDirectory(prefix="legorl-gold-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(src, work, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            cwd=work,
            input=task.patch.encode(),
            check=True,
            capture_output=True,
            timeout=60,
        )
        out: dict[str, bytes] = {}
        for rel in touched_paths(task.patch):
            p = work / rel
            if p.is_file():
                out[rel] = p.read_bytes()
        return out


def fix_command(task: Any, wrong: bool = False) -> str:
    """One shell command that writes the gold fix, or a wrong one, into /workspace. The gold fix is the
    gold patch itself, applied by git (a few KB whatever the size of the files it changes: a real
    repository's files, whole, would not fit in one model turn); the wrong one appends a comment."""
    if not wrong:
        patch = base64.b64encode(task.patch.encode()).decode()
        return f"echo {patch} | base64 -d | git -C /workspace apply --whitespace=nowarn - && echo fixed"
    files = _patched_files(task)
    files = {rel: (Path(task.source_dir) / rel).read_bytes() + b"\n# attempted fix\n" for rel in files}
    payload = base64.b64encode(
        json.dumps({k: base64.b64encode(v).decode() for k, v in files.items()}).encode()
    ).decode()
    return (
        'python3 -c "import base64,json,pathlib;'
        f"[pathlib.Path('/workspace',k).write_bytes(base64.b64decode(v)) for k,v in json.loads(base64.b64decode('{payload}')).items()]\""
        " && echo fixed"
    )


def fix_files(task: Any, wrong: bool = False) -> dict[str, str]:
    files = _patched_files(task)
    if wrong:
        return {rel: (Path(task.source_dir) / rel).read_text() + "\n# attempted fix\n" for rel in files}
    return {rel: v.decode() for rel, v in files.items()}


def gold_policy(harness: Any, task: Any, wrong: bool = False) -> Policy:
    """A policy that makes ``harness`` run the gold (or a wrong) fix and finish."""
    replies = harness.scripted_replies(fix_command(task, wrong)) if hasattr(harness, "scripted_replies") else None
    if replies is None and hasattr(harness, "gold_replies"):  # harnesses whose answer is not a command
        replies = harness.gold_replies(task, wrong)
    if replies is None and getattr(harness, "name", "") == "minimal":
        blocks = "\n".join(f"{rel}\n```python\n{text}```" for rel, text in fix_files(task, wrong).items())
        replies = [f"Here is the fix.\n{blocks}\n"]
    if replies is None:
        raise ValueError(
            f"harness {getattr(harness, 'name', harness)!r} has no scripted_replies(); "
            "cannot script a gold policy for it"
        )
    scripted = replies_in_order(*replies, fallback=replies[-1])
    if not getattr(harness, "side_requests", False):
        return scripted

    def policy(prompt: str) -> str:
        # Side requests without tools (titles, summaries) get a short answer and do not advance the script.
        return scripted(prompt) if "<tools>" in prompt else "Fix the failing test"

    return policy


def mixed_is_wrong(seed: int, task_id: str, sample: int) -> bool:
    """The ``scripted-mixed`` engine's choice for one rollout: the wrong fix (True) or the gold one,
    fixed by (seed, task, sample index) alone, so a pilot or evaluation of it is reproducible and
    its tasks get pass rates between 0 and 1 (what ``legorl tasks filter`` is tested on)."""
    digest = hashlib.sha256(f"{seed}:{task_id}:{sample}".encode()).digest()
    return bool(digest[0] & 1)
