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
Usage: python -m legorl.harnesses.minimal_agent --base-url URL --api-key TOKEN --issue-file F
Exit code 0 when the visible tests pass at the end, 1 when not, 2 on a usage/transport error.
It prints one JSON summary line on stdout last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

SYSTEM_PROMPT = (
    "You are a careful Python programmer. You fix bugs by rewriting whole files. "
    "Reply with the complete corrected file in a fenced code block. Put the file's path on the "
    "line just before the block, like this:\n"
    "pkg/module.py\n```python\n<the whole corrected file>\n```"
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


def is_test_path(rel: Path) -> bool:
    return any(part in ("tests", "test") for part in rel.parts[:-1]) or rel.name.startswith("test_") or rel.name == "conftest.py"


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
        if path is None and len(known) == 1:
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


def first_prompt(issue: str, root: Path, files: list[Path], test_output: str) -> str:
    parts = [f"Issue:\n{issue.strip()}\n", "Repository files:"]
    for rel in files:
        parts.append(f"{rel}\n```python\n{(root / rel).read_text(errors='replace').rstrip()}\n```")
    parts.append(f"Test output:\n```\n{test_output.strip()}\n```")
    parts.append("Reply with the whole corrected file, its path on the line before the code block.")
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    ap.add_argument("--model", default="policy")
    ap.add_argument("--issue-file", required=True)
    ap.add_argument("--root", default=".")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--test-timeout", type=float, default=60.0)
    args = ap.parse_args(argv)
    if not args.base_url or not args.api_key:
        print("minimal_agent: --base-url and --api-key (or OPENAI_BASE_URL/OPENAI_API_KEY) are required", file=sys.stderr)
        return 2

    import openai  # late: --help works without it

    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=2, timeout=600)
    root = Path(args.root).resolve()
    issue = Path(args.issue_file).read_text()
    files = source_files(root)
    passed, output = run_tests(root, args.test_timeout)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": first_prompt(issue, root, files, output)},
    ]
    summary = {"turns": 0, "edits": [], "problems": [], "tests_passed": passed, "finish": "budget"}
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
        messages.append({
            "role": "user",
            "content": f"{feedback}The tests still fail:\n```\n{output.strip()}\n```\n"
            "Reply with the whole corrected file, its path on the line before the code block.",
        })
    print(json.dumps(summary))
    return 0 if summary["tests_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
