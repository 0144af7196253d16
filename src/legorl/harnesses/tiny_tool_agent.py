"""A tiny tool-calling agent (stdlib only) — the default program of the generic ``command`` harness.

It reads the base URL from ``$OPENAI_BASE_URL`` and the key from ``$OPENAI_API_KEY``, sends the issue
to ``/chat/completions`` with one ``bash`` tool, runs each returned tool call with ``bash -c`` in the
current directory, sends the output back as a ``tool`` message, and stops when a reply has no tool
call or after ``--max-turns``. Prints one JSON line per turn and a final summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the repository and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
SYSTEM = (
    "You fix bugs in the repository in the current directory. Use the bash tool to inspect and edit "
    "files. When the fix is done, answer without a tool call."
)


def chat(base_url: str, key: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--issue-file", required=True)
    ap.add_argument("--max-turns", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--model", default="policy")
    ap.add_argument("--command-timeout", type=float, default=60)
    args = ap.parse_args(argv)
    base_url, key = os.environ["OPENAI_BASE_URL"], os.environ.get("OPENAI_API_KEY", "none")
    messages: list[dict[str, object]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": open(args.issue_file, encoding="utf-8").read()},
    ]
    finish = "budget"
    for turn in range(args.max_turns):
        try:
            resp = chat(
                base_url,
                key,
                {"model": args.model, "messages": messages, "tools": [BASH_TOOL], "max_tokens": args.max_tokens},
            )
        except (urllib.error.URLError, OSError, ValueError) as exc:
            print(json.dumps({"turn": turn, "error": str(exc)}), flush=True)
            print(json.dumps({"finish": "error", "turns": turn}), flush=True)
            return 2
        msg = resp["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        messages.append(
            {"role": "assistant", "content": msg.get("content"), **({"tool_calls": calls} if calls else {})}
        )
        print(json.dumps({"turn": turn, "content": msg.get("content"), "tool_calls": calls}), flush=True)
        if not calls:
            finish = "done"
            break
        for call in calls:
            try:
                command = json.loads(call["function"]["arguments"] or "{}").get("command", "")
            except (ValueError, AttributeError):
                command = ""
            if call["function"]["name"] != "bash" or not command:
                output = "error: call the bash tool with a 'command' argument"
            else:
                try:
                    p = subprocess.run(
                        ["bash", "-c", command], capture_output=True, text=True, timeout=args.command_timeout
                    )
                    output = (p.stdout + p.stderr)[-4000:] + f"\n[exit code {p.returncode}]"
                except subprocess.TimeoutExpired:
                    output = f"[timed out after {args.command_timeout}s]"
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": output})
    print(json.dumps({"finish": finish, "turns": turn + 1}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
