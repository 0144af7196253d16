"""The first-party one-line-fix harness: a separate program, run inside the sandbox, that talks to an
OpenAI-compatible endpoint (``POST /chat/completions``), like any third-party harness. It speaks
HTTP with the standard library: importing the ``openai`` client costs ~1.1 CPU-s per process, more
than the rest of a rollout of this harness.

Made for small models and short rollouts (the learning benchmark): the issue names the faulty line
("line 3 of `lib/funcs.py`"); the agent shows that file with line numbers and asks for the corrected
line only, in a fenced block. The reply's first code line replaces the named line (the original
indentation is kept, so the model need not reproduce it). One request, no test run of its own: the
grader runs the tests. Usage: OPENAI_API_KEY=TOKEN python -m legorl.harnesses.line_agent --base-url URL
--issue-file F. Exit code 0 when a line was written, 1 when not (no line named, no usable answer),
2 on a usage/transport error. It prints one JSON summary line on stdout last; ``valid_format`` says
whether the reply was a fenced block whose first line is one Python statement.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from legorl import pyparse
from legorl.harnesses.agent_cli import agent_parser, api_key_or_none

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

RETRIES = 2  # transport errors and 5xx answers; a 4xx is final

SYSTEM_PROMPT = "You fix one-line bugs in Python. Reply with the corrected line only, in a ```python block."
# Two worked examples (kept out of the one-line task family, so they give no held-out task away).
# Measured with SmolLM2-135M at T=0.7 on oneline-heldout (128 samples): one example 4.7% solved and
# 32% in format, two examples 27% and 73%.
EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Issue: `mean(2, 4)` returns 4.0, expected 3.0. The bug is on line 3 of `ops.py`.\n\n"
        'ops.py\n```python\n1: def mean(a, b):\n2:     """Return the average of a and b."""\n3:     return a + b / 2\n```'
        "\n\nReply with the corrected line 3 only.",
        "```python\n    return (a + b) / 2\n```",
    ),
    (
        "Issue: `second(['a', 'b', 'c'])` returns 'c', expected 'b'. The bug is on line 3 of `util.py`.\n\n"
        'util.py\n```python\n1: def second(items):\n2:     """Return the second item of items."""\n'
        "3:     return items[2]\n```\n\nReply with the corrected line 3 only.",
        "```python\n    return items[1]\n```",
    ),
)
LINE_REF = re.compile(r"line (\d+) of `([^`\s]+)`")
FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.S)
NUMBER_PREFIX = re.compile(r"^\s*\d+\s*[:|]\s?")


class _Summary(TypedDict):
    turns: int
    edits: list[str]
    problems: list[str]
    answer: str | None
    valid_format: bool
    finish: str


def answer_line(reply: str) -> tuple[str | None, bool]:
    """The line a reply proposes and whether the reply had the asked-for format (a fenced block whose
    first line is one Python statement). Without a fence, the reply's first non-empty line; a copied
    line-number prefix ("3: ") is dropped."""
    m = FENCE.search(reply)
    body = m.group(1) if m else reply
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if not lines:
        return None, False
    line = NUMBER_PREFIX.sub("", lines[0], count=1).rstrip()
    return line, m is not None and is_statement(line)


def is_statement(line: str) -> bool:
    """One Python statement, as a line of a function body (``return`` is allowed)."""
    try:
        tree = pyparse.parse("def _f():\n" + textwrap.indent(line.strip(), "    "))
    except SyntaxError:
        return False
    body = tree.body[0]
    return isinstance(body, ast.FunctionDef) and len(body.body) == 1


def replace_line(path: Path, lineno: int, new: str) -> str | None:
    """Replace line ``lineno`` (1-based) of ``path`` by ``new`` with the old line's indentation;
    returns a problem, or None."""
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    if not 1 <= lineno <= len(lines):
        return f"line {lineno} is not in {path.name} ({len(lines)} lines)"
    old = lines[lineno - 1]
    indent = old[: len(old) - len(old.lstrip())]
    lines[lineno - 1] = indent + new.strip() + "\n"
    path.write_text("".join(lines))
    return None


def finish(summary: _Summary, how: str, code: int) -> int:
    """Print the summary line (the adapter reads it) and return the exit code."""
    summary["finish"] = how
    print(json.dumps(summary))
    return code


def example_turns() -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    for question, reply in EXAMPLES:
        out += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    return out


def chat_completion(base_url: str, api_key: str, body: dict[str, object]) -> str:
    """The first choice's message content of one non-streaming Chat Completions request."""
    req = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
        method="POST",
    )
    for attempt in range(RETRIES + 1):
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                data = json.loads(resp.read())
            break
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            if exc.code < 500 or attempt == RETRIES:
                raise OSError(f"HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            if attempt == RETRIES:
                raise
        time.sleep(0.5 * 2**attempt)
    return data["choices"][0]["message"]["content"] or ""


def numbered(text: str) -> str:
    return "\n".join(f"{i}: {ln}" for i, ln in enumerate(text.rstrip("\n").splitlines(), start=1))


def main(argv: list[str] | None = None) -> int:
    ap = agent_parser(__doc__.splitlines()[0], max_tokens=48)
    args = ap.parse_args(argv)
    api_key = api_key_or_none("line_agent", args.base_url)
    if api_key is None:
        return 2
    summary: _Summary = {"turns": 0, "edits": [], "problems": [], "answer": None, "valid_format": False, "finish": ""}
    root = Path(args.root).resolve()
    issue = Path(args.issue_file).read_text()
    ref = LINE_REF.search(issue)
    target = (root / ref.group(2)).resolve() if ref else None
    if ref is None or target is None or not target.is_file() or root not in target.parents:
        summary["problems"].append("the issue names no line of a file in the repository (`line N of `path``)")
        return finish(summary, "no_line", 1)
    lineno, rel = int(ref.group(1)), ref.group(2)

    user = (
        f"Issue: {issue.strip()}\n\n{rel}\n```python\n{numbered(target.read_text(errors='replace'))}\n```\n\n"
        f"Reply with the corrected line {lineno} only."
    )
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        *example_turns(),
        {"role": "user", "content": user},
    ]
    request = {"model": args.model, "max_tokens": args.max_tokens, "temperature": args.temperature}
    try:
        content = chat_completion(args.base_url, api_key, {"messages": messages, **request})
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        return finish(summary, f"api_error: {exc}", 2)
    summary["turns"] = 1
    line, summary["valid_format"] = answer_line(content)
    summary["answer"] = line
    if line is None:
        summary["problems"].append("empty reply")
        return finish(summary, "no_answer", 1)
    problem = replace_line(target, lineno, line)
    if problem:
        summary["problems"].append(problem)
        return finish(summary, "no_answer", 1)
    summary["edits"].append(rel)
    return finish(summary, "answered", 0)


if __name__ == "__main__":
    sys.exit(main())
