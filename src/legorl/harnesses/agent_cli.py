"""The command line both first-party agent programs share (``minimal_agent``, ``line_agent``):
where the gateway is, the issue file, the repository root, sampling settings — and the rule that
the session token only ever comes from the environment."""

from __future__ import annotations

import argparse
import os
import sys


def agent_parser(description: str, max_tokens: int) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    ap.add_argument("--model", default="policy")
    ap.add_argument("--issue-file", required=True)
    ap.add_argument("--root", default=".")
    ap.add_argument("--max-tokens", type=int, default=max_tokens)
    ap.add_argument("--temperature", type=float, default=1.0)
    return ap


def api_key_or_none(program: str, base_url: str | None) -> str | None:
    """``OPENAI_API_KEY`` (never a command-line word: a secret, maybe starting with "-"), or None
    after saying on stderr what is missing."""
    api_key = os.environ.get("OPENAI_API_KEY")
    if not base_url or not api_key:
        print(f"{program}: --base-url (or OPENAI_BASE_URL) and OPENAI_API_KEY are required", file=sys.stderr)
        return None
    return api_key
