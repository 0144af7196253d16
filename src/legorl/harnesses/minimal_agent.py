"""The first-party minimal harness: a separate program, run inside the sandbox, that talks to an
OpenAI-compatible endpoint with the official ``openai`` client — exactly like a third-party harness.

Made for small models (measured with SmolLM2-135M: whole-file rewrites work, shell edits do not):
it shows the issue, the repository's source files and the test output, and asks for the whole
corrected file in a fenced block headed by its path::

    path/to/module.py
    ```python
    ...whole file...
    ```

It writes every such block, reruns the tests and sends their output back, for a few turns.
Usage: OPENAI_API_KEY=TOKEN python -m legorl.harnesses.minimal_agent --base-url URL --issue-file F
Exit code 0 when the visible tests pass at the end, 1 when not, 2 on a usage/transport error.
It prints one JSON summary line on stdout last.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from legorl.harnesses.agent_cli import agent_parser, api_key_or_none

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

SYSTEM_PROMPT = (
    "You fix bugs in Python files. Reply with the whole corrected file: its path on one line, "
    "then the code in a ```python block."
)
# One worked example (a user turn and the ideal reply) before the real task: measured with
# SmolLM2-135M at T=0.4 on trivial-001, 5/8 fixes with it versus 2/8 without.
EXAMPLE_USER = (
    "Issue: `mathx.ops.mul(a, b)` returns the sum instead of the product: `mul(2, 3)` gives 5, "
    'expected 6.\n\nmathx/ops.py\n```python\ndef mul(a, b):\n    """Return a times b."""\n'
    "    return a + b\n\n\ndef neg(a):\n    return -a\n```\n\nReply with the whole corrected file."
)
EXAMPLE_REPLY = (
    'mathx/ops.py\n```python\ndef mul(a, b):\n    """Return a times b."""\n    return a * b\n\n\n'
    "def neg(a):\n    return -a\n```"
)
FENCE = re.compile(r"```[ \t]*([^\n`]*)\n(.*?)(?:```|\Z)", re.S)
PATH_TOKEN = re.compile(r"[\w./-]+\.[A-Za-z0-9]+")
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", "node_modules", ".venv"}


def source_files(root: Path, max_files: int = 8, max_bytes: int = 6000) -> list[Path]:
    """Non-test Python files, smallest repos first: what the model should read and may rewrite."""
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if set(rel.parts) & SKIP_DIRS or is_test_path(rel) or p.name == "__init__.py" and p.stat().st_size == 0:
            continue
        if p.stat().st_size <= max_bytes:
            out.append(rel)
    return out[:max_files]


def relevant_files(files: list[Path], issue: str, test_output: str) -> list[Path]:
    """The files the issue or the failing tests' traceback name (by path or dotted module); all
    files when none is named. A small model does far better with one short file than with five."""
    named = []
    for rel in files:
        dotted = ".".join(rel.with_suffix("").parts)
        if str(rel) in issue or str(rel) in test_output or re.search(rf"\b{re.escape(dotted)}\b", issue):
            named.append(rel)
    return named or files


def is_test_path(rel: Path) -> bool:
    return (
        any(part in ("tests", "test") for part in rel.parts[:-1])
        or rel.name.startswith("test_")
        or rel.name == "conftest.py"
    )


class _Summary(TypedDict):
    """The JSON line printed at the end (the harness adapter reads it)."""

    turns: int
    edits: list[str]
    problems: list[str]
    tests_passed: bool
    finish: str


def run_tests(root: Path, timeout: float) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header"]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, f"tests timed out after {timeout:.0f}s"
    return proc.returncode == 0, tail(proc.stdout + proc.stderr, 1500)


def tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def parse_edits(reply: str, known: list[Path]) -> tuple[dict[str, str], list[str]]:
    """Fenced blocks → {path: content}. The path comes from the line before the fence, the fence's
    info string, or a leading ``# path`` comment; a single-file repo needs none. Returns problems too."""
    edits: dict[str, str] = {}
    problems: list[str] = []
    known_names = {str(p): p for p in known}
    for m in FENCE.finditer(reply):
        info, body = m.group(1).strip(), m.group(2)
        before = reply[: m.start()].rstrip().splitlines()[-1:] or [""]
        candidates = PATH_TOKEN.findall(info) + PATH_TOKEN.findall(before[0])
        first = body.lstrip().splitlines()[:1]
        if first and first[0].startswith("#"):
            candidates += PATH_TOKEN.findall(first[0])
        path = next((c.strip("./") if c.startswith("./") else c for c in candidates if c.endswith(".py")), None)
        if path is not None and path not in known_names:
            # Accept a bare file name that matches exactly one known file.
            matches = [k for k in known_names if Path(k).name == Path(path).name]
            path = matches[0] if len(matches) == 1 else path
        if len(known) == 1 and (path is None or path not in known_names):
            # One file was shown: a block without a path, or under an invented one, rewrites it.
            path = str(known[0])
        if path is None:
            problems.append("a code block without a file path")
            continue
        if Path(path).is_absolute() or ".." in Path(path).parts:
            problems.append(f"refused path outside the repository: {path}")
            continue
        edits[path] = body if body.endswith("\n") else body + "\n"
    if not edits and not problems:
        problems.append("no fenced code block found")
    return edits, problems


def first_prompt(issue: str, root: Path, files: list[Path]) -> str:
    parts = [f"Issue: {issue.strip()}"]
    for rel in files:
        parts.append(f"{rel}\n```python\n{(root / rel).read_text(errors='replace').rstrip()}\n```")
    parts.append("Reply with the whole corrected file.")
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = agent_parser(__doc__.splitlines()[0], max_tokens=512)
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--test-timeout", type=float, default=60.0)
    args = ap.parse_args(argv)
    api_key = api_key_or_none("minimal_agent", args.base_url)
    if api_key is None:
        return 2

    import openai  # late: --help works without it

    client = openai.OpenAI(base_url=args.base_url, api_key=api_key, max_retries=2, timeout=600)
    root = Path(args.root).resolve()
    issue = Path(args.issue_file).read_text()
    passed, output = run_tests(root, args.test_timeout)
    files = relevant_files(source_files(root), issue, output)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": EXAMPLE_USER},
        {"role": "assistant", "content": EXAMPLE_REPLY},
        {"role": "user", "content": first_prompt(issue, root, files)},
    ]
    summary: _Summary = {"turns": 0, "edits": [], "problems": [], "tests_passed": passed, "finish": "budget"}
    for _ in range(args.max_turns):
        try:
            resp = client.chat.completions.create(
                model=args.model, messages=messages, max_tokens=args.max_tokens, temperature=args.temperature
            )
        except openai.APIError as exc:
            summary["finish"] = f"api_error: {exc}"
            print(json.dumps(summary))
            return 2
        summary["turns"] += 1
        reply = resp.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": reply})
        edits, problems = parse_edits(reply, files)
        summary["problems"] += problems
        for rel, content in edits.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            summary["edits"].append(rel)
        passed, output = run_tests(root, args.test_timeout)
        summary["tests_passed"] = passed
        if passed:
            summary["finish"] = "tests_pass"
            break
        feedback = "; ".join(problems) + "\n" if problems else ""
        messages.append(
            {
                "role": "user",
                "content": f"{feedback}The tests still fail:\n```\n{output.strip()}\n```\n"
                "Reply with the whole corrected file, its path on the line before the code block.",
            }
        )
    print(json.dumps(summary))
    return 0 if summary["tests_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
